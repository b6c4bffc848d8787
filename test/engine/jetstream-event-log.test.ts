// The session event log on a real nats-server (engine/cluster/jetstream-event-log.ts): from wire
// version 3 a session's events of one turn of the loop cross as one message, and every reader
// (a gateway's live subscription, a replay, the position a new owner numbers on from) sees them
// one by one, in order, also in a log that still holds one-event messages of version 2.
import t from 'tap'
import { connect } from '@nats-io/transport-node'
import { JetStreamEventLog, eventsOf, eventsSubject, type WireEvent } from '../../engine/cluster/jetstream-event-log.js'
import type { StreamEvent } from '../../engine/streams/event-log.js'
import { createLogger } from '../../platform/logger.js'
import { Wire } from '../../platform/wire.js'
import { startNatsServer } from '../support/nats-server.js'

const logger = createLogger('silent')
const event = (seq: number, epoch = 1): StreamEvent => ({ kind: 'event', name: 'assistant.response', data: { sessionId: 's1', delta: `d${seq}` }, seq, epoch })
const nextTurn = () => new Promise(resolve => setTimeout(resolve, 20))

t.test("a turn's events: one message, read back one by one", async t => {
  const nats = await startNatsServer(t)
  const nc = await connect({ servers: nats.url })
  t.teardown(() => nc.close())
  const wire = new Wire({ logger })
  const options = { perSession: 100, retentionMs: 60_000, replicas: 1, logger, wire }
  const log = await JetStreamEventLog.open(nc, options)
  const seen: { v: number; events: number[] }[] = []
  const listener = await connect({ servers: nats.url })
  t.teardown(() => listener.close())
  listener.subscribe(eventsSubject('s1'), {
    callback: (_, msg) => {
      const decoded = wire.decode<WireEvent>('session.event', msg.data)
      if (decoded.ok) seen.push({ v: decoded.v, events: eventsOf(decoded.message).map(e => e.seq) })
    },
  })
  await listener.flush()

  log.append('s1', event(1))
  log.append('s1', { ...event(2), body: 'event: x\ndata: {}\n\n' })
  log.append('s2', event(1))
  log.append('s1', { kind: 'closed', reason: 'ended', seq: 3, epoch: 1 })
  await nextTurn()
  log.append('s1', event(4))
  await nextTurn()
  t.same(seen, [
    { v: 3, events: [1, 2, 3] },
    { v: 3, events: [4] },
  ], 'one message per session and turn of the loop; a lone event is sent as itself')

  const all = await log.read('s1', 0)
  t.same(all.map(e => e.seq), [1, 2, 3, 4], 'a replay gives every event, in order')
  t.notOk(all.some(e => 'body' in e), "what the streams serialised stays on the node")
  t.same((await log.read('s1', 2)).map(e => e.seq), [3, 4], 'and from inside a batch on')
  t.same(await log.last('s1'), { seq: 4, epoch: 1 }, "the log's position is its last event")
  t.same((await log.read('s2', 0)).map(e => e.seq), [1], 'sessions apart')

  // The last message a batch: a new owner numbers on from its last event.
  log.append('s1', event(5))
  log.append('s1', event(6))
  await nextTurn()
  t.equal(await log.takeOver('s1', 2), 6, 'a new owner goes on after the last event of the last batch')
})

t.test('pinned to version 2 (a rolling upgrade): one message per event, and a log of both reads whole', async t => {
  const nats = await startNatsServer(t)
  const nc = await connect({ servers: nats.url })
  t.teardown(() => nc.close())
  const options = { perSession: 100, retentionMs: 60_000, replicas: 1, logger }
  const pinned = await JetStreamEventLog.open(nc, { ...options, wire: new Wire({ logger, writes: 2 }) })
  const messages: unknown[] = []
  const listener = await connect({ servers: nats.url })
  t.teardown(() => listener.close())
  listener.subscribe(eventsSubject('s1'), { callback: (_, msg) => messages.push(msg.json()) })
  await listener.flush()

  pinned.append('s1', event(1))
  pinned.append('s1', event(2))
  await nextTurn()
  t.same(messages, [{ ...event(1), v: 2 }, { ...event(2), v: 2 }], 'each event its own version-2 message, as older gateways read them')

  const current = await JetStreamEventLog.open(nc, { ...options, wire: new Wire({ logger }) })
  current.append('s1', event(3))
  current.append('s1', event(4))
  await nextTurn()
  t.same((await current.read('s1', 0)).map(e => e.seq), [1, 2, 3, 4], 'version-2 events then a version-3 batch, read in order')
})
