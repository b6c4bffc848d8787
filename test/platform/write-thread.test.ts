// Writes to the embedded store run in a thread of their own (platform/store/write-thread.ts).
// store-contract.test.ts runs every contract subtest through it; this file checks what the
// thread adds: a read after an acknowledged write sees it, writes keep the order they were
// asked in, and a thread that is missing or dies never loses track of a write.
import t from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ThreadRequests } from '../../platform/thread-requests.js'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import { DuplicateKeyError, type Doc } from '../../platform/store/types.js'
import { OffLoopStore } from '../../platform/store/write-thread.js'

function openStores(t: Tap.Test) {
  const path = mkdtempSync(join(tmpdir(), 'sb-write-thread-'))
  const local = new LmdbStore({ path })
  const offLoop = new OffLoopStore(local)
  t.teardown(async () => {
    await offLoop.close()
    await local.close()
    rmSync(path, { recursive: true, force: true })
  })
  return { local, offLoop }
}

t.test('a read that follows an acknowledged write sees it, though this loop read the same document just before', async t => {
  const { offLoop } = openStores(t)
  const counters = offLoop.collection<Doc>('counters')
  await counters.insertOne({ _id: 'c', n: 0 })
  for (let i = 1; i <= 50; i++) {
    // The read opens this loop's read snapshot; the thread's write commits after it.
    t.equal((await counters.findOne({ _id: 'c' }))?.n, i - 1)
    const result = await counters.updateOne({ _id: 'c' }, { $inc: { n: 1 } })
    if (result.modifiedCount !== 1) t.fail(`write ${i} not applied`)
    const after = await counters.findOne({ _id: 'c' })
    if (after?.n !== i) return t.fail(`read after write ${i} saw ${after?.n}`)
  }
  t.pass('50 writes, each seen by the read after it')
})

t.test('writes asked for without waiting are committed in the order they were asked', async t => {
  const { offLoop } = openStores(t)
  const log = offLoop.collection<Doc>('log')
  await log.insertOne({ _id: 'l', seq: [] as number[], last: -1 })
  const writes: Promise<unknown>[] = []
  for (let i = 0; i < 300; i++) {
    writes.push(log.updateOne({ _id: 'l' }, { $push: { seq: i }, $set: { last: i } }))
    // Some in later macrotasks, so that several messages to the thread are in flight at once.
    if (i % 100 === 99) await new Promise(resolve => setImmediate(resolve))
  }
  await Promise.all(writes)
  const doc = await log.findOne({ _id: 'l' })
  t.same(doc?.seq, Array.from({ length: 300 }, (_, i) => i), 'every write, in order')
  t.equal(doc?.last, 299, 'the last one asked for is the last one applied')
})

t.test("a write the thread refuses is refused here with the store's error class, and the batch's other writes stand", async t => {
  const { offLoop } = openStores(t)
  const docs = offLoop.collection<Doc>('docs')
  await docs.insertOne({ _id: 'a', n: 1 })
  const [duplicate, other] = await Promise.allSettled([docs.insertOne({ _id: 'a', n: 2 }), docs.insertOne({ _id: 'b', n: 3 })])
  t.equal(duplicate.status, 'rejected')
  const error = (duplicate as PromiseRejectedResult).reason
  t.ok(error instanceof DuplicateKeyError, 'DuplicateKeyError')
  t.equal(error.code, 11000)
  t.equal(other.status, 'fulfilled', 'the write beside it in the same message')
  t.same(await docs.find({}, { sort: { _id: 1 } }), [{ _id: 'a', n: 1 }, { _id: 'b', n: 3 }])
})

t.test("a request in flight when the thread dies is answered 'lost'; a thread that cannot be kept up leaves the work to the caller", async t => {
  const requests = new ThreadRequests<{ id: number; value?: number; exit?: boolean }, { id: number; value: number }>(new URL('../support/', import.meta.url).href + 'x.ts', 'echo-worker', 2)
  t.same(await requests.request(id => ({ id, value: 7 })), { id: 0, value: 7 }, 'answered')
  const [dying, beside] = await Promise.all([requests.request(id => ({ id, exit: true })), requests.request(id => ({ id, value: 8 }))])
  t.equal(dying, 'lost', 'the request that killed it')
  t.equal(beside, 'lost', 'and the one in flight beside it: the thread may or may not have done it')
  t.same(await requests.request(id => ({ id, value: 9 })), { id: 3, value: 9 }, 'a second thread started')
  t.equal(await requests.request(id => ({ id, exit: true })), 'lost')
  t.equal(await requests.request(id => ({ id, value: 10 })), 'unsent', 'no third start: the caller does it')
  t.equal(await requests.request(() => ({ id: -1, value: (() => 1) as unknown as number })), 'unsent')
})
