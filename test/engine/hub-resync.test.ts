// The gateway's channel hub after its link to the sessions comes back (engine/streams/hub.ts
// resync): what went by while it was away reaches its streams, even when the link drops and comes
// back again while the hub is still reading the log from the first time.
//
// Over NATS the link is core NATS (events are lost while a gateway is disconnected) and the log
// is JetStream; the order of a second outage against a read in flight cannot be forced through
// a real connection. So this runs the real engine in process with its real event log, and puts
// between it and the hub a `Link`: a SessionTransport that passes everything through, except
// that it loses the live events while it is down and holds the answers of log reads until the
// test lets them go. Both cuts over a real nats-server are in test/engine/nats-transport.test.ts.
import t from 'tap'
import { createEngine } from '../../engine/index.js'
import { ChannelHub } from '../../engine/streams/hub.js'
import type { SessionTransport, TransportEvent, TransportListener } from '../../engine/transport.js'
import { MemoryBus } from '../../platform/bus/index.js'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { createMetrics } from '../../platform/metrics.js'
import { MemoryStore } from '../../platform/store/index.js'
import type { Platform } from '../../platform/index.js'
import type { StreamSink } from '../../platform/http.js'
import { eventually } from '../support/harness.js'

/** Between the engine and the hub: loses live events while down; reads of the log's events answer when released. */
class Link implements SessionTransport {
  down = false
  private held: (() => void)[] = []
  holding = false
  readsStarted = 0
  constructor(private readonly inner: SessionTransport) {}
  private lossy(listener: TransportListener): TransportListener {
    return (event: TransportEvent) => {
      if (!this.down) listener(event)
    }
  }
  private async answer<T>(read: Promise<T>): Promise<T> {
    this.readsStarted++
    const value = await read // read now, answered when released
    if (this.holding) await new Promise<void>(resolve => this.held.push(resolve))
    return value
  }
  release() {
    this.holding = false
    for (const resolve of this.held.splice(0)) resolve()
  }
  create: SessionTransport['create'] = (request, listener) => this.inner.create(request, this.lossy(listener))
  command: SessionTransport['command'] = (target, command) => this.inner.command(target, command)
  subscribe: SessionTransport['subscribe'] = (target, listener) => this.inner.subscribe(target, this.lossy(listener))
  replay: SessionTransport['replay'] = (sessionId, after) => this.answer(this.inner.replay(sessionId, after))
  lastEvent: SessionTransport['lastEvent'] = sessionId => this.inner.lastEvent(sessionId)
  closeReason: SessionTransport['closeReason'] = target => this.inner.closeReason(target)
}

/** A client's stream: the frames written to it, as { id, event, data }. */
function sink() {
  let text = ''
  const stream: StreamSink = {
    write: chunk => ((text += chunk), true),
    end: () => {},
    closed: false,
    onClose: () => {},
  }
  const frames = () =>
    text
      .split('\n\n')
      .filter(Boolean)
      .map(frame => Object.fromEntries(frame.split('\n').map(line => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 2)])))
  return { stream, frames }
}

t.test('a second outage while the first is still being read back: the hub checks again', async t => {
  const config = loadConfig({ LOG_LEVEL: 'silent' })
  const logger = createLogger('silent')
  const platform: Platform = { config, store: new MemoryStore(), bus: new MemoryBus(logger), clock: { now: () => Date.now() }, logger, metrics: createMetrics() }
  const engine = createEngine(platform)
  await engine.start()
  t.teardown(() => engine.stop())
  const link = new Link(engine.transport)
  const hub = new ChannelHub(link, { heartbeatMs: 60_000, consumerRetentionMs: 60_000, maxConsumersPerSession: 4, listenPath: () => '/listen' }, createMetrics(), logger)

  const client = sink()
  await hub.create({ accountId: 'acme', crewId: 'demo', arguments: {} }, hub.sse(() => client.stream))
  const opened = await eventually(async () => client.frames(), frames => frames.some(f => f.event === 'Initialized'))
  const sessionId = JSON.parse(opened.find(f => f.event === 'Initialized')!.data).sessionId as string
  const consumerId = JSON.parse(opened.find(f => f.event === 'Initialized')!.data).consumerId as string
  const say = (text: string) => engine.transport.command({ sessionId, accountId: 'acme' }, { type: 'user.message', consumerId, text })
  const replies = () => client.frames().filter(f => f.event === 'assistant.message').map(f => JSON.parse(f.data).text as string)
  /** The turn answering `text` is over in the session's log (whether the link let it through or not). */
  const answered = async (text: string) => {
    // A logged event keeps its SSE lines (`body`), not its data.
    const turnOver = (events: any[]) => {
      const reply = events.findIndex(e => e.name === 'assistant.message' && e.body?.includes(`"text":${JSON.stringify(`You said: ${text}`)}`))
      return reply >= 0 && events.slice(reply).some(e => e.name === 'crew.status.waiting')
    }
    t.ok(turnOver(await eventually(() => engine.transport.replay(sessionId, 0), turnOver)), `the reply to "${text}" is in the log`)
  }

  // First outage: a reply goes by unheard.
  link.down = true
  await say('first question')
  await answered('first question')
  t.same(replies(), [], 'nothing heard while the link is down')
  // The link comes back; the hub reads the log's events now, but their answer is held.
  link.down = false
  link.holding = true
  const resynced = hub.resync()
  t.equal(await eventually(async () => link.readsStarted, n => n > 0), 1, 'the hub is reading the log')
  // Second outage while that read is in flight: another reply goes by unheard.
  link.down = true
  await say('second question')
  await answered('second question')
  link.down = false
  const again = hub.resync()
  link.release()
  await Promise.all([resynced, again])
  // A heartbeat repeats the last id (a slow run may see one): events only.
  const eventIds = () => client.frames().filter(f => f.id !== undefined && f.event !== 'hearthbeat').map(f => Number(f.id))
  const logged = (await engine.transport.replay(sessionId, 0)).length
  const ids = await eventually(async () => eventIds(), ids => ids.length >= logged)
  t.same(replies(), ['You said: first question', 'You said: second question'], 'both replies reach the stream, in order')
  t.same(ids, ids.map((_, i) => i + 1), 'every event once, ids consecutive')
  t.notOk(client.frames().some(f => f.event === 'stream.gap'), 'no gap reported')
})
