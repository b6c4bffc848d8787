// Engine nodes over NATS, in process: two ROLE=engine services and one ROLE=gateway service on a
// real nats-server and one MongoDB database (the wire-protocol test server). Sessions created
// through the gateway spread over both nodes; messages, administration, a second consumer and
// destroy all go through NATS; errors keep their codes. Then a gateway cut off from NATS
// while a reply streams: its listeners get what they missed once it reconnects.
import t from 'tap'
import { connect } from '@nats-io/transport-node'
import { Kvm } from '@nats-io/kv'
import { call, mongoUrlFor, startTestService } from '../support/harness.js'
import { startNatsServer } from '../support/nats-server.js'
import { ADMIN, CHANNEL, createSession, openSse } from '../support/sse.js'
import { OWNERS_BUCKET } from '../../engine/cluster/ownership.js'
import { startTcpProxy } from '../support/tcp-proxy.js'
import { crewsFile, DEFAULT_CREWS } from './fixtures/crews.js'

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))
const SESSIONS = 8

async function liveSessions(metricsBase: string): Promise<number> {
  const text = await (await fetch(`${metricsBase}/metrics`)).text()
  return [...text.matchAll(/^switchboard_sessions_live\{[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0)
}

t.test('two engine nodes behind one gateway over NATS', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const env = { MONGO_URL: mongoUrl, NATS_URL: nats.url, ENGINE_HEARTBEAT_MS: '200', ENGINE_LEASE_RENEW_MS: '500' }
  const e1 = await startTestService(t, { env: { ...env, ROLE: 'engine' } })
  const e2 = await startTestService(t, { env: { ...env, ROLE: 'engine' } })
  const gw = await startTestService(t, { env: { ...env, ROLE: 'gateway' } })

  const health = await call(e1.base, 'GET', '/healthz', { key: null })
  t.match(health.json, { role: 'engine', bus: 'nats', modules: ['engine'], engineNode: String })
  t.equal((await call(e1.base, 'POST', `${CHANNEL}/demo`, { body: {} })).status, 404, 'an engine node serves no API routes')
  t.equal((await fetch(`${e1.metricsBase}/metrics`)).status, 200, 'an engine node serves /metrics (on its metrics listener)')
  await sleep(300) // the gateway has seen both heartbeats

  const sessions = []
  for (let i = 0; i < SESSIONS; i++) sessions.push(await createSession(gw.base, { body: { arguments: { name: `U${i}` } } }))
  const [on1, on2] = [await liveSessions(e1.metricsBase), await liveSessions(e2.metricsBase)]
  t.equal(on1 + on2, SESSIONS, 'every session lives on one engine node')
  t.ok(on1 >= 2 && on2 >= 2, `sessions spread over both nodes (${on1} / ${on2})`)

  for (const s of sessions) {
    const put = await call(gw.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'hello' } })
    t.equal(put.status, 201)
    const reply = await s.stream.next('assistant.message')
    t.equal(reply.data.text, 'Hello! How can I help you today?')
  }
  const names = sessions[0]!.stream.names()
  const reply = names.lastIndexOf('crew.status.writing')
  t.same([names[0], names[reply], names.at(-2), names.at(-1)], ['Initialized', 'crew.status.writing', 'assistant.message', 'crew.status.waiting'], 'a reply in order over NATS')

  // Administration and a second consumer through the gateway.
  const s0 = sessions[0]!
  const history = await call(gw.base, 'GET', `${ADMIN}/${s0.sessionId}/history`, { headers: { UserId: 'sup' } })
  t.equal(history.status, 200)
  t.ok(history.json.data.some((e: any) => e.type === 'message.user' && e.text === 'hello'))
  const listen = await openSse(gw.base, 'POST', `${CHANNEL}/${s0.sessionId}/listen`)
  t.equal(listen.status, 200)
  await listen.stream!.next('session.consumer.attached')
  t.equal((await call(gw.base, 'PUT', `${ADMIN}/${s0.sessionId}/impersonate`, { headers: { UserId: 'sup' }, body: { text: 'a human here' } })).status, 200)
  t.equal((await listen.stream!.next('assistant.message')).data.text, 'a human here', 'the second consumer gets the events')
  t.equal((await s0.stream.next('assistant.message')).data.text, 'a human here')

  // Errors keep their codes across NATS.
  const missing = await call(gw.base, 'PUT', `${CHANNEL}/0d9a7f0e-5b1c-4c1e-8a41-2f7d6b3c9e99/${s0.consumerId}`, { body: { message: 'x' } })
  t.match(missing, { status: 404, json: { code: 'SESSION_NOT_FOUND' } })
  const stranger = await call(gw.base, 'PUT', `${CHANNEL}/${s0.sessionId}/0d9a7f0e-5b1c-4c1e-8a41-2f7d6b3c9e98`, { body: { message: 'x' } })
  t.match(stranger, { status: 400, json: { code: 'UNKNOWN_CONSUMER' } })
  const resume = await call(gw.base, 'PUT', `${ADMIN}/${s0.sessionId}/resume`, { headers: { UserId: 'sup' } })
  t.match(resume, { status: 409, json: { code: 'INVALID_SESSION_STATE' } })

  // The owner entries; destroy releases them.
  const probe = await connect({ servers: nats.url })
  t.teardown(() => probe.close())
  const owners = await new Kvm(probe).open(OWNERS_BUCKET)
  t.ok(await owners.get(s0.sessionId), 'the session has an owner entry')
  const del = await call(gw.base, 'DELETE', `${CHANNEL}/${s0.sessionId}`, { body: { reason: 'finished' } })
  t.equal(del.status, 201)
  t.same((await s0.stream.next('session.closed')).data, { sessionId: s0.sessionId, reason: 'finished' })
  await s0.stream.ended_()
  for (let i = 0; i < 50 && (await owners.get(s0.sessionId))?.operation === 'PUT'; i++) await sleep(20)
  t.not((await owners.get(s0.sessionId))?.operation, 'PUT', 'the lease is released on destroy')
  t.equal((await call(gw.base, 'GET', `${ADMIN}/${s0.sessionId}/snapshot`, { headers: { UserId: 'sup' } })).status, 404)

  // A stale subscriber on a session's command subject (a node that just lost or handed the session
  // over) answers NOT_OWNER before the owner answers the same request; the gateway re-sends the
  // command through a claim, which reaches the owner again: the message is still applied once.
  const s1 = sessions[1]!
  const stale = probe.subscribe(`sb.session.${s1.sessionId}.cmd`, {
    callback: (_error, msg) => msg.respond(JSON.stringify({ ok: false, error: { kind: 'unavailable', code: 'NOT_OWNER', message: 'not hosted here' }, v: 2 })),
  })
  await probe.flush()
  const once = await call(gw.base, 'PUT', `${CHANNEL}/${s1.sessionId}/${s1.consumerId}`, { body: { message: 'only once please' } })
  t.equal(once.status, 201, 'accepted despite the stale NOT_OWNER answer')
  stale.unsubscribe()
  await s1.stream.next(e => e.event === 'assistant.message' && String(e.data.text).includes('only once please'))
  const h1 = await call(gw.base, 'GET', `${ADMIN}/${s1.sessionId}/history`, { headers: { UserId: 'sup' } })
  t.equal(h1.json.data.filter((e: any) => e.type === 'message.user' && e.text === 'only once please').length, 1, 'the owner ran the command once')

  listen.stream!.close()
  for (const s of sessions) s.stream.close()
})

// Core NATS does not keep what is published while a subscriber is away. A gateway that loses its
// link while the session's last events go out would otherwise hold its streams silent (no later
// event shows the gap) until the session speaks again, maybe never.
t.test('a gateway cut off from NATS while a session replies: its stream gets the reply once it reconnects', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const link = await startTcpProxy(nats.port)
  t.teardown(() => link.close())
  const env = { MONGO_URL: mongoUrl, ENGINE_HEARTBEAT_MS: '200', ENGINE_LEASE_RENEW_MS: '500' }
  await startTestService(t, { env: { ...env, NATS_URL: nats.url, ROLE: 'engine' } })
  const cut = await startTestService(t, { env: { ...env, NATS_URL: `nats://127.0.0.1:${link.port}`, ROLE: 'gateway' } })
  const other = await startTestService(t, { env: { ...env, NATS_URL: nats.url, ROLE: 'gateway' } })
  await sleep(300) // both gateways have seen the engine's heartbeat
  // The JetStream API requests every client makes, by kind: what a resync costs the server.
  const probe = await connect({ servers: nats.url })
  t.teardown(() => probe.close())
  const api = { consumerCreates: 0, lastReads: 0 }
  probe.subscribe('$JS.API.>', {
    callback: (_error, msg) => {
      if (msg.subject.startsWith('$JS.API.CONSUMER.CREATE.')) api.consumerCreates++
      if (msg.subject.startsWith('$JS.API.STREAM.MSG.GET.') || msg.subject.startsWith('$JS.API.DIRECT.GET.')) api.lastReads++
    },
  })
  await probe.flush()

  const s = await createSession(cut.base, { body: { arguments: { name: 'U' } } })
  await s.stream.next('crew.status.waiting')
  link.cut()
  await sleep(200)
  const put = await call(other.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'hello' } })
  t.equal(put.status, 201, 'the message is taken through the other gateway')
  await sleep(500) // the reply is out while the first gateway cannot hear it
  t.notOk(s.stream.events.some(e => e.event === 'assistant.message'), 'nothing reached the cut-off gateway meanwhile')
  link.heal()
  const reply = await s.stream.next('assistant.message', 10_000)
  t.equal(reply.data.text, 'Hello! How can I help you today?', 'the reply arrives after the reconnect, with no later event to reveal the gap')
  await s.stream.next('crew.status.waiting')
  const ids = s.stream.events.filter(e => e.id !== undefined && e.event !== 'hearthbeat').map(e => Number(e.id))
  t.same(ids, ids.map((_, i) => i + 1), 'every event once, in order, with consecutive ids')
  t.notOk(s.stream.events.some(e => e.event === 'stream.gap'), 'no gap reported: nothing was lost')
  t.ok(api.consumerCreates >= 1, `the missed reply was read back through a log reader (${api.consumerCreates} created)`)

  // Cut again while nothing happens: the resync reads the log's last entry, finds it is the
  // stream's position, and creates no reader.
  const before = { ...api }
  link.cut()
  await sleep(200)
  link.heal()
  const deadline = Date.now() + 10_000
  while (api.lastReads === before.lastReads && Date.now() < deadline) await sleep(50)
  t.ok(api.lastReads > before.lastReads, 'the reconnected gateway checked the log')
  await sleep(300)
  t.equal(api.consumerCreates, before.consumerCreates, 'and read nothing back: it had missed nothing')
  const again = await call(cut.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'hello again' } })
  t.equal(again.status, 201)
  await s.stream.next(e => e.event === 'assistant.message' && e.id !== undefined && Number(e.id) > Number(reply.id), 10_000)
  const all = s.stream.events.filter(e => e.id !== undefined && e.event !== 'hearthbeat').map(e => Number(e.id))
  t.same(all, all.map((_, i) => i + 1), 'the stream goes on after the quiet reconnect, ids consecutive')
  s.stream.close()
})

// A link that hangs for a few seconds without closing (no disconnect for the client to see):
// the engine's lease renewals do not get through in time, its lease lapses in the middle of a
// reply, and what the reply publishes meanwhile cannot go out (another node may own the session
// by then). Nobody else will ask for the session: its user is waiting for that reply. So the
// node takes the session back by itself once it can, and the restore gives the reply again.
t.test('an engine whose lease lapses mid-reply on a hanging link takes the session back and gives the reply', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const link = await startTcpProxy(nats.port)
  t.teardown(() => link.close())
  // A word every 400 ms: the reply outlasts the lease (renewed every 500 ms, counts for 1.5 s).
  const demo = DEFAULT_CREWS.crews.find((c: { id: string }) => c.id === 'demo')
  const CREWS_FILE = crewsFile({ patchDemo: { assistant: { ...demo.assistant, chunkDelayMs: 400 } } })
  const env = { MONGO_URL: mongoUrl, ENGINE_HEARTBEAT_MS: '200', ENGINE_LEASE_RENEW_MS: '500', CREWS_FILE }
  await startTestService(t, { env: { ...env, NATS_URL: `nats://127.0.0.1:${link.port}`, ROLE: 'engine' } })
  const gw = await startTestService(t, { env: { ...env, NATS_URL: nats.url, ROLE: 'gateway' } })
  await sleep(300)
  const s = await createSession(gw.base, { body: { arguments: { name: 'U' } } })
  t.teardown(() => s.stream.close())
  await s.stream.next('crew.status.waiting')
  t.equal((await call(gw.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'hello' } })).status, 201)
  await s.stream.next('assistant.response')
  link.stall()
  await sleep(3000)
  link.flow()
  const reply = await s.stream.next('assistant.message', 15_000)
  t.equal(reply.data.text, 'Hello! How can I help you today?', 'the reply reaches the stream after the link flows again')
  await s.stream.next('crew.status.waiting', 5_000)
  const history = (await call(gw.base, 'GET', `${ADMIN}/${s.sessionId}/history`, { headers: { UserId: 'sup' } })).json.data
  t.same(
    history.filter((e: any) => e.type === 'message.user' || e.type === 'message.assistant').map((e: any) => e.text),
    ['hello', 'Hello! How can I help you today?'],
    'the history has the message and one reply',
  )
  t.notOk(s.stream.events.some(e => e.event === 'stream.gap'), 'no gap reported')
  t.comment(s.stream.events.map(e => `${e.id ?? ''}:${e.event}`).join(' '))
})
