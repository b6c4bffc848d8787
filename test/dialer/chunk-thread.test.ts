// Beside the embedded store, contact-load chunks are applied by a worker thread that opens the
// same LMDB database (dialer/chunk-thread.ts), not on the event loop that serves live sessions.
// What a user relies on: the load completes with the same counts and contacts as on the loop,
// the contacts carry the service clock's time, duplicates inside and across loads behave as
// documented, and DIALER_APPLY_THREAD=0 keeps everything on the loop.
import t from 'tap'
import { call, startTestService } from '../support/harness.js'
import { contact, createBatch, waitForOperation } from '../support/dialer.js'

async function offLoopChunks(metricsBase: string): Promise<number> {
  const text = await (await fetch(`${metricsBase}/metrics`)).text()
  return Number(/switchboard_dialer_chunks_applied_off_loop_total (\d+)/.exec(text)?.[1] ?? NaN)
}

// The thread commits the operation's last count before its answer reaches the loop, and the
// loop counts the chunk on that answer: a poll can see the operation succeed a moment before
// the counter moves. Wait for the expected count (briefly) and return the last reading.
async function offLoopChunksReaching(metricsBase: string, expected: number): Promise<number> {
  const deadline = Date.now() + 2_000
  let seen = await offLoopChunks(metricsBase)
  while (seen < expected && Date.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, 10))
    seen = await offLoopChunks(metricsBase)
  }
  return seen
}

t.test('the embedded store: chunks are applied in the thread, with the same outcome as on the loop', async t => {
  // A clock far from real time: what the thread writes must carry the service's time, not its own.
  const now = Date.parse('2031-03-04T05:06:07Z')
  const { base, metricsBase } = await startTestService(t, { clock: { now: () => now }, env: { DIALER_CHUNK_SIZE: '100' } })
  const batchId = await createBatch(base, { duplicateStrategy: 'merge' })
  const first = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: { contacts: Array.from({ length: 450 }, (_, i) => contact(i)) } })
  t.equal(first.status, 202)
  t.match(await waitForOperation(base, first.json.operationId), { status: 'succeeded', totalChunks: 5, chunksCompleted: 5, insertedCount: 450, updatedCount: 0 })
  t.equal(await offLoopChunksReaching(metricsBase, 5), 5, 'all five chunks went through the thread')

  // A second load repeating 50 identifiers (and one twice within itself): merged, not inserted again.
  const again = [...Array.from({ length: 50 }, (_, i) => contact(400 + i, { name: `Again ${i}` })), contact(1000), contact(1000, { name: 'Last wins' })]
  const second = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: { contacts: again } })
  t.match(await waitForOperation(base, second.json.operationId), { status: 'succeeded', insertedCount: 1, updatedCount: 51 })
  t.equal(await offLoopChunksReaching(metricsBase, 6), 6, 'the second load went through the thread too')

  const listed = (await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts?limit=1000`)).json
  t.equal(listed.total, 451, 'every identifier once')
  const byIdentifier = new Map<string, any>(listed.data.map((c: any) => [c.identifier, c]))
  t.equal(byIdentifier.get('c449').name, 'Again 49', 'a repeated identifier was merged')
  t.equal(byIdentifier.get('c1000').name, 'Last wins', 'repeats inside one load apply in request order')
  t.equal(new Date(byIdentifier.get('c0').createdAt).getTime(), now, "contacts carry the service clock's time")
  const batch = (await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json
  t.equal(batch.totalContacts, 451)
})

t.test('DIALER_APPLY_THREAD=0: chunks are applied on the loop', async t => {
  const { base, metricsBase } = await startTestService(t, { env: { DIALER_APPLY_THREAD: '0', DIALER_CHUNK_SIZE: '100' } })
  const batchId = await createBatch(base)
  const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: { contacts: Array.from({ length: 250 }, (_, i) => contact(i)) } })
  t.match(await waitForOperation(base, res.json.operationId), { status: 'succeeded', insertedCount: 250 })
  t.equal(await offLoopChunks(metricsBase), 0)
})
