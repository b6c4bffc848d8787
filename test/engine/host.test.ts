// The engine behind its transport: persistence after every turn, restore on another node from
// the store, deadlines re-armed on restore, idle expiry.
import t from 'tap'
import { createEngine } from '../../engine/index.js'
import { parseCrews } from '../../engine/crews.js'
import type { TransportEvent } from '../../engine/transport.js'
import { MemoryBus } from '../../platform/bus/index.js'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { createMetrics } from '../../platform/metrics.js'
import { MemoryStore, type Store } from '../../platform/store/index.js'
import type { Platform } from '../../platform/index.js'
import { call, eventually, startTestService } from '../support/harness.js'
import { ADMIN, CHANNEL, createSession, openSse } from '../support/sse.js'
import { crewsFile, DEFAULT_CREWS } from './fixtures/crews.js'

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))
const TOOL_TIMEOUT = 300

/** An in-process engine on `store`; `chunkDelayMs` slows the demo crew's replies (streamed word by word). */
function node(store: Store, env: Record<string, string> = {}, chunkDelayMs?: number) {
  const config = loadConfig({ LOG_LEVEL: 'silent', ...env })
  const logger = createLogger('silent')
  const platform: Platform = { config, store, bus: new MemoryBus(logger), clock: { now: () => Date.now() }, logger, metrics: createMetrics() }
  const crews = parseCrews({
    crews: DEFAULT_CREWS.crews.map((c: any) => ({
      ...c,
      ...(c.id === 'demo' && chunkDelayMs !== undefined ? { assistant: { ...c.assistant, chunkDelayMs } } : {}),
      tools: c.tools.map((tool: any) => (tool.handler === 'external' ? { ...tool, timeoutMs: TOOL_TIMEOUT } : tool)),
    })),
  })
  return createEngine(platform, { crews })
}

function collector() {
  const events: TransportEvent[] = []
  return {
    events,
    listener: (e: TransportEvent) => void events.push(e),
    names: () => events.map(e => (e.kind === 'event' ? e.name : `closed:${e.reason}`)),
    async until(name: string, count = 1) {
      const seen = () => events.filter(e => (e.kind === 'event' ? e.name : `closed:${e.reason}`) === name).length
      if ((await eventually(async () => seen(), n => n >= count)) < count) throw new Error(`no ${name}; got ${this.names().join(', ')}`)
    },
  }
}

const SESSION = '0d9a7f0e-5b1c-4c1e-8a41-2f7d6b3c9e01'
const target = { sessionId: SESSION, accountId: 'acme' }

/** A node on `store` with the test's session created on it (its events collected). */
async function nodeWithSession(store: Store, create: Record<string, unknown> = {}, chunkDelayMs?: number, env: Record<string, string> = {}) {
  const a = node(store, env, chunkDelayMs)
  await a.start()
  const c = collector()
  await a.transport.create({ sessionId: SESSION, consumerId: 'c1', accountId: 'acme', crewId: 'demo', arguments: { name: 'Ana' }, ...create } as any, c.listener)
  return { a, c }
}

/** Node B on the same store: its listener restores the session, `ask` (if given) is sent, and it waits for the next assistant.message. */
async function answeredOnAnotherNode(t: { teardown(fn: () => unknown): void }, store: Store, ask?: string) {
  const b = node(store)
  await b.start()
  t.teardown(() => b.stop())
  const c = collector()
  await b.transport.subscribe(target, c.listener)
  if (ask !== undefined) await b.transport.command(target, { type: 'user.message', consumerId: 'c1', text: ask })
  await c.until('assistant.message')
  return { b, c }
}

t.test('a turn is one journal write (its entries and the control state); the checkpoint follows every few entries', async t => {
  const store = new MemoryStore()
  const { a, c } = await nodeWithSession(store, {}, undefined, { ENGINE_CHECKPOINT_ENTRIES: '6' })
  t.teardown(() => a.stop())
  const journal = store.orderedLog<any>('engine_session_journal')
  const doc = () => store.collection('engine_sessions').findOne({ _id: SESSION })
  await a.transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'hello' })
  await c.until('crew.status.waiting', 2)
  await a.transport.command(target, { type: 'query.history', after: 0, limit: 10 }) // waits for the writes
  const entries = await journal.read(SESSION, 0)
  t.same(entries.map(r => r.value.type), ['session.created', 'message.user', 'turn.started', 'message.assistant'], 'the entries, at their seq')
  t.same(entries.map(r => r.position), [1, 2, 3, 4])
  t.match(await journal.get(SESSION, 0), { seq: 4, control: { value: { active: 'idle' }, context: { turnId: 1, replyOwed: false, agentId: 'general' } } }, 'the control state as of the last entry')
  t.match(await doc(), { state: 'active', agentId: 'general', logPosition: 1, accountId: 'acme', crewId: 'demo' }, 'the checkpoint is still the opening one')

  await a.transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'again' })
  await c.until('crew.status.waiting', 3)
  await a.transport.command(target, { type: 'query.history', after: 0, limit: 10 })
  const checkpoint = JSON.parse((await doc())!.snapshot)
  t.equal((await doc())!.logPosition, 7, 'six entries past the last checkpoint: a new one')
  t.match(checkpoint, { logPosition: 7, control: { value: { active: 'idle' }, context: { turnId: 2 } } })
  t.same(checkpoint.conversation.messages.map((m: any) => m.text), ['hello', 'Hello! How can I help you today?', 'again', 'You said: again'], 'with the conversation')
})

t.test('another node restores a session from the store and carries on', async t => {
  const store = new MemoryStore()
  const { a, c } = await nodeWithSession(store)
  await a.transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'hello' })
  await c.until('crew.status.waiting', 2)
  await a.transport.command(target, { type: 'admin.pause', userId: 'sup' })
  await a.transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'kept while paused' })
  await a.stop() // node A goes away; the session stays persisted

  const b = node(store)
  await b.start()
  t.teardown(() => b.stop())
  t.rejects(b.transport.command({ ...target, accountId: 'globex' }, { type: 'query.snapshot' }), { kind: 'not_found', code: 'SESSION_NOT_FOUND' }, 'still scoped to its account')
  const snap: any = await b.transport.command(target, { type: 'query.snapshot' })
  t.equal(snap.data.snapshot.state, 'paused')
  t.same(snap.data.snapshot.memory.messages.map((m: any) => m.text), ['hello', 'Hello! How can I help you today?', 'kept while paused'])
  const c2 = collector()
  await b.transport.subscribe(target, c2.listener)
  await b.transport.command(target, { type: 'admin.resume', userId: 'sup' })
  await c2.until('assistant.message')
  t.match(c2.events.find(e => e.kind === 'event' && e.name === 'assistant.message'), { data: { text: 'You said: kept while paused' } })
  t.rejects(b.transport.command(target, { type: 'user.message', consumerId: 'nobody', text: 'x' }), { code: 'UNKNOWN_CONSUMER' })
  await b.transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'consumers survive the move' })
  const history: any = await b.transport.command(target, { type: 'query.history', after: 0, limit: 100 })
  const seqs = history.data.map((e: any) => e.seq)
  t.same(seqs, seqs.map((_: number, i: number) => i + 1), 'one log, numbered without gaps across nodes')
  t.ok(history.data.some((e: any) => e.type === 'session.restored'))
})

t.test('a session restored before its first turn numbers its events after every event its opening sent', async t => {
  // Node A stops cleanly right after the opening: a client resuming from the last id it got
  // must not be told that id does not exist, nor see a jump where nothing was lost.
  const store = new MemoryStore()
  const { a, c } = await nodeWithSession(store)
  await c.until('crew.status.waiting')
  await a.transport.command(target, { type: 'query.history', after: 0, limit: 10 }) // waits for the writes
  const sent = c.events.map(e => (e.kind === 'event' ? e.seq : 0))
  t.same(sent, [1, 2], 'Initialized, crew.status.waiting')
  const doc = await store.collection('engine_sessions').findOne({ _id: SESSION })
  t.equal(doc!.eventSeq, 2, 'the document counts both')
  t.ok(doc!.eventSeqBound > 2, 'and keeps a bound ahead of them while the node lives')
  await a.stop()
  t.equal((await store.collection('engine_sessions').findOne({ _id: SESSION }))!.eventSeqBound, 2, 'a clean stop leaves the exact last id')

  const { c: c2 } = await answeredOnAnotherNode(t, store, 'hello again')
  t.equal((c2.events.find(e => e.kind === 'event' && e.name === 'crew.status.writing') as any).seq, 3, 'the next event after the restore is 3')
})

t.test('during a long reply the document keeps a bound past every event id sent; a restore after a crash numbers on from it', async t => {
  // In one process the event log dies with the process, and the reply's events reach the
  // document's count only with the snapshot at the reply's end.
  const store = new MemoryStore()
  const { a, c } = await nodeWithSession(store, {}, 1)
  // More events than the first reserve covers: the bound must move during the reply.
  const words = Array.from({ length: 1500 }, (_, i) => `w${i}`).join(' ')
  await a.transport.command(target, { type: 'user.message', consumerId: 'c1', text: words })
  const lastSent = () => Math.max(...c.events.map(e => e.seq))
  const sessions = store.collection('engine_sessions')
  for (let i = 0; i < 2000 && lastSent() < 1200; i++) await sleep(5)
  t.ok(lastSent() >= 1200, `1,200 events sent (${lastSent()})`)
  const midReply = (await sessions.findOne({ _id: SESSION }))!
  t.ok(midReply.eventSeq < 10, `the snapshot's count waits for the reply's end (${midReply.eventSeq})`)
  t.ok(midReply.eventSeqBound > lastSent(), `the bound is past every id sent (${midReply.eventSeqBound} > ${lastSent()})`)
  await c.until('assistant.message')
  const sent = lastSent()
  // A crash now: what a kill -9 leaves is the document as the node wrote it while it lived
  // (a stop would release the bound to the exact last id; put back what the node had reserved).
  const reserved = (await sessions.findOne({ _id: SESSION }))!.eventSeqBound
  t.ok(reserved > sent, 'still past every id after the reply')
  await a.stop()
  await sessions.updateOne({ _id: SESSION }, { $set: { eventSeqBound: reserved } })

  const { c: c2 } = await answeredOnAnotherNode(t, store, 'after the crash')
  const seqs = c2.events.map(e => e.seq)
  t.equal(seqs[0], reserved + 1, `numbered on from the bound (${seqs[0]})`)
  t.same(seqs, seqs.map((_, i) => reserved + 1 + i), 'one by one from there')
})

t.test('a session whose node went away during its first reply is restored and gives that reply', async t => {
  // An outbound session that speaks first writes no snapshot until its first reply ends; the
  // document it is inserted with must be enough to restore it (it answered 404 before).
  const store = new MemoryStore()
  const outbound = { type: 'dynamic', parameters: { previousWhisperedMessages: [{ text: 'Customer owes 20 EUR', author: 'system' }] } }
  const { a, c } = await nodeWithSession(store, { outbound }, 100)
  await c.until('assistant.response')
  t.notOk(c.names().includes('assistant.message'), 'node A is still writing the first reply')
  await a.stop() // node A goes away mid-reply

  const { b, c: c2 } = await answeredOnAnotherNode(t, store)
  const history: any = await b.transport.command(target, { type: 'query.history', after: 0, limit: 100 })
  const types = history.data.map((e: any) => e.type)
  t.equal(types.filter((type: string) => type === 'message.assistant').length, 1, `the first reply, once: ${types.join(', ')}`)
  t.ok(types.indexOf('session.restored') < types.indexOf('message.assistant'), 'given by node B after the restore')
  t.match(history.data.find((e: any) => e.type === 'message.assistant'), { text: String })
})

t.test('an external tool deadline is re-armed on restore', async t => {
  const store = new MemoryStore()
  const { a, c } = await nodeWithSession(store, { arguments: {} })
  await a.transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'lookup C-1' })
  await c.until('crew.status.writing')
  // The call is logged, and its deadline armed with it: the node stops while it waits.
  const history = () => a.transport.command(target, { type: 'query.history', after: 0, limit: 100 }) as Promise<{ data: { type: string }[] }>
  await eventually(history, h => h.data.some(e => e.type === 'tool.call'))
  await a.stop()
  const doc = await store.collection('engine_sessions').findOne({ _id: SESSION })
  t.equal(doc!.deadlines.tools.length, 1, 'the deadline is stored as an absolute time')

  const { b, c: c2 } = await answeredOnAnotherNode(t, store)
  const message = c2.events.find(e => e.kind === 'event' && e.name === 'assistant.message') as any
  t.match(message.data.text, /crm_lookup tool returned: .*timeout/)
})

type TapTest = Parameters<Parameters<typeof t.test>[1]>[0]

/** A session on one node whose tombstone write waits until the test calls `release`. */
async function sessionWithHeldTombstone(test: TapTest) {
  const store = new MemoryStore()
  let release!: () => void
  const gate = new Promise<void>(resolve => (release = resolve))
  const sessions = store.collection('engine_sessions')
  const updateOne = sessions.updateOne.bind(sessions)
  sessions.updateOne = async (filter, update, options) => {
    if ((update as any).$set?.state === 'destroyed') await gate
    return updateOne(filter, update, options)
  }
  const { a, c } = await nodeWithSession(store)
  test.teardown(() => a.stop())
  await c.until('crew.status.waiting')
  return { store, a, c, release }
}

t.test('a command while a session is being destroyed answers 404: it is not restored from its not yet tombstoned document', async t => {
  const { store, a, c, release } = await sessionWithHeldTombstone(t)
  const destroyed = a.transport.command(target, { type: 'session.destroy', reason: 'supervisor', by: 'admin', userId: 'sup' })
  await eventually(async () => a.host.hosts(SESSION), hosted => !hosted)
  const codeOf = (command: Promise<unknown>) => command.then(() => 'answered', error => (error as { code?: string }).code)
  let answeredAt = 0
  const during = codeOf(a.transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'still there?' })).finally(() => (answeredAt = Date.now()))
  await sleep(50)
  t.equal(answeredAt, 0, 'a command meanwhile waits for the close to be written')
  t.notOk(
    c.events.some(e => e.kind === 'closed'),
    'its streams are told session.closed only once the close is written',
  )
  const releasedAt = Date.now()
  release()
  await destroyed
  t.ok(c.events.some(e => e.kind === 'closed'), 'told before the destroy is answered')
  t.equal(await during, 'SESSION_NOT_FOUND', 'during the destroy')
  t.ok(answeredAt >= releasedAt, 'answered after the tombstone was written')
  t.equal(await a.host.closeReason(target), 'supervisor', 'whose close reason the store answers')
  t.equal(await codeOf(a.transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'and now?' })), 'SESSION_NOT_FOUND', 'after it')
  t.match(await store.collection('engine_sessions').findOne({ _id: SESSION }), { state: 'destroyed' })
  t.notOk(a.host.hosts(SESSION), 'not live on the node')
})

t.test('a close the store cannot write yet still reaches the streams, after 2 s', async t => {
  const { store, a, c, release } = await sessionWithHeldTombstone(t)
  const started = Date.now()
  const destroyed = a.transport.command(target, { type: 'session.destroy', reason: 'supervisor', by: 'admin', userId: 'sup' })
  await eventually(async () => c.events.some(e => e.kind === 'closed'), closed => closed)
  const waited = Date.now() - started
  t.ok(c.events.some(e => e.kind === 'event' && e.name === 'session.closed'), 'session.closed sent while the tombstone write still hangs')
  t.ok(c.events.some(e => e.kind === 'closed'), 'and the stream ended')
  // Not before the bound (a slow machine only makes it later); the write still hangs meanwhile.
  t.ok(waited >= 1900, `after the 2 s bound (${waited} ms)`)
  release()
  await destroyed
  t.match(await store.collection('engine_sessions').findOne({ _id: SESSION }), { state: 'destroyed' }, 'the close is written once the store answers')
})

t.test('an idle session expires as abandoned; its streams close and its place is freed', async t => {
  const { base, service } = await startTestService(t, { env: { SESSION_IDLE_TIMEOUT_MS: '300', CREWS_FILE: crewsFile({ patchDemo: { maxConcurrentSessions: 1 } }) } })
  const { stream, sessionId } = await createSession(base)
  const closed = await stream.next('session.closed', 3000)
  t.same(closed.data, { sessionId, reason: 'idle_timeout' })
  // session.closed is sent once the tombstone is written and the crew's place freed: a client
  // reopening on it at once is not refused (the crew allows one session).
  const snapshot = await call(base, 'GET', `${ADMIN}/${sessionId}/snapshot`, { headers: { UserId: 'x' } })
  t.equal(snapshot.status, 404)
  const opened = await openSse(base, 'POST', `${CHANNEL}/demo`, { body: {} })
  t.equal(opened.status, 200, 'the slot was released before session.closed')
  opened.stream?.close()
  await stream.ended_()
  const record = () => service.platform.store.collection('session_records').findOne({ _id: sessionId })
  t.match(await eventually(record, r => r?.status === 'abandoned'), { status: 'abandoned', end_reason: 'idle_timeout' })
})
