// The write-behind of live sessions: a write that keeps failing is given up on (logged once,
// counted, shown), never retried in a loop; the session goes on and is persisted again once a
// write succeeds. Consumer ids per session are bounded on the engine side.
import t from 'tap'
import { parseCrews } from '../../engine/crews.js'
import { SessionHost } from '../../engine/host/host.js'
import type { SessionStore } from '../../engine/persistence/session-store.js'
import { ScriptedProvider } from '../../engine/providers/scripted.js'
import { InProcessTransport } from '../../engine/transport.js'
import type { TransportEvent } from '../../engine/transport.js'
import { MemoryBus } from '../../platform/bus/index.js'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { createMetrics, type Metrics } from '../../platform/metrics.js'
import { MemoryStore, MongoStore, type Store } from '../../platform/store/index.js'
import type { Platform } from '../../platform/index.js'
import { SessionRecorder } from '../../reports/index.js'
import { startMongoTestServer } from '../support/mongo-server.js'
import { startTcpProxy } from '../support/tcp-proxy.js'
import { DEFAULT_CREWS } from './fixtures/crews.js'

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))
const SESSION = '6f1d2c3b-4a5e-4f60-8b71-9c0d1e2f3a4b'
const target = { sessionId: SESSION, accountId: 'acme' }

function hostOn(store: Store, env: Record<string, string> = {}, writeBehind?: { maxAttempts?: number; retryMs?: number }) {
  const lines: { level: string; msg: string; [k: string]: unknown }[] = []
  const logger = createLogger('debug', {}, line => void lines.push(JSON.parse(line)))
  const config = loadConfig({ LOG_LEVEL: 'silent', ...env })
  const metrics = createMetrics()
  const platform: Platform = { config, store, bus: new MemoryBus(logger), clock: { now: () => Date.now() }, logger, metrics }
  const host = new SessionHost({
    platform,
    crews: parseCrews(DEFAULT_CREWS),
    recorder: new SessionRecorder(store),
    providers: { scripted: new ScriptedProvider() },
    idleTimeoutMs: 60_000,
    writeBehind,
  })
  return { host, transport: new InProcessTransport(host), lines, metrics }
}

async function metric(metrics: Metrics, name: string): Promise<number> {
  const found = (await metrics.registry.getMetricsAsJSON()).find(m => m.name === name)
  return (found?.values[0]?.value as number | undefined) ?? 0
}

function collector() {
  const events: TransportEvent[] = []
  return {
    listener: (e: TransportEvent) => void events.push(e),
    async until(name: string, count = 1) {
      for (let i = 0; i < 500; i++) {
        if (events.filter(e => e.kind === 'event' && e.name === name).length >= count) return
        await sleep(10)
      }
      throw new Error(`no ${name}`)
    },
  }
}

/** Holds the `n`th journal write of `store` until `release()`; `inserts` counts them. */
function holdInsert(store: SessionStore, n: number) {
  const writeJournal = store.writeJournal.bind(store)
  const gate = { inserts: 0, release: () => {} }
  const held = new Promise<void>(resolve => (gate.release = resolve))
  store.writeJournal = async (...args) => {
    if (++gate.inserts === n) await held
    return writeJournal(...args)
  }
  return gate
}

/** A session as the write-behind sees it; `state` is what its checkpoints hold. */
function writtenSession(id: string, state: { value: string; seq?: number }) {
  return {
    id,
    finished: () => false,
    control: () => ({ value: { active: 'idle' }, context: {} }) as any,
    checkpoint: () => ({ state: 'active', agentId: 'a', checkpoint: state.value, logPosition: state.seq ?? 0, eventSeq: 0, deadlines: { idle: 0, tools: [] }, updatedAt: 0 }) as any,
    fence: () => undefined,
    lost: () => {},
  } as any
}

/** A value JSON.stringify cannot encode (it overflows the stack), as the fuzzer found. */
function deeplyNested(depth: number) {
  let value: unknown = 'bottom'
  for (let i = 0; i < depth; i++) value = { v: value }
  return value
}

t.test('a session whose state cannot be encoded is given up on once (log, metric, health), not retried every 250 ms', async t => {
  const store = new MemoryStore()
  const { host, transport, lines, metrics } = hostOn(store)
  await host.init()
  t.teardown(() => host.stop())
  const c = collector()
  await transport.create({ sessionId: SESSION, consumerId: 'c1', accountId: 'acme', crewId: 'demo', arguments: { deep: deeplyNested(200_000) } }, c.listener)
  await sleep(1500)
  const failures = lines.filter(l => /persistence failed/.test(l.msg))
  t.equal(failures.length, 1, 'logged once')
  t.equal(lines.filter(l => /retrying/.test(l.msg)).length, 0, 'an unencodable value is not retried')
  t.equal(failures[0]!.sessionId, SESSION)
  t.equal(await metric(metrics, 'switchboard_session_persistence_failures_total'), 1, 'counted')
  t.equal(await metric(metrics, 'switchboard_sessions_persistence_stopped'), 1, 'shown as unpersisted')
  t.match(host.writeBehind.unpersistedSessions(), { count: 1, sessions: [SESSION] })

  // The session goes on; its next change tries once more (one attempt, no loop, no new log line).
  await transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'hello' })
  await c.until('assistant.message')
  const history = (await transport.command(target, { type: 'query.history', after: 0, limit: 10 })) as { data: unknown[] }
  t.ok(Array.isArray(history.data), 'history answers (does not wait forever for a write that will not happen)')
  await sleep(500)
  t.equal(lines.filter(l => /persistence failed/.test(l.msg)).length, 1, 'still logged once')

  await transport.command(target, { type: 'session.destroy', reason: 'finished', by: 'channel' })
  t.equal(host.writeBehind.unpersistedSessions().count, 0, 'the mark goes with the session')
  t.equal(await metric(metrics, 'switchboard_sessions_persistence_stopped'), 0)
})

t.test('a store outage: retried with back-off a few times, then given up; persisted again after the store is back', async t => {
  const mongo = await startMongoTestServer()
  t.teardown(() => mongo.stop())
  const proxy = await startTcpProxy(Number(new URL(mongo.url).port))
  t.teardown(() => proxy.close())
  const url = new URL(mongo.url)
  url.port = String(proxy.port)
  url.pathname = '/sb_write_behind'
  const store = await MongoStore.connect(url.toString(), { serverSelectionTimeoutMS: 300 })
  t.teardown(() => store.close())
  const { host, transport, lines, metrics } = hostOn(store, {}, { maxAttempts: 4, retryMs: 50 })
  await host.init()
  t.teardown(() => host.stop())
  const c = collector()
  await transport.create({ sessionId: SESSION, consumerId: 'c1', accountId: 'acme', crewId: 'demo', arguments: {} }, c.listener)
  await c.until('crew.status.waiting')
  await transport.command(target, { type: 'query.history', after: 0, limit: 10 })

  proxy.cut()
  await transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'while the store is away' })
  await c.until('crew.status.waiting', 2)
  const deadline = Date.now() + 15_000
  while (host.writeBehind.unpersistedSessions().count === 0 && Date.now() < deadline) await sleep(50)
  t.equal(host.writeBehind.unpersistedSessions().count, 1, 'given up after the retries')
  const retries = lines.filter(l => /retrying/.test(l.msg)).length
  t.equal(retries, 3, 'retried maxAttempts - 1 times, with back-off')
  await sleep(1000)
  t.equal(lines.filter(l => /retrying/.test(l.msg)).length, retries, 'no retry after giving up')
  t.equal(lines.filter(l => /persistence failed/.test(l.msg)).length, 1, 'logged once')

  proxy.heal()
  await transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'store is back' })
  await c.until('crew.status.waiting', 3)
  const back = Date.now() + 15_000
  while (host.writeBehind.unpersistedSessions().count > 0 && Date.now() < back) await sleep(50)
  t.equal(host.writeBehind.unpersistedSessions().count, 0, 'persisted again')
  t.equal(await metric(metrics, 'switchboard_sessions_persistence_stopped'), 0)
  t.ok(lines.some(l => /persisted again/.test(l.msg)), 'the recovery is said')
  const history = (await transport.command(target, { type: 'query.history', after: 0, limit: 50 })) as { data: { type: string; text?: string }[] }
  t.same(
    history.data.filter(e => e.type === 'message.user').map(e => e.text),
    ["while the store is away", "store is back"],
    'the entries held during the outage were written',
  )
})

t.test('consumer ids per session are bounded on the engine side; the least recently used goes first', async t => {
  const store = new MemoryStore()
  const { host, transport } = hostOn(store, { ENGINE_MAX_CONSUMER_IDS_PER_SESSION: '3' })
  await host.init()
  t.teardown(() => host.stop())
  const c = collector()
  await transport.create({ sessionId: SESSION, consumerId: 'c0', accountId: 'acme', crewId: 'demo', arguments: {} }, c.listener)
  for (let i = 1; i <= 200; i++) await transport.command(target, { type: 'consumer.attach', consumerId: `c${i}` })
  // c198 is used again: it is now the most recent, so attaching one more forgets c199.
  await transport.command(target, { type: 'user.message', consumerId: 'c198', text: 'hi' })
  await transport.command(target, { type: 'consumer.attach', consumerId: 'c201' })
  const doc = await store.collection('engine_sessions').findOne({ _id: SESSION })
  t.ok(doc!.consumers.length <= 3, `the stored list is bounded (${doc!.consumers.length})`)
  for (const gone of ['c0', 'c1', 'c150', 'c199']) {
    await t.rejects(transport.command(target, { type: 'user.message', consumerId: gone, text: 'x' }), { kind: 'invalid', code: 'UNKNOWN_CONSUMER' }, `${gone} forgotten`)
  }
  await c.until('crew.status.waiting', 2)
  for (const known of ['c198', 'c200', 'c201']) {
    t.match(await transport.command(target, { type: 'user.message', consumerId: known, text: 'x' }), { accepted: true }, `${known} known`)
  }
  // Listening again makes a forgotten consumer known again.
  await transport.command(target, { type: 'consumer.attach', consumerId: 'c0' })
  t.match(await transport.command(target, { type: 'user.message', consumerId: 'c0', text: 'back' }), { accepted: true })
})

t.test('a message waits for its own history entry: a failed checkpoint of an earlier batch does not acknowledge an entry still being written', async t => {
  const { WriteBehind } = await import('../../engine/persistence/session-writer.js')
  const { SessionStore } = await import('../../engine/persistence/session-store.js')
  const logger = createLogger('silent')
  const store = new SessionStore(new MemoryStore())
  // Gates: the first checkpoint write fails when told to; the second batch's journal write waits.
  let failCheckpoint!: (error: Error) => void
  const checkpointFailed = new Promise<never>((_, reject) => (failCheckpoint = reject))
  const secondInsert = holdInsert(store, 2)
  store.writeCheckpoint = async () => checkpointFailed
  const writeBehind = new WriteBehind({ store, logger, metrics: createMetrics(), now: Date.now, fenced: false, stopping: () => false, maxAttempts: 5, retryMs: 10_000, checkpoints: { entries: 1, countsMs: 0 } })
  const state = { value: '{}', seq: 0 }
  const records = { note: () => {}, flushCounts: () => {}, written: async () => {} } as any
  const writer = writeBehind.writer(writtenSession(SESSION, state), records, 0)

  state.seq = 1
  writer.append({ seq: 1, at: 1, type: 'message.user', text: 'one' })
  await writer.entriesWritten(1)
  t.equal(secondInsert.inserts, 1, 'the first entry is written (its checkpoint write is still pending)')
  state.seq = 2
  writer.append({ seq: 2, at: 2, type: 'message.user', text: 'two' })
  let acknowledged = false
  const second = writer.entriesWritten(2).then(() => (acknowledged = true))
  for (let i = 0; i < 400 && secondInsert.inserts < 2; i++) await sleep(5)
  t.equal(secondInsert.inserts, 2, 'the second batch is writing its journal (held)')
  failCheckpoint(new Error('checkpoint refused'))
  await sleep(20)
  // A message arriving now (another PUT up to the same entry) waits as well.
  let late = false
  const another = writer.entriesWritten(2).then(() => (late = true))
  await sleep(20)
  t.notOk(acknowledged || late, 'the first batch`s failed checkpoint does not acknowledge the second entry')
  secondInsert.release()
  await Promise.all([second, another])
  t.ok(acknowledged && late)
  t.notOk(writer.holdsUpTo(2), 'it was written')
  t.same((await store.entriesAfter(SESSION, 0)).map(e => e.seq), [1, 2])
})

t.test('a history read waits for the entries asked for: an earlier batch`s checkpoint that ends does not count a later batch`s entries as written', async t => {
  const { WriteBehind } = await import('../../engine/persistence/session-writer.js')
  const { SessionStore } = await import('../../engine/persistence/session-store.js')
  const store = new SessionStore(new MemoryStore())
  // Gates: the first checkpoint write waits until released (then succeeds); the second batch's journal write waits.
  let releaseCheckpoint!: () => void
  const checkpointHeld = new Promise<void>(resolve => (releaseCheckpoint = resolve))
  let checkpoints = 0
  store.writeCheckpoint = async () => {
    if (++checkpoints === 1) await checkpointHeld
    return true
  }
  const secondInsert = holdInsert(store, 2)
  const writeBehind = new WriteBehind({ store, logger: createLogger('silent'), metrics: createMetrics(), now: Date.now, fenced: false, stopping: () => false, checkpoints: { entries: 1, countsMs: 0 } })
  const state = { value: '{}', seq: 1 }
  const records = { note: () => {}, flushCounts: () => {}, written: async () => {} } as any
  const writer = writeBehind.writer(writtenSession(SESSION, state), records, 0)

  writer.append({ seq: 1, at: 1, type: 'message.user', text: 'one' })
  await writer.entriesWritten(1)
  for (let i = 0; i < 400 && checkpoints < 1; i++) await sleep(5)
  t.equal(checkpoints, 1, 'the first batch`s checkpoint is being written (held)')
  state.seq = 2
  writer.append({ seq: 2, at: 2, type: 'session.paused' })
  for (let i = 0; i < 400 && secondInsert.inserts < 2; i++) await sleep(5)
  t.equal(secondInsert.inserts, 2, 'the second batch is writing its journal (held)')
  // What GET /history waits for before it reads the journal.
  let flushed = false
  const read = writer.flushed().then(() => (flushed = true))
  releaseCheckpoint()
  await sleep(30)
  t.notOk(flushed, 'not flushed while the second entry is still being written')
  secondInsert.release()
  await read
  t.same((await store.entriesAfter(SESSION, 0)).map(e => e.seq), [1, 2], 'the read finds both entries')
})

t.test('checkpoints follow the policy: not again for what the opening covers, then every N entries with the record`s counts; quiet only once one covers everything', async t => {
  const { WriteBehind } = await import('../../engine/persistence/session-writer.js')
  const { SessionStore } = await import('../../engine/persistence/session-store.js')
  const store = new SessionStore(new MemoryStore())
  const written: string[] = []
  store.writeCheckpoint = async (_id, write) => {
    written.push(write.checkpoint)
    return true
  }
  const writeBehind = new WriteBehind({ store, logger: createLogger('silent'), metrics: createMetrics(), now: Date.now, fenced: false, stopping: () => false, checkpoints: { entries: 3, countsMs: 60_000 } })
  const counted: number[] = []
  const records = { note: () => {}, flushCounts: (upTo: number) => void counted.push(upTo), written: async () => {} } as any

  // Opened: its document was inserted with the checkpoint of seq 1 (the opening).
  const state = { value: 'opening', seq: 1 }
  const writer = writeBehind.writer(writtenSession(SESSION, state), records, 1)
  writer.append({ seq: 1, at: 1, type: 'session.created' })
  await writer.flushed()
  t.same(written, [], 'the opening checkpoint is not written again')
  t.ok(writer.quiet(), 'nothing left to write: the session may hibernate')

  for (const seq of [2, 3]) {
    state.value = `at ${seq}`
    state.seq = seq
    writer.append({ seq, at: seq, type: 'message.user', text: String(seq) })
    await writer.flushed()
  }
  t.same(written, [], 'two entries past it: not yet')
  t.notOk(writer.quiet(), 'not quiet: the checkpoint does not cover them')
  state.value = 'at 4'
  state.seq = 4
  writer.append({ seq: 4, at: 4, type: 'message.user', text: '4' })
  await writer.flushed()
  t.same(written, ['at 4'], 'three past it: one checkpoint')
  t.same(counted, [4], 'the record`s counts with it, as of the same seq')
  t.ok(writer.quiet())

  // Asked for (hibernation, hand-over): written whatever the policy says.
  state.value = 'at 5'
  state.seq = 5
  writer.append({ seq: 5, at: 5, type: 'session.paused' })
  await writer.flushed()
  t.same(written, ['at 4'])
  writer.checkpoint()
  await writer.flushed()
  t.same(written, ['at 4', 'at 5'], 'asked for: written')
  t.same((await store.entriesAfter(SESSION, 0)).map(e => e.seq), [1, 2, 3, 4, 5])
})
