// The embedded default is a database: what a `make run`-style process acknowledged is there after
// a kill -9 and a start on the same DATA_DIR. One real process (main.js, no MONGO_URL, no
// NATS_URL) takes a key issued by the key CLI into the same DATA_DIR while it runs, a blocked
// address, an idempotent batch creation, a conversation and five contact loads; it is killed
// with SIGKILL while the loads are being applied, right after a user message was accepted and
// during an outbound session's first reply. The second process must serve all of it: the loads
// complete, the session answers the message it had accepted and takes new ones (restored as
// after a failover), the outbound session gives its first reply, the report has its record, and
// a listener resumes with no id reused. After a clean stop a third process numbers on without a gap.
import t from 'tap'
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { API_KEYS, call, KEYS } from '../support/harness.js'
import { buildService, startProcess, waitHealthy } from '../support/processes.js'
import { contact, createBatch, phone, waitForOperation } from '../support/dialer.js'
import { ADMIN, CHANNEL, createSession, openSse } from '../support/sse.js'
import { crewsFile, DEFAULT_CREWS } from '../engine/fixtures/crews.js'

const run = promisify(execFile)
const USER = { UserId: 'supervisor-1' }
const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))

async function until<T>(what: string, check: () => Promise<T | undefined | false>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await check()
    if (value) return value
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`)
    await sleep(100)
  }
}

// Sessions' writes on the loop and in the store's write thread (ENGINE_WRITE_THREAD; its default depends on the cores).
for (const writeThread of ['1', '0']) {
  t.test(`kill -9 mid-load and mid-conversation, then a restart on the same DATA_DIR (ENGINE_WRITE_THREAD=${writeThread})`, async t => {
    const dataDir = mkdtempSync(join(tmpdir(), 'sb-restart-'))
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
    // Small chunks, one worker: the loads take a while to apply, so the kill lands in the middle.
    // Replies stream a word every 150 ms: an outbound session's first reply is still going at the kill.
    const demo = DEFAULT_CREWS.crews.find((c: { id: string }) => c.id === 'demo')
    const CREWS_FILE = crewsFile({ patchDemo: { assistant: { ...demo.assistant, chunkDelayMs: 150 } } })
    const env = { DATA_DIR: dataDir, API_KEYS, LOG_LEVEL: 'warn', DIALER_CHUNK_SIZE: '10', DIALER_WORKER_CONCURRENCY: '1', DIALER_CYCLE_MS: '0', ENGINE_WRITE_THREAD: writeThread, CREWS_FILE }
    const first = await startProcess(t, 'embedded-1', env)
    t.match(await waitHealthy(first), { store: 'lmdb', bus: 'embedded' })

    // A key issued by the CLI while the service runs: the service reads the same database.
    const cli = await run(process.execPath, [join(buildService(), 'cli', 'keys.js'), 'issue', '--account', 'acme', '--roles', 'dialer,reports', '--name', 'restart test'], {
      env: { PATH: process.env.PATH ?? '', DATA_DIR: dataDir },
    })
    const issued = JSON.parse(cli.stdout) as { keyId: string; key: string }
    t.equal((await call(first.base, 'GET', '/dialer/v1/batches', { key: issued.key })).status, 200, 'the CLI key works on the running service')

    const batchId = await createBatch(first.base)
    const blocked = await call(first.base, 'POST', '/dialer/v1/blocked-addresses', { body: { address: phone(1), addressType: 'phone', reason: 'asked' } })
    t.equal(blocked.status, 200)
    const createOnce = { body: { name: 'Once', channel: 'email', duplicateStrategy: 'skip' }, headers: { 'Idempotency-Key': 'restart-create-1' } }
    const created = await call(first.base, 'POST', '/dialer/v1/batches', createOnce)
    t.equal(created.status, 201)

    // A conversation: one full turn, then a message accepted just before the kill.
    const session = await createSession(first.base)
    const { sessionId, consumerId } = session
    await session.stream.next('crew.status.waiting')
    t.equal((await call(first.base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'first question' } })).status, 201)
    await session.stream.next('assistant.message')

    const operations: string[] = []
    for (let load = 0; load < 5; load++) {
      const contacts = Array.from({ length: 1000 }, (_, i) => contact(load * 1000 + i + 2))
      const res = await call(first.base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: { contacts } })
      t.equal(res.status, 202, `load ${load} acknowledged`)
      operations.push(res.json.operationId)
    }
    const accepted = await call(first.base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'second question' } })
    t.equal(accepted.status, 201, 'a user message acknowledged')
    const last = await call(first.base, 'GET', `/dialer/v1/batches/operations/${operations[4]}`)
    t.ok(['pending', 'running'].includes(last.json.status), `the last load is still being applied at the kill (${last.json.status})`)
    // An outbound session that speaks first, killed during that first reply: it has written no
    // snapshot of its own yet, only the one it was inserted with.
    const outbound = await createSession(first.base, { body: { outbound: { type: 'dynamic', parameters: { previousWhisperedMessages: [{ author: 'agent', text: 'Calling about the renewal' }] } } } })
    await outbound.stream.next('assistant.response')
    // The ids its listener was sent before the kill: numbered past the session's stored count
    // (a reply's events are counted in the store at its end).
    const seenBeforeKill = Math.max(...outbound.stream.events.map(e => Number(e.id ?? 0)))
    await first.kill()
    session.stream.close()
    outbound.stream.close()

    const second = await startProcess(t, 'embedded-2', env)
    await waitHealthy(second)
    const base = second.base

    t.equal((await call(base, 'GET', '/dialer/v1/batches', { key: issued.key })).status, 200, 'the CLI key survived')
    t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).status, 200, 'the batch survived')

    // Every acknowledged load completes after the restart, each contact applied once.
    let inserted = 0
    for (const operationId of operations) {
      const done = await waitForOperation(base, operationId, KEYS.acme, 60_000)
      t.equal(done.status, 'succeeded', `operation ${operationId} completed`)
      inserted += done.insertedCount
    }
    const listed = await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts?limit=1`)
    t.equal(listed.json.total, 5000, 'all 5,000 contacts, none twice')
    t.equal(inserted, 5000, 'the operations counted each contact once')

    const blockedList = await call(base, 'GET', `/dialer/v1/blocked-addresses?address=${phone(1)}`)
    t.equal(blockedList.status, 200)
    t.match(JSON.stringify(blockedList.json), phone(1), 'the blocked address survived')

    const replay = await call(base, 'POST', '/dialer/v1/batches', createOnce)
    t.equal(replay.headers.get('idempotency-replayed'), 'true', 'the idempotency record survived')
    t.equal(replay.json.batchId, created.json.batchId)

    const logs = await call(base, 'GET', `/dialer/v1/batches/${batchId}/logs?limit=100`)
    t.ok(logs.json.data.some((l: any) => l.operation === 'contacts_added'), 'the batch log survived and grew')

    // The session: restored on its first command, the accepted message answered, a new one too.
    const history = async () => (await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: USER })).json
    const texts = async () => JSON.stringify(await history())
    t.match(await texts(), 'second question', 'the acknowledged user message is in the history')
    // Its reply was cut by the kill: the restore gives it. A new message sent meanwhile is
    // answered by the reply after it.
    t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'third question' } })).status, 201, 'the session takes a new message')
    await until('the replies', async () => {
      const all = await texts()
      return all.includes('You said: second question') && all.includes('You said: third question')
    })
    t.pass('the message accepted before the kill and the new one are answered')

    // The outbound session is restored too, and gives the first reply the kill cut.
    const outboundHistory = async () => (await call(base, 'GET', `${ADMIN}/${outbound.sessionId}/history`, { headers: USER })).json
    t.ok(Array.isArray((await outboundHistory()).data), 'the outbound session cut in its first reply is restored')
    const firstReply = await until('its first reply', async () => (await outboundHistory()).data.find((e: { type: string }) => e.type === 'message.assistant'))
    t.match(firstReply, { type: 'message.assistant', text: String }, 'its first reply is given after the restart')
    // Its listener resumes from the last id it was sent: the events of the dead process are
    // gone (one stream.gap says so), and no later event reuses one of their ids, so a client
    // that de-duplicates by id drops nothing new.
    const resumed = await openSse(base, 'POST', `${CHANNEL}/${outbound.sessionId}/listen`, { headers: { 'Last-Event-ID': String(seenBeforeKill) } })
    t.equal(resumed.status, 200, `a resume from id ${seenBeforeKill}, sent before the kill, is accepted (${JSON.stringify(resumed.json)})`)
    if (resumed.stream) {
      const attached = await resumed.stream.next('session.consumer.attached')
      t.match(attached.data, { resumed: true }, 'attached as a resume')
      const gap = await resumed.stream.next('stream.gap')
      t.ok(Number(gap.id) >= seenBeforeKill, `the gap covers the ids of the dead process (${gap.id} >= ${seenBeforeKill})`)
      t.equal((await call(base, 'PUT', `${CHANNEL}/${outbound.sessionId}/${outbound.consumerId}`, { body: { message: 'still there?' } })).status, 201)
      await resumed.stream.next(e => e.event === 'assistant.message' && JSON.stringify(e.data).includes('still there?'), 15_000)
      const after = resumed.stream.events.filter(e => e.event !== 'session.consumer.attached' && e.event !== 'stream.gap' && e.event !== 'hearthbeat')
      t.ok(after.length > 0 && after.every(e => Number(e.id) > seenBeforeKill), `every event after the restart has an id past ${seenBeforeKill}: ${after.map(e => `${e.id} ${e.event}`).join(', ')}`)
      await resumed.stream.next('crew.status.waiting')
    }

    // Its report record, and its counts exact: what the history holds, none twice, none missing.
    // (They are written with the session's checkpoints; the restore counts what the journal
    // holds past the record's own seq.)
    const now = Date.now()
    const report = await call(base, 'GET', `/engine/v1/api/reports/sessions-detail?page=0&pageSize=50&crew_id=demo&start_ts=${now - 3_600_000}&end_ts=${now + 60_000}`)
    t.equal(report.status, 200)
    t.match(JSON.stringify(report.json), sessionId, 'the session record survived')
    const entries = (await history()).data as { type: string }[]
    const expected = { userMessages: entries.filter(e => e.type === 'message.user').length, assistantMessages: entries.filter(e => e.type === 'message.assistant').length }
    t.same(expected, { userMessages: 3, assistantMessages: 3 }, 'three questions, three answers in the history')
    const row = await until('the counts in the listing', async () => {
      const listing = await call(base, 'GET', `${ADMIN}s?limit=50`, { headers: USER })
      const found = listing.json.data?.find((r: { sessionId: string }) => r.sessionId === sessionId)
      return found && found.userMessages === expected.userMessages && found.assistantMessages === expected.assistantMessages ? found : undefined
    }, 15_000).catch(async error => {
      const listing = await call(base, 'GET', `${ADMIN}s?limit=50`, { headers: USER })
      t.fail(`${(error as Error).message}: ${JSON.stringify(listing.json.data?.find((r: { sessionId: string }) => r.sessionId === sessionId))}`)
      return undefined
    })
    if (row) t.match(row, { messages: 6, userMessages: 3, assistantMessages: 3 }, 'the report record counts what the history holds after a kill mid-conversation')
    await second.terminate()

    // A clean stop: the next process numbers on from the exact last id, and a resume sees no gap.
    const lastId = Math.max(...(resumed.stream?.events ?? []).map(e => Number(e.id ?? 0)))
    resumed.stream?.close()
    const third = await startProcess(t, 'embedded-3', env)
    await waitHealthy(third)
    const again = await openSse(third.base, 'POST', `${CHANNEL}/${outbound.sessionId}/listen`, { headers: { 'Last-Event-ID': String(lastId) } })
    t.equal(again.status, 200, `a resume from ${lastId} after a clean stop`)
    if (again.stream) {
      await again.stream.next('session.consumer.attached')
      t.equal((await call(third.base, 'PUT', `${CHANNEL}/${outbound.sessionId}/${outbound.consumerId}`, { body: { message: 'after a clean stop' } })).status, 201)
      await again.stream.next(e => e.event === 'assistant.message' && JSON.stringify(e.data).includes('after a clean stop'), 15_000)
      t.notOk(again.stream.events.some(e => e.event === 'stream.gap'), 'no stream.gap: nothing was lost')
      const events = again.stream.events.filter(e => e.event !== 'session.consumer.attached' && e.event !== 'hearthbeat')
      t.equal(Number(events[0]?.id), lastId + 1, `numbered on from the last id (${events.map(e => `${e.id} ${e.event}`).join(', ')})`)
      again.stream.close()
    }
    await third.terminate()
  })
}
