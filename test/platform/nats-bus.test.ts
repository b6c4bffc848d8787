// NatsBus against a real nats-server (JetStream on): the same work-queue semantics as the
// in-memory bus (delivery, bounded concurrency, redelivery of a throwing handler with attempt
// counting, maxDeliveries), plus what only a distributed queue has: a consumer that goes away
// without acking leaves its message to another consumer, and a restarted server is survived.
import t from 'tap'
import { NatsBus, type NatsBusOptions } from '../../platform/bus/index.js'
import { createLogger } from '../../platform/logger.js'
import { startNatsServer, type NatsTestServer } from '../support/nats-server.js'
import { eventually } from '../support/harness.js'

const logger = createLogger('silent')
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))

async function until(check: () => boolean, timeoutMs = 10_000, what = 'condition') {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

let nats: NatsTestServer
t.before(async () => {
  nats = await startNatsServer(t)
})

async function bus(t: { teardown(fn: () => unknown): void }, options: Partial<NatsBusOptions> = {}) {
  const b = await NatsBus.connect({ servers: nats.url, fetchExpiresMs: 1000, ...options }, logger)
  t.teardown(() => b.close())
  return b
}

let queueSeq = 0
const qname = (label: string) => `test.${label}.${++queueSeq}`

t.test('publish and consume: every message once, acked (the stream is emptied)', async t => {
  const b = await bus(t)
  const q = b.queue<{ n: number }>(qname('basic'))
  for (let n = 0; n < 20; n++) await q.publish({ n })
  const seen: number[] = []
  const attempts: number[] = []
  const stop = q.consume(async d => {
    seen.push(d.data.n)
    attempts.push(d.attempt)
  }, { concurrency: 3 })
  await until(() => seen.length >= 20, 10_000, '20 messages')
  await sleep(200)
  await stop()
  t.same([...seen].sort((a, b) => a - b), Array.from({ length: 20 }, (_, n) => n), 'each message exactly once')
  t.ok(attempts.every(a => a === 1), 'first deliveries have attempt 1')
  const info = await b.jsm.streams.info((q as any).stream)
  t.equal(info.state.messages, 0, 'acked messages are removed from the work-queue stream')
  t.equal(info.config.retention, 'workqueue')
  t.equal(info.config.storage, 'file')
  // depth() answers the count last read and asks for a fresh one.
  t.equal(await eventually(async () => q.depth(), depth => depth === 0), 0, 'depth reports the last known count')
})

t.test('concurrency bounds the handlers running at once, across publishes made while consuming', async t => {
  const b = await bus(t)
  const q = b.queue<{ n: number }>(qname('concurrency'))
  let running = 0
  let peak = 0
  let done = 0
  const stop = q.consume(async () => {
    running++
    peak = Math.max(peak, running)
    await sleep(40)
    running--
    done++
  }, { concurrency: 3 })
  await Promise.all(Array.from({ length: 15 }, (_, n) => q.publish({ n })))
  await until(() => done >= 15, 15_000, '15 handled')
  await stop()
  t.equal(peak, 3, 'never more than 3 at once, and the bound is reached')
})

t.test('a throwing handler is redelivered with increasing attempt until it succeeds', async t => {
  const b = await bus(t)
  const q = b.queue<{ id: string }>(qname('retry'))
  const attempts: number[] = []
  let succeeded = false
  const stop = q.consume(async d => {
    attempts.push(d.attempt)
    if (d.attempt < 3) throw new Error('transient')
    succeeded = true
  }, { concurrency: 1, maxDeliveries: 5 })
  await q.publish({ id: 'x' })
  await until(() => succeeded, 10_000, 'third attempt')
  await sleep(300)
  await stop()
  t.same(attempts, [1, 2, 3])
})

t.test('maxDeliveries is respected: a poison message stops after the last attempt', async t => {
  const b = await bus(t)
  const q = b.queue<{ id: string }>(qname('poison'))
  const attempts: number[] = []
  const stop = q.consume(async d => {
    attempts.push(d.attempt)
    throw new Error('poison')
  }, { concurrency: 2, maxDeliveries: 3 })
  await q.publish({ id: 'p' })
  await until(() => attempts.length >= 3, 10_000, 'three attempts')
  await sleep(1000)
  await stop()
  t.same(attempts, [1, 2, 3], 'delivered exactly maxDeliveries times')
  const info = await b.jsm.streams.info((q as any).stream)
  t.equal(info.state.messages, 0, 'the dropped message does not stay in the stream')
})

t.test('a consumer that goes away without acking leaves the message to another consumer', async t => {
  const name = qname('abandon')
  const a = await bus(t, { ackWaitMs: 1000 })
  const qa = a.queue<{ id: string }>(name)
  let taken = 0
  qa.consume(async () => {
    taken++
    await new Promise(() => {}) // never finishes: the process "dies" with the message
  }, { concurrency: 1, maxDeliveries: 5 })
  await qa.publish({ id: 'm' })
  await until(() => taken === 1, 10_000, 'first consumer to take the message')
  await a.connection.close() // like kill -9: no ack, no nak, no more progress acks

  const b = await bus(t, { ackWaitMs: 1000 })
  const got: { id: string; attempt: number }[] = []
  const stop = b.queue<{ id: string }>(name).consume(async d => void got.push({ id: d.data.id, attempt: d.attempt }), { concurrency: 1, maxDeliveries: 5 })
  // After our ack_wait: the server's default (30 s) would miss this deadline.
  await until(() => got.length === 1, 15_000, 'redelivery to the second consumer after ack_wait')
  t.same(got, [{ id: 'm', attempt: 2 }], 'redelivered once, as the second attempt')
  await sleep(1500)
  await stop()
  t.equal(got.length, 1, 'not delivered again after the ack')
})

t.test('a slow handler keeps its message (progress acks) beyond ack_wait', async t => {
  const b = await bus(t, { ackWaitMs: 1000 })
  const name = qname('slow')
  const q = b.queue<{ id: string }>(name)
  const other = await bus(t, { ackWaitMs: 1000 })
  const deliveries: string[] = []
  const stopA = q.consume(async () => {
    deliveries.push('a')
    await sleep(2500)
  }, { concurrency: 1 })
  await q.publish({ id: 's' })
  await until(() => deliveries.length === 1, 10_000, 'first delivery')
  const stopB = other.queue<{ id: string }>(name).consume(async () => void deliveries.push('b'), { concurrency: 1 })
  await sleep(3000)
  await Promise.all([stopA(), stopB()])
  t.same(deliveries, ['a'], 'never handed to the other consumer while being worked on')
})

t.test('a restarted nats-server is survived: consumers and publishers reconnect', async t => {
  const b = await bus(t)
  const q = b.queue<{ n: number }>(qname('restart'))
  const seen: number[] = []
  const stop = q.consume(async d => void seen.push(d.data.n), { concurrency: 2 })
  await q.publish({ n: 1 })
  await until(() => seen.includes(1), 10_000, 'message before restart')
  await nats.restart({ downMs: 500 })
  await q.publish({ n: 2 }) // retried until the client has reconnected
  await until(() => seen.includes(2), 20_000, 'message after restart')
  await stop()
  t.same(seen, [1, 2])
})
