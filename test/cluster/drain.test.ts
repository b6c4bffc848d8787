// Issue 5, graceful drain: a gateway or an engine node stopped with SIGTERM hands its streams and
// sessions over without losing an event. Separate processes on one real nats-server (JetStream)
// and the MongoDB wire-protocol test server: 2 gateways and 2 engine nodes, all main.ts.
//
//  1. Engine drain: replies are streaming (150 ms per word) when the engine node that owns some
//     of the sessions gets SIGTERM. It finishes those replies, persists the sessions, releases
//     their leases and has the other node restore them at once (before any client asks). The
//     streams never reconnect: every event arrives once, ids run on without a hole, the history
//     holds every acknowledged message once, and the next message is answered by the survivor.
//  2. Gateway drain: replies are streaming when the gateway holding the clients' streams gets
//     SIGTERM. Each stream ends with `reconnect_required`; the client listens again through the
//     other gateway with Last-Event-ID and gets exactly the events it had not seen: what it read
//     before plus what it read after equals, id for id, what a listener on the other gateway saw.
import t from 'tap'
import { connect } from '@nats-io/transport-node'
import { Kvm } from '@nats-io/kv'
import { OWNERS_BUCKET } from '../../engine/cluster/ownership.js'
import { call, mongoUrlFor } from '../support/harness.js'
import { startNatsServer } from '../support/nats-server.js'
import { ADMIN, CHANNEL, createSession, openSse, type SseClient, type SseEvent } from '../support/sse.js'
import { crewsFile } from '../engine/fixtures/crews.js'
import { clusterEnv, outputsOf, startTwoByTwo, waitHealthy, type Proc } from '../support/processes.js'

const SESSIONS = 6
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))

interface Session {
  sessionId: string
  consumerId: string
  /** The client's stream (through gateway A) and a listener through gateway B. */
  stream: SseClient
  witness: SseClient
  acked: string[]
}

/** What a client keeps of a stream: the session's events (no heartbeats, no frames of its own). */
const sessionEvents = (events: SseEvent[]) =>
  events.filter(e => !['hearthbeat', 'reconnect_required', 'session.consumer.attached', 'stream.gap'].includes(e.event))
const triples = (events: SseEvent[]) => events.map(e => [Number(e.id), e.event, e.data])

/** The events both streams hold (the listener started later; either may be a little ahead). */
function overlap(a: SseEvent[], b: SseEvent[]) {
  const lo = Math.max(Number(a[0]!.id), Number(b[0]!.id))
  const hi = Math.min(Number(a.at(-1)!.id), Number(b.at(-1)!.id))
  const within = (events: SseEvent[]) => triples(events.filter(e => Number(e.id) >= lo && Number(e.id) <= hi))
  return { a: within(a), b: within(b), count: hi - lo + 1 }
}

async function say(base: string, s: Session, text: string) {
  const put = await call(base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: text } })
  if (put.status !== 201) throw new Error(`"${text}" refused: ${put.status} ${put.text}`)
  s.acked.push(text)
}

const replied = (text: string) => (e: SseEvent) => e.event === 'assistant.message' && e.data.text === `You said: ${text}`

t.test('SIGTERM: an engine node and a gateway hand over their sessions and streams without losing an event', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const env = clusterEnv(t, { natsUrl: nats.url, mongoUrl }, {
    CREWS_FILE: crewsFile({ patchDemo: { assistant: { provider: 'scripted', chunkDelayMs: 150 } } }),
    // Far above the replies in progress: a drain that ends before it ended because they did.
    ENGINE_DRAIN_TIMEOUT_MS: '30000',
  })
  const procs = await startTwoByTwo(t, env)
  const [gwA, gwB, e1, e2] = procs
  const outputs = outputsOf(procs, 3000)
  const health = await Promise.all(procs.map(p => waitHealthy(p)))
  const nodeOf = new Map<string, Proc>([
    [health[2]!.engineNode as string, e1],
    [health[3]!.engineNode as string, e2],
  ])
  await sleep(750) // both engine heartbeats seen by both gateways
  const A = gwA.base
  const B = gwB.base

  const probe = await connect({ servers: nats.url })
  t.teardown(() => probe.close())
  const owners = await new Kvm(probe).open(OWNERS_BUCKET)
  const ownerOf = async (id: string) => (await owners.get(id))?.json<{ node: string }>().node

  const sessions: Session[] = []
  for (let i = 0; i < SESSIONS; i++) {
    const created = await createSession(A)
    const witness = (await openSse(B, 'POST', `${CHANNEL}/${created.sessionId}/listen`)).stream!
    await witness.next('session.consumer.attached')
    sessions.push({ sessionId: created.sessionId, consumerId: created.consumerId, stream: created.stream, witness, acked: [] })
  }
  const placed = await Promise.all(sessions.map(async s => ({ s, owner: (await ownerOf(s.sessionId))! })))
  const leaving = placed[0]!.owner
  const staying = [...nodeOf.keys()].find(n => n !== leaving)!
  const moving = placed.filter(p => p.owner === leaving).map(p => p.s)
  t.ok(moving.length >= 1 && moving.length < SESSIONS, `sessions on both engine nodes (${moving.length} on the one that stops)`)

  // ---------------------------------------------------------------- 1. engine drain
  await Promise.all(sessions.map(s => say(B, s, `one two three four five six ${s.sessionId.slice(0, 4)}`)))
  await Promise.all(sessions.map(s => s.stream.next('assistant.response', 10_000))) // replies are streaming
  const sigterm = Date.now()
  const code = await nodeOf.get(leaving)!.terminate()
  const drainMs = Date.now() - sigterm
  t.equal(code, 0, 'the engine node exits cleanly')
  t.ok(drainMs < 30_000, `it drained in ${drainMs} ms, inside ENGINE_DRAIN_TIMEOUT_MS`)
  t.comment(`engine drain: ${drainMs} ms for ${moving.length} sessions (replies in progress finished first)`)
  for (const s of moving) t.equal(await ownerOf(s.sessionId), staying, 'restored on the other node before any client asked')

  for (const s of sessions) {
    const text = s.acked.at(-1)!
    await s.stream.next(replied(text), 10_000)
    await s.witness.next(replied(text), 10_000)
  }
  const answeredAfter = await Promise.all(
    moving.map(async s => {
      await say(A, s, `after the drain ${s.sessionId.slice(0, 4)}`)
      await s.stream.next(replied(s.acked.at(-1)!), 10_000)
      return Date.now() - sigterm
    }),
  )
  t.comment(`moved sessions answered again ${Math.min(...answeredAfter)}–${Math.max(...answeredAfter)} ms after SIGTERM`)
  for (const s of sessions) {
    const events = sessionEvents(s.stream.events)
    const ids = events.map(e => Number(e.id))
    t.ok(ids.every((id, i) => id === i + 1), `stream ids 1..${ids.length} without a hole or a repeat`)
    t.equal(events.filter(e => e.event === 'assistant.message').length, s.acked.length, 'each reply once')
    const both = overlap(events, sessionEvents(s.witness.events))
    t.same(both.a, both.b, `the other gateway saw the same ${both.count} events with the same ids`)
    const history = await call(B, 'GET', `${ADMIN}/${s.sessionId}/history`, { headers: { UserId: 'sup' } })
    t.same(history.json.data.filter((e: any) => e.type === 'message.user').map((e: any) => e.text), s.acked, 'every acknowledged message once')
  }

  // ---------------------------------------------------------------- 2. gateway drain
  await Promise.all(sessions.map(s => say(B, s, `seven eight nine ten eleven ${s.sessionId.slice(0, 4)}`)))
  await Promise.all(sessions.map(s => s.stream.next('assistant.response', 10_000)))
  const gatewayCode = gwA.terminate()
  const resumed = await Promise.all(
    sessions.map(async s => {
      const bye = await s.stream.next('reconnect_required', 10_000)
      t.match(bye.data, { sessionId: s.sessionId, consumerId: s.consumerId, reason: 'shutdown' })
      await s.stream.ended_()
      const opened = await openSse(B, 'POST', bye.data.listen.path, { headers: { 'Last-Event-ID': bye.id! } })
      t.equal(opened.status, 200, 'the other gateway takes the consumer back')
      const again = opened.stream!
      t.match(await again.next(), { event: 'session.consumer.attached', id: bye.id, data: { consumerId: s.consumerId, resumed: true } })
      await again.next(replied(s.acked.at(-1)!), 10_000)
      await s.witness.next(replied(s.acked.at(-1)!), 10_000)
      await again.next('crew.status.waiting', 10_000)
      return again
    }),
  )
  t.equal(await gatewayCode, 0, 'the gateway exits cleanly')
  for (const [i, s] of sessions.entries()) {
    const before = sessionEvents(s.stream.events)
    const after = sessionEvents(resumed[i]!.events)
    const together = [...before, ...after]
    const ids = together.map(e => Number(e.id))
    t.ok(ids.every((id, n) => id === n + 1), `before + after the switch: ids 1..${ids.length}, none missing, none twice`)
    const both = overlap(together, sessionEvents(s.witness.events))
    t.same(both.a, both.b, `exactly the ${both.count} events the listener on the other gateway saw`)
    resumed[i]!.close()
    s.witness.close()
  }
  t.ok(!nodeOf.get(leaving)!.alive() && nodeOf.get(staying)!.alive(), 'the survivor serves every session')
  if (t.passing() === false) t.comment(outputs())
})
