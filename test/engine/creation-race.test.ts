// A request for a session that arrives while the session is being created (its document is in
// the store, the session not live yet): a dialer attempt's id is its session's id and is visible
// as soon as the attempt is recorded, so a supervisor or a SIP backend can ask for it that early.
// The request must wait for the session, not restore a second copy of it from the half-written
// store: that copy answered an empty history, and its idle timer, never pushed by the real
// session's activity, later ended the session in the store while the user was talking.
import t from 'tap'
import { parseCrews } from '../../engine/crews.js'
import { SessionHost } from '../../engine/host/host.js'
import { ScriptedProvider } from '../../engine/providers/scripted.js'
import { SESSIONS } from '../../engine/persistence/session-store.js'
import { InProcessTransport, type TransportEvent } from '../../engine/transport.js'
import { MemoryBus } from '../../platform/bus/index.js'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { createMetrics } from '../../platform/metrics.js'
import { MemoryStore, type Collection, type Doc } from '../../platform/store/index.js'
import type { Platform } from '../../platform/index.js'
import { SessionRecorder } from '../../reports/index.js'
import { DEFAULT_CREWS } from './fixtures/crews.js'
import { eventually } from '../support/harness.js'

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))
const SESSION = '0b6c8a1e-2f3d-4c5b-9a7e-1d2c3b4a5f60'
const target = { sessionId: SESSION, accountId: 'acme' }
const IDLE_MS = 1500

/** A store whose session inserts are written at once but answered only when `release()` is called. */
class SlowSessionInserts extends MemoryStore {
  release!: () => void
  private gate: Promise<void> = new Promise(resolve => (this.release = resolve))
  override collection<T extends Doc = Doc>(name: string): Collection<T> {
    const collection = super.collection<T>(name)
    if (name !== SESSIONS) return collection
    const gate = () => this.gate
    return new Proxy(collection, {
      get(target, property, receiver) {
        if (property !== 'insertOne') return Reflect.get(target, property, receiver)
        return async (doc: T) => {
          await target.insertOne(doc)
          await gate()
        }
      },
    })
  }
}

t.test('a request during the creation of its session waits for it: one session, its history, no phantom idle timeout', async t => {
  const store = new SlowSessionInserts()
  const logger = createLogger('silent')
  const platform: Platform = { config: loadConfig({ LOG_LEVEL: 'silent' }), store, bus: new MemoryBus(logger), clock: { now: () => Date.now() }, logger, metrics: createMetrics() }
  const host = new SessionHost({
    platform,
    crews: parseCrews(DEFAULT_CREWS),
    recorder: new SessionRecorder(store),
    providers: { scripted: new ScriptedProvider() },
    idleTimeoutMs: IDLE_MS,
    hibernateAfterMs: 0,
  })
  await host.init()
  t.teardown(() => host.stop())
  const transport = new InProcessTransport(host)
  const events: TransportEvent[] = []
  const creating = transport.create({ sessionId: SESSION, consumerId: 'c1', accountId: 'acme', crewId: 'demo', arguments: {} }, e => void events.push(e))
  const sessions = store.collection(SESSIONS)
  t.ok(await eventually(() => sessions.findOne({ _id: SESSION }), doc => !!doc), 'the session document is written; the session is not live yet')

  const history = transport.command(target, { type: 'query.history', after: 0, limit: 100 }) as Promise<{ data: { type: string }[] }>
  // Given time to go as far as it can on its own (a slower machine only gives it more), the
  // request has not answered: it waits for the session instead of restoring a copy of it.
  const early = await Promise.race([history.then(() => 'answered'), sleep(50).then(() => 'waiting')])
  t.equal(early, 'waiting', 'the request waits while the session is being created')
  store.release()
  await creating
  const entries = (await history).data.map(e => e.type)
  t.ok(entries.includes('session.created'), `the history is the session's own: ${entries.join(', ')}`)

  // The user keeps talking past the first idle deadline: the session must stay open.
  const started = Date.now()
  while (Date.now() - started < IDLE_MS * 2) {
    await transport.command(target, { type: 'user.message', consumerId: 'c1', text: 'still here' })
    await sleep(IDLE_MS / 3)
  }
  const stored = await sessions.findOne({ _id: SESSION })
  t.not(stored?.state, 'destroyed', 'not ended by an idle timeout while the user talked')
  t.notOk(events.some(e => e.kind === 'event' && e.name === 'session.closed'), 'no session.closed on the stream')
  const snapshot = (await transport.command(target, { type: 'query.snapshot' })) as { data: { snapshot: { state: string } } }
  t.equal(snapshot.data.snapshot.state, 'active')
})
