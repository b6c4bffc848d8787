// The orphan reaper (engine/host/reaper.ts): sessions left live in the store by a host that went
// away without closing them are closed as idle timeouts by another host once their idle
// deadline has passed, and their crew slots come back, once each.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { createEngine, type Engine } from '../../engine/index.js'
import { parseCrews } from '../../engine/crews.js'
import { OrphanReaper } from '../../engine/host/reaper.js'
import { MemoryBus } from '../../platform/bus/index.js'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { createMetrics } from '../../platform/metrics.js'
import { MemoryStore, MongoStore, type Store } from '../../platform/store/index.js'
import type { Platform } from '../../platform/index.js'
import { mongoUrlFor, STORES, type StoreKind } from '../support/harness.js'
import { DEFAULT_CREWS } from './fixtures/crews.js'

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))
const IDLE = 1500
type Tap = { rejects(p: Promise<unknown>, pattern: object, message: string): Promise<void> }
const LIMIT = 4

async function storeFor(t: { teardown(fn: () => unknown): void }, kind: StoreKind): Promise<Store> {
  if (kind === 'memory') return new MemoryStore()
  const store = await MongoStore.connect(await mongoUrlFor(t))
  t.teardown(() => store.close())
  return store
}

function platformOf(store: Store, env: Record<string, string>): Platform {
  const config = loadConfig({ LOG_LEVEL: 'silent', SESSION_IDLE_TIMEOUT_MS: String(IDLE), ...env })
  const logger = createLogger('silent')
  return { config, store, bus: new MemoryBus(logger), clock: { now: () => Date.now() }, logger, metrics: createMetrics() }
}

/** An in-process engine (ROLE=all) on a shared store; demo crew limited to LIMIT, replies streamed slowly. */
function node(store: Store, env: Record<string, string> = {}): Engine {
  const crews = parseCrews({
    crews: DEFAULT_CREWS.crews.map((c: any) =>
      c.id === 'demo' ? { ...c, maxConcurrentSessions: LIMIT, assistant: { ...c.assistant, chunkDelayMs: 40 } } : c,
    ),
  })
  return createEngine(platformOf(store, env), { crews })
}

const create = (engine: Engine, accountId = 'acme', extra: Record<string, unknown> = {}) => {
  const sessionId = randomUUID()
  return engine.transport.create({ sessionId, consumerId: 'c1', accountId, crewId: 'demo', arguments: { name: 'Ana' }, ...extra }, () => {}).then(() => sessionId)
}

const slotsOf = async (store: Store, accountId = 'acme') => (await store.collection('engine_crew_slots').findOne({ _id: `${accountId}:demo` }))?.live

async function until(what: string, check: () => Promise<boolean>, ms = 8000) {
  const start = Date.now()
  while (Date.now() - start < ms) {
    if (await check()) return Date.now() - start
    await sleep(20)
  }
  throw new Error(`timed out waiting for ${what}`)
}

/**
 * Host A fills the crew (LIMIT sessions of acme) and goes away without closing them: one
 * conversation idle with a snapshot, one paused, one with an acknowledged message whose reply
 * was cut off (a restore owes it a reply; past its deadline it expires instead), one still in
 * its first reply (its opening snapshot only).
 */
async function orphansOf(t: Tap, store: Store): Promise<string[]> {
  const a = node(store, { ENGINE_REAPER_INTERVAL_MS: '60000' })
  await a.start()
  const idle = await create(a)
  await a.transport.command({ sessionId: idle, accountId: 'acme' }, { type: 'user.message', consumerId: 'c1', text: 'hello' })
  const paused = await create(a)
  await a.transport.command({ sessionId: paused, accountId: 'acme' }, { type: 'admin.pause', userId: 'sup' })
  const journal = store.orderedLog<any>('engine_session_journal')
  await until('the reply to hello and the pause persisted', async () => {
    const replied = (await journal.read(idle, 0)).some(r => r.value.type === 'message.assistant')
    return replied && (await journal.get(paused, 0))?.control.value === 'paused'
  })
  const owed = await create(a)
  await a.transport.command({ sessionId: owed, accountId: 'acme' }, { type: 'user.message', consumerId: 'c1', text: 'hello' })
  await a.transport.command({ sessionId: owed, accountId: 'acme' }, { type: 'query.history', after: 0, limit: 1 }) // the message is written
  const first = await create(a, 'acme', { outbound: { type: 'dynamic', parameters: { previousWhisperedMessages: [] } } })
  await t.rejects(create(a), { kind: 'limit_reached', code: 'SESSION_LIMIT_REACHED' }, 'the crew is full')
  // Gone: actors stopped without their destroy path (sessions stay persisted as live).
  await a.stop()
  return [idle, paused, owed, first]
}

for (const kind of STORES) {
  t.test(`${kind}: orphans of a host that went away are closed as idle timeouts by another host`, async t => {
    const store = await storeFor(t, kind)
    const orphans = await orphansOf(t, store)
    const docs = await store.collection('engine_sessions').find({ _id: { $in: orphans } })
    t.same(docs.map(d => d.state).sort(), ['active', 'active', 'active', 'paused'], 'persisted as live')
    const first = docs.find(d => d._id === orphans[3])!
    t.match(JSON.parse(first.snapshot), { control: { value: { active: 'idle' }, context: { replyOwed: true } } }, 'the one that died in its first reply is kept owing that reply')
    // As a document without a checkpoint (written before sessions were inserted with their
    // opening one): not restorable, closed by hand.
    await store.collection('engine_sessions').updateOne({ _id: first._id }, { $set: { snapshot: null } })
    const deadline = Math.max(...docs.map(d => d.deadlines.idle))
    const owed = docs.find(d => d._id === orphans[2])!
    t.match(JSON.parse(owed.snapshot), { control: { value: { active: 'idle' }, context: { replyOwed: true } } }, 'one orphan owes a reply to an acknowledged message')
    t.same((await store.orderedLog<any>('engine_session_journal').read(owed._id, 0)).map(r => r.value.type).filter(type => type.startsWith('message.')), ['message.user'], 'which its journal holds, unanswered')
    const repliesBefore = (await store.collection('session_records').findOne({ _id: owed._id }))!.assistant_messages

    // B's own sessions idle out later than A's orphans (whose deadlines come from A's snapshots).
    const b = node(store, { ENGINE_REAPER_INTERVAL_MS: '100', SESSION_IDLE_TIMEOUT_MS: '60000' })
    await b.start()
    t.teardown(() => b.stop())
    await t.rejects(create(b), { code: 'SESSION_LIMIT_REACHED' }, 'host B is refused too: the slots leaked')
    const mine = await create(b, 'globex')

    const freedAfter = await until('the slots to be freed', async () => (await slotsOf(store)) === 0)
    t.comment(`slots free ${Date.now() - deadline} ms after the last idle deadline (reaper every 100 ms, waited ${freedAfter} ms)`)
    for (const id of orphans) {
      await until(`record of ${id}`, async () => (await store.collection('session_records').findOne({ _id: id }))?.end_time != null)
      t.match(await store.collection('engine_sessions').findOne({ _id: id }), { state: 'destroyed', closeReason: 'idle_timeout', snapshot: null })
      t.match(await store.collection('session_records').findOne({ _id: id }), { status: 'abandoned', end_reason: 'idle_timeout' })
      // The log goes last (after the record), so it is waited for too.
      await until(`log of ${id} to go`, async () => (await store.orderedLog('engine_session_journal').read(id, -1)).length === 0)
      t.pass('its log is gone')
    }
    t.equal(await slotsOf(store), 0, 'each orphan released its slot once')
    t.equal((await store.collection('session_records').findOne({ _id: owed._id }))!.assistant_messages, repliesBefore, 'the owed reply is not generated for a reaped orphan')
    t.ok(b.host!.hosts(mine), 'the session live on B is not touched')
    t.equal(await slotsOf(store, 'globex'), 1)

    // A session this host runs is never taken for an orphan, even if its stored deadline says so.
    await store.collection('engine_sessions').updateOne({ _id: mine }, { $set: { 'deadlines.idle': 0 } })
    const platform = platformOf(store, {})
    const reaper = new OrphanReaper({ host: b.host!, store, clock: platform.clock, logger: platform.logger, intervalMs: 60_000 })
    t.equal(await reaper.sweep(), 0)
    t.ok(b.host!.hosts(mine))
    t.match(await store.collection('engine_sessions').findOne({ _id: mine }), { state: 'active' })
    t.equal(await slotsOf(store, 'globex'), 1)

    const fresh = await create(b)
    t.ok(fresh, 'a new session of the crew is accepted again')
    t.equal(await slotsOf(store), 1)
  })
}

t.test('two reapers at once release each orphan slot exactly once', async t => {
  const store = new MemoryStore()
  // One more place than orphans, kept by a live session: a double release would show below 1.
  const orphans = await orphansOf(t, store)
  const deadline = Math.max(...(await store.collection('engine_sessions').find({ _id: { $in: orphans } })).map(d => d.deadlines.idle))
  const [b, c] = [node(store), node(store)] // default interval: the periodic sweep stays out of the way
  await b.start()
  await c.start()
  t.teardown(() => b.stop())
  t.teardown(() => c.stop())
  await sleep(Math.max(0, deadline - Date.now()) + 20)
  await store.collection('engine_crew_slots').updateOne({ _id: 'acme:demo' }, { $inc: { live: 1 } }) // a place held elsewhere
  const platform = platformOf(store, {})
  const reaperOf = (e: Engine) => new OrphanReaper({ host: e.host!, store, clock: platform.clock, logger: platform.logger, intervalMs: 60_000 })
  const counts = await Promise.all([reaperOf(b).sweep(), reaperOf(c).sweep()])
  t.ok(counts[0]! + counts[1]! >= orphans.length, `every orphan taken by one reaper or both (${counts})`)
  await until('every orphan closed', async () => (await store.collection('engine_sessions').countDocuments({ _id: { $in: orphans }, state: 'destroyed' })) === orphans.length)
  await until('every record ended', async () => (await store.collection('session_records').countDocuments({ _id: { $in: orphans }, status: 'abandoned' })) === orphans.length)
  await sleep(100) // the losing closes finish too
  t.equal(await slotsOf(store), 1, 'one release per orphan: the other place is still counted')
  t.equal(await store.collection('session_records').countDocuments({ _id: { $in: orphans }, end_reason: 'idle_timeout' }), orphans.length)
})
