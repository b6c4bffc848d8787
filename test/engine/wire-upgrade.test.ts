// The wire protocol's rolling upgrade (docs/deploy.md, "Wire protocol"): engine nodes first,
// then gateways. NATS_WIRE_VERSION=1 stands in for the build before the protocol was versioned
// (it writes what that build wrote: no `v`, errors with an HTTP status), so the steps run in
// process on one real nats-server and the MongoDB wire-protocol test server:
//
//   0. an old engine node and an old gateway; sessions, streams and messages;
//   1. a new engine node joins and the old one drains: its sessions move over (the old node's
//      claim is version 1), and the old gateway goes on talking to the new node, answered in
//      version 1, its clients' streams untouched, errors as they were;
//   2. a new gateway joins and the old one stops: its clients listen again there with
//      Last-Event-ID.
//
// Every stream holds every event once with consecutive ids, the history every acknowledged
// message once, and no process refused a message. Then the other order: what a node cannot read
// is refused whole, answered at once and counted, and nothing of it is applied.
import t from 'tap'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { Kvm } from '@nats-io/kv'
import { OWNERS_BUCKET } from '../../engine/cluster/ownership.js'
import { WIRE_VERSION } from '../../platform/wire.js'
import type { NatsBus } from '../../platform/bus/index.js'
import { NatsRequests } from '../../platform/bus/nats-requests.js'
import { call, mongoUrlFor, startTestService, type TestService } from '../support/harness.js'
import { startNatsServer } from '../support/nats-server.js'
import { ADMIN, CHANNEL, createSession, openSse, type SseClient, type SseEvent } from '../support/sse.js'

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))
const OLD = { NATS_WIRE_VERSION: '1' }
const SESSIONS = 3

/** What a client keeps of a stream: the session's events. */
const sessionEvents = (events: SseEvent[]) => events.filter(e => !['hearthbeat', 'reconnect_required', 'session.consumer.attached', 'stream.gap'].includes(e.event))
const replied = (text: string) => (e: SseEvent) => e.event === 'assistant.message' && e.data.text === `You said: ${text}`

async function refusedOn(service: TestService): Promise<number> {
  const text = await (await fetch(`${service.metricsBase}/metrics`)).text()
  return [...text.matchAll(/^switchboard_wire_refused_total\{[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0)
}

const parse = (data: Uint8Array | string) => {
  const text = typeof data === 'string' ? data : new TextDecoder().decode(data)
  try {
    return text ? JSON.parse(text) : ''
  } catch {
    return '(not JSON)'
  }
}

interface Exchange {
  who: string
  phase: string
  subject: string
  request: any
  answer: any
}

/**
 * What each process wrote and was answered: its requests are recorded where it makes them (a
 * subscriber on the request subjects would count as a responder and hide "no responders"), the
 * events by a plain subscription.
 */
async function tap(url: string) {
  const nc = await connect({ servers: url })
  const state = { phase: 'old' }
  const exchanges: Exchange[] = []
  const events: { phase: string; body: any }[] = []
  nc.subscribe('sb.session.*.events', { callback: (_error, msg) => events.push({ phase: state.phase, body: parse(msg.data) }) })
  await nc.flush()
  const spy = (service: TestService, who: string) => {
    const link = (service.service.platform.bus as NatsBus).connection as NatsConnection
    const request = link.request.bind(link)
    link.request = async (subject, payload, options) => {
      const answer = await request(subject, payload, options)
      exchanges.push({ who, phase: state.phase, subject, request: parse((payload ?? '') as Uint8Array | string), answer: parse(answer.data) })
      return answer
    }
    // Commands go through the connection's shared inbox (platform/bus/nats-requests.ts).
    const requests = NatsRequests.of(link)
    const command = requests.request.bind(requests)
    requests.request = async (subject, payload, timeoutMs, headers) => {
      const answer = await command(subject, payload, timeoutMs, headers)
      exchanges.push({ who, phase: state.phase, subject, request: parse(payload), answer: parse(answer.data) })
      return answer
    }
  }
  return { nc, state, exchanges, events, spy }
}

interface Session {
  sessionId: string
  consumerId: string
  stream: SseClient
  acked: string[]
}

async function say(base: string, s: Session, text: string) {
  const put = await call(base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: text } })
  if (put.status !== 201) throw new Error(`"${text}" refused: ${put.status} ${put.text}`)
  s.acked.push(text)
}

t.test('rolling upgrade: engine nodes first, then gateways; no message lost or repeated', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const env = { MONGO_URL: mongoUrl, NATS_URL: nats.url, ENGINE_HEARTBEAT_MS: '200', ENGINE_LEASE_RENEW_MS: '500' }
  const wire = await tap(nats.url)
  t.teardown(() => wire.nc.close())

  // ------------------------------------------------------------ 0. the old build everywhere
  const oldEngine = await startTestService(t, { env: { ...env, ...OLD, ROLE: 'engine' } })
  const oldGateway = await startTestService(t, { env: { ...env, ...OLD, ROLE: 'gateway' } })
  wire.spy(oldEngine, 'old engine')
  wire.spy(oldGateway, 'old gateway')
  await sleep(300) // the gateway has seen the engine's heartbeat
  const sessions: Session[] = []
  for (let i = 0; i < SESSIONS; i++) {
    const created = await createSession(oldGateway.base, { body: { arguments: { name: `U${i}` } } })
    sessions.push({ sessionId: created.sessionId, consumerId: created.consumerId, stream: created.stream, acked: [] })
  }
  for (const s of sessions) {
    await say(oldGateway.base, s, `one ${s.sessionId.slice(0, 4)}`)
    await s.stream.next(replied(s.acked.at(-1)!), 10_000)
  }

  // ------------------------------------------------------------ 1. engine nodes upgrade
  wire.state.phase = 'engines'
  const newEngine = await startTestService(t, { env: { ...env, ROLE: 'engine' } })
  await sleep(300)
  const refusedBefore = [await refusedOn(oldEngine), await refusedOn(oldGateway)]
  await oldEngine.close() // drains: each session handed to the new node
  wire.state.phase = 'mixed'
  for (const s of sessions) {
    await say(oldGateway.base, s, `two ${s.sessionId.slice(0, 4)}`)
    await s.stream.next(replied(s.acked.at(-1)!), 10_000)
  }
  const owners = await new Kvm(wire.nc).open(OWNERS_BUCKET)
  const lease = await owners.get(sessions[0]!.sessionId)
  t.equal(lease?.json<{ v?: number }>().v, WIRE_VERSION, 'the new node holds the lease (its entry is in its version)')

  // Errors reach the old gateway's clients as they did: the node answers it in version 1.
  const s0 = sessions[0]!
  const stranger = '0d9a7f0e-5b1c-4c1e-8a41-2f7d6b3c9e98'
  const errorCalls = [
    ['PUT', `${CHANNEL}/0d9a7f0e-5b1c-4c1e-8a41-2f7d6b3c9e99/${s0.consumerId}`, { body: { message: 'x' } }],
    ['PUT', `${CHANNEL}/${s0.sessionId}/${stranger}`, { body: { message: 'x' } }],
    ['PUT', `${ADMIN}/${s0.sessionId}/resume`, { headers: { UserId: 'sup' } }],
  ] as const
  const throughOld = []
  for (const [method, path, options] of errorCalls) throughOld.push(await call(oldGateway.base, method, path, options))
  t.match(throughOld.map(r => [r.status, r.json]), [
    [404, { code: 'SESSION_NOT_FOUND', message: 'Session 0d9a7f0e-5b1c-4c1e-8a41-2f7d6b3c9e99 not found' }],
    [400, { code: 'UNKNOWN_CONSUMER', message: `Consumer ${stranger} is not attached to session ${s0.sessionId}` }],
    [409, { code: 'INVALID_SESSION_STATE', message: /admin.resume is not allowed/, state: String, command: 'admin.resume' }],
  ])

  // ------------------------------------------------------------ 2. gateways upgrade
  wire.state.phase = 'gateways'
  const newGateway = await startTestService(t, { env: { ...env, ROLE: 'gateway' } })
  wire.spy(newGateway, 'new gateway')
  await sleep(300)
  const throughNew = []
  for (const [method, path, options] of errorCalls) throughNew.push(await call(newGateway.base, method, path, options))
  t.same(throughNew.map(r => [r.status, r.json]), throughOld.map(r => [r.status, r.json]), 'the new gateway answers the same errors, byte for byte')
  const refusedMixed = [await refusedOn(oldGateway), await refusedOn(newEngine)]
  const closing = oldGateway.close()
  const resumed = await Promise.all(
    sessions.map(async s => {
      const bye = await s.stream.next('reconnect_required', 10_000)
      await s.stream.ended_()
      const opened = await openSse(newGateway.base, 'POST', bye.data.listen.path, { headers: { 'Last-Event-ID': bye.id! } })
      t.equal(opened.status, 200, 'the client listens again through the new gateway')
      return opened.stream!
    }),
  )
  await closing
  wire.state.phase = 'new'
  for (const [i, s] of sessions.entries()) {
    await say(newGateway.base, s, `three ${s.sessionId.slice(0, 4)}`)
    await resumed[i]!.next(replied(s.acked.at(-1)!), 10_000)
    await resumed[i]!.next('crew.status.waiting', 10_000)
  }

  // ------------------------------------------------------------ no message lost or repeated
  for (const [i, s] of sessions.entries()) {
    const before = sessionEvents(s.stream.events)
    const after = sessionEvents(resumed[i]!.events)
    const ids = [...before, ...after].map(e => Number(e.id))
    t.ok(ids.length > 10 && ids.every((id, n) => id === n + 1), `ids 1..${ids.length} across both builds and both gateways, none missing, none twice`)
    t.notOk(before.some(e => e.event === 'stream.gap') || after.some(e => e.event === 'stream.gap'), 'no gap reported')
    t.same([...before, ...after].filter(e => e.event === 'assistant.message').map(e => e.data.text), s.acked.map(text => `You said: ${text}`), 'each reply once, in order')
    const history = await call(newGateway.base, 'GET', `${ADMIN}/${s.sessionId}/history`, { headers: { UserId: 'sup' } })
    t.same(history.json.data.filter((e: any) => e.type === 'message.user').map((e: any) => e.text), s.acked, 'every acknowledged message once')
    resumed[i]!.close()
  }
  t.same([...refusedBefore, ...refusedMixed, await refusedOn(newGateway), await refusedOn(newEngine)], [0, 0, 0, 0, 0, 0], 'no process refused a message')

  // ------------------------------------------------------------ what each side wrote
  const commands = (who: string, phase: string) =>
    wire.exchanges.filter(x => x.who === who && x.phase === phase && /^sb\.session\.[^.]+\.cmd$/.test(x.subject) && x.request.command?.type === 'user.message' && x.request.command.text !== 'x')
  const mixed = commands('old gateway', 'mixed')
  t.ok(mixed.length >= SESSIONS && mixed.every(x => !('v' in x.request)), 'the old gateway writes version 1 (no v)')
  t.ok(mixed.every(x => !('v' in x.answer) && x.answer.ok === true), 'the new node answers it in version 1')
  const errors = wire.exchanges.filter(x => x.who === 'old gateway' && x.phase === 'mixed' && x.answer.ok === false && x.answer.error)
  t.ok(errors.length >= 3 && errors.every(x => !('v' in x.answer) && typeof x.answer.error.status === 'number' && !('kind' in x.answer.error)), 'errors to the old gateway carry the status, as version 1 did')
  const events = (phase: string) => wire.events.filter(e => e.phase === phase).map(e => e.body)
  t.ok(events('old').length > 0 && events('old').every(e => !('v' in e)), 'the old node publishes version-1 events')
  t.ok(events('mixed').length > 0 && events('mixed').every(e => e.v === WIRE_VERSION), "the new node publishes events of its version, which the old gateway's streams carried")
  const handed = wire.exchanges.filter(x => x.who === 'old engine' && /^sb\.engine\.[^.]+\.claim$/.test(x.subject))
  t.ok(handed.length >= SESSIONS && handed.every(x => !('v' in x.request) && !('v' in x.answer) && x.answer.ok === true), "the draining old node's claims are version 1, taken and answered in version 1 by the new node")
  const current = commands('new gateway', 'new')
  t.ok(current.length >= SESSIONS && current.every(x => x.request.v === WIRE_VERSION && x.answer.v === WIRE_VERSION), 'new gateway and new node: the newest version both ways')
})

t.test('what a node cannot read is refused whole, answered at once, counted, and not applied', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const env = { MONGO_URL: mongoUrl, NATS_URL: nats.url, ENGINE_HEARTBEAT_MS: '200', ENGINE_LEASE_RENEW_MS: '500' }
  const engine = await startTestService(t, { env: { ...env, ROLE: 'engine' } })
  const gateway = await startTestService(t, { env: { ...env, ROLE: 'gateway' } })
  await sleep(300)
  const s = await createSession(gateway.base)
  t.teardown(() => s.stream.close())
  await s.stream.next('crew.status.waiting')
  const probe = await connect({ servers: nats.url })
  t.teardown(() => probe.close())
  const target = { sessionId: s.sessionId, accountId: 'acme' }
  const ask = async (payload: unknown) => JSON.parse(new TextDecoder().decode((await probe.request(`sb.session.${s.sessionId}.cmd`, JSON.stringify(payload), { timeout: 5000 })).data))

  // A gateway ahead of its engine node (the order the rule forbids): a version this node does not read.
  const ahead = await ask({ v: WIRE_VERSION + 1, target, command: { type: 'user.message', consumerId: s.consumerId, text: 'from the future' }, id: 'a' })
  t.match(ahead, { v: WIRE_VERSION, ok: false, error: { kind: 'unavailable', code: 'WIRE_REFUSED', retryAfterSeconds: 1 } }, 'answered at once, in the newest version this node speaks')
  // Its own version, but not what that version says a command is.
  const odd = await ask({ v: WIRE_VERSION, target, command: { type: 'user.message', consumerId: s.consumerId, text: 'odd', urgent: true }, id: 'b' })
  t.match(odd, { v: WIRE_VERSION, ok: false, error: { code: 'WIRE_REFUSED' } })
  const oldOdd = await ask({ target, command: { type: 'user.message', consumerId: s.consumerId } })
  t.match(oldOdd, { ok: false, error: { status: 503, code: 'WIRE_REFUSED' } }, 'a malformed version-1 request is answered in version 1')
  t.notOk('v' in oldOdd, 'without v')
  // An event no build wrote: the gateway's stream does not get it and goes on.
  probe.publish(`sb.session.${s.sessionId}.events`, JSON.stringify({ v: WIRE_VERSION, kind: 'event', name: 'assistant.message', seq: 99, epoch: 1 }))
  probe.publish(`sb.session.${s.sessionId}.events`, '{"kind":')
  await probe.flush()
  await sleep(200)

  const history = await call(gateway.base, 'GET', `${ADMIN}/${s.sessionId}/history`, { headers: { UserId: 'sup' } })
  t.notOk(history.json.data.some((e: any) => e.type === 'message.user'), 'nothing of them was applied')
  t.notOk(s.stream.events.some(e => e.event === 'assistant.message'), 'the refused events were not sent to the stream')
  t.equal((await call(gateway.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'hello' } })).status, 201)
  t.equal((await s.stream.next('assistant.message', 10_000)).data.text, 'Hello! How can I help you today?', 'the session and its stream go on')

  const counted = async (service: TestService) =>
    [...(await (await fetch(`${service.metricsBase}/metrics`)).text()).matchAll(/^switchboard_wire_refused_total\{message="([^"]+)",reason="([^"]+)"\} (\d+)/gm)].map(m => [m[1], m[2], Number(m[3])])
  t.same(await counted(engine), [['session.request', 'version', 1], ['session.request', 'schema', 2]], 'the node counted its refusals')
  t.same(await counted(gateway), [['session.event', 'schema', 1], ['session.event', 'json', 1]], 'the gateway counted its own')
})
