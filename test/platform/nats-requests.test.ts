// Requests answered on one inbox per connection (platform/bus/nats-requests.ts), on a real
// nats-server: answers reach the request that asked, late ones time out with nats.js's errors,
// a subject nobody serves is told apart, and a JetStream publish is acknowledged or refused with
// the stream's own error (what the journal's fencing relies on).
import t from 'tap'
import { connect, TimeoutError } from '@nats-io/transport-node'
import { jetstreamManager } from '@nats-io/jetstream'
import { NatsRequests } from '../../platform/bus/nats-requests.js'
import { isWrongLastSequence } from '../../engine/cluster/jetstream-streams.js'
import { isNoResponders } from '../../engine/cluster/ownership.js'
import { startNatsServer } from '../support/nats-server.js'

t.test('requests, timeouts and subjects nobody serves', async t => {
  const nats = await startNatsServer(t)
  const server = await connect({ servers: nats.url })
  const client = await connect({ servers: nats.url })
  t.teardown(async () => {
    await client.close()
    await server.close()
  })
  // Answers in the reverse order of arrival: each must reach its own request.
  const held: { reply: string; text: string }[] = []
  server.subscribe('echo', {
    callback: (_, msg) => {
      held.push({ reply: msg.reply!, text: msg.string() })
      if (held.length === 3) for (const { reply, text } of held.reverse()) server.publish(reply, `re:${text}`)
    },
  })
  server.subscribe('silent', { callback: () => {} })
  await server.flush()

  const requests = NatsRequests.of(client)
  t.equal(NatsRequests.of(client), requests, 'one instance per connection')
  const answers = await Promise.all(['a', 'b', 'c'].map(text => requests.request('echo', text, 2_000)))
  t.same(answers.map(msg => msg.string()), ['re:a', 're:b', 're:c'], 'each answer reaches the request that asked')

  const started = Date.now()
  const late = await requests.request('silent', 'x', 200).catch(error => error)
  t.ok(late instanceof TimeoutError, 'an unanswered request times out with TimeoutError')
  t.ok(Date.now() - started >= 200 && Date.now() - started < 1_000, 'at its time (within the sweep)')

  const nobody = await requests.request('nobody.here', 'x', 2_000).catch(error => error)
  t.ok(isNoResponders(nobody), 'a subject with no subscriber is told apart from a timeout')
})

t.test('JetStream publishes: acknowledged, deduplicated, fenced', async t => {
  const nats = await startNatsServer(t)
  const nc = await connect({ servers: nats.url })
  t.teardown(() => nc.close())
  const jsm = await jetstreamManager(nc)
  await jsm.streams.add({ name: 'REQ_TEST', subjects: ['req.test.*'] })
  const requests = NatsRequests.of(nc)

  const first = await requests.publish('req.test.a', '1', { msgID: 'm1', lastSubjectSequence: 0, timeoutMs: 2_000 })
  t.same(first, { stream: 'REQ_TEST', seq: 1, duplicate: false }, 'stored, with its stream sequence')
  const again = await requests.publish('req.test.a', '1', { msgID: 'm1', timeoutMs: 2_000 })
  t.same(again, { stream: 'REQ_TEST', seq: 1, duplicate: true }, 'the same id again is stored once')

  const fenced = await requests.publish('req.test.a', '2', { lastSubjectSequence: 0, timeoutMs: 2_000 }).catch(error => error)
  t.ok(isWrongLastSequence(fenced), 'a publish expecting an older last sequence is refused as the stream refuses it')
  const next = await requests.publish('req.test.a', '2', { lastSubjectSequence: 1, timeoutMs: 2_000 })
  t.equal(next.seq, 2, 'the expected last sequence lets it through')
  t.equal((await jsm.streams.info('REQ_TEST')).state.messages, 2, 'nothing stored twice, nothing refused stored')
})

t.test('a closed connection fails what waits and refuses new requests', async t => {
  const nats = await startNatsServer(t)
  const nc = await connect({ servers: nats.url })
  nc.subscribe('silent', { callback: () => {} })
  const requests = NatsRequests.of(nc)
  const waiting = requests.request('silent', 'x', 10_000).catch(error => error)
  await nc.close()
  t.ok((await waiting) instanceof Error, 'the waiting request fails at once, not at its timeout')
  t.ok((await requests.request('silent', 'x', 1_000).catch(error => error)) instanceof Error, 'a new one is refused')
})
