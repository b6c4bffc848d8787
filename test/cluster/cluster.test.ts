// Issue 5, "done means": the whole cluster as separate processes on one real nats-server
// (JetStream) and one MongoDB database (the wire-protocol test server): 2 gateways, 2 engine
// nodes and 2 dialer workers, all main.ts with a ROLE.
//
//  1. Sessions are created through both gateways and driven through the other one too (a
//     message sent through gateway B is answered on the stream held by gateway A); contact
//     loads go in through both gateways.
//  2. Mid-flight, one engine node (right after acknowledging messages, while streaming the
//     replies) and one worker (while holding chunks) are killed with SIGKILL. Every
//     acknowledged message is in its session's history exactly once, every session answers
//     again, every load ends `succeeded` with exact counters, the batch holds exactly the
//     contacts sent.
//  3. A client that reconnects through the *other* gateway with Last-Event-ID gets every event
//     it missed (read back from the session's JetStream event log) with its original id, then
//     the live events.
//  4. The nats-server is restarted (same port, same JetStream store): every process reconnects
//     and the service recovers (a new session, a message to an old session, a new load).
import t from 'tap'
import { connect } from '@nats-io/transport-node'
import { Kvm } from '@nats-io/kv'
import { jetstreamManager } from '@nats-io/jetstream'
import { streamName } from '../../platform/bus/nats-bus.js'
import { LOAD_QUEUE } from '../../dialer/loads.js'
import { OWNERS_BUCKET } from '../../engine/cluster/ownership.js'
import { call, mongoUrlFor } from '../support/harness.js'
import { contact, createBatch } from '../support/dialer.js'
import { startNatsServer } from '../support/nats-server.js'
import { ADMIN, CHANNEL, createSession, openSse, type SseClient } from '../support/sse.js'
import { crewsFile } from '../engine/fixtures/crews.js'
import { chunksProcessed, clusterEnv, outputsOf, startProcess, waitHealthy, type Proc } from '../support/processes.js'

const SESSIONS = 8
const LOADS = 12
const PER_LOAD = 400
const CHUNK_SIZE = 100
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))

interface Session {
  i: number
  sessionId: string
  consumerId: string
  stream: SseClient
  /** The gateway that created it (holds its stream) and the other one. */
  home: string
  other: string
  /** Messages acknowledged with 201, in order. */
  acked: string[]
}

async function say(base: string, s: Session, text: string) {
  const put = await call(base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: text } })
  if (put.status !== 201) throw new Error(`"${text}" refused by ${base}: ${put.status} ${put.text}`)
  s.acked.push(text)
}

/** Retries `fn` until it succeeds or the time is up (the cluster is settling after a restart). */
const retried: string[] = []
async function eventually<T>(what: string, fn: () => Promise<T>, timeoutMs = 20_000): Promise<{ value: T; ms: number }> {
  const started = Date.now()
  let last: unknown
  while (Date.now() - started < timeoutMs) {
    try {
      return { value: await fn(), ms: Date.now() - started }
    } catch (error) {
      retried.push(`${what}: ${String(error).slice(0, 160)}`)
      last = error
      await sleep(200)
    }
  }
  throw new Error(`${what} did not succeed within ${timeoutMs} ms: ${String(last)}`)
}

async function waitOperations(base: string, ids: string[], timeoutMs: number, who: () => string) {
  const deadline = Date.now() + timeoutMs
  const results = new Map<string, any>()
  while (results.size < ids.length) {
    if (Date.now() > deadline) throw new Error(`operations unfinished: ${ids.filter(id => !results.has(id)).join(', ')}\n${who()}`)
    for (const id of ids) {
      if (results.has(id)) continue
      const res = await call(base, 'GET', `/dialer/v1/batches/operations/${id}`)
      if (res.status === 200 && !['pending', 'running'].includes(res.json.status)) results.set(id, res.json)
    }
    if (results.size < ids.length) await sleep(200)
  }
  return results
}

const exactLoad = (requested: number) => ({
  status: 'succeeded',
  requestedCount: requested,
  insertedCount: requested,
  updatedCount: 0,
  duplicateCount: 0,
  invalidCount: 0,
  recontactedCount: 0,
  totalChunks: Math.ceil(requested / CHUNK_SIZE),
  chunksCompleted: Math.ceil(requested / CHUNK_SIZE),
  errors: [],
})

t.test('2 gateways, 2 engines, 2 workers: kill -9 an engine and a worker, restart nats-server', async t => {
  const started = Date.now()
  const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)} s`
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const env = clusterEnv(t, { natsUrl: nats.url, mongoUrl }, {
    // Replies stream word by word, 150 ms apart: the engine kill lands in the middle of one.
    CREWS_FILE: crewsFile({ patchDemo: { assistant: { provider: 'scripted', chunkDelayMs: 150, rules: [{ match: '\\b(hello|hi)\\b', reply: 'Hello! How can I help you today?' }] } } }),
    NATS_ACK_WAIT_MS: '3000', // a dead worker's chunk comes back after 3 s
    DIALER_CHUNK_SIZE: String(CHUNK_SIZE),
    DIALER_WORKER_CONCURRENCY: '2',
    DIALER_CYCLE_MS: '0',
  })
  const procs = await Promise.all([
    startProcess(t, 'gateway-a', { ...env, ROLE: 'gateway' }),
    startProcess(t, 'gateway-b', { ...env, ROLE: 'gateway' }),
    startProcess(t, 'engine-1', { ...env, ROLE: 'engine' }),
    startProcess(t, 'engine-2', { ...env, ROLE: 'engine' }),
    startProcess(t, 'worker-1', { ...env, ROLE: 'worker' }),
    startProcess(t, 'worker-2', { ...env, ROLE: 'worker' }),
  ])
  const [gwA, gwB, e1, e2, w1, w2] = procs as [Proc, Proc, Proc, Proc, Proc, Proc]
  const outputs = outputsOf(procs)
  const health = await Promise.all(procs.map(p => waitHealthy(p)))
  t.match(health[0], { role: 'gateway', bus: 'nats', store: 'mongo' })
  t.match(health[2], { role: 'engine', modules: ['engine'] })
  t.match(health[4], { role: 'worker', dialerWorkers: true })
  const nodeOf = new Map([
    [health[2]!.engineNode as string, e1],
    [health[3]!.engineNode as string, e2],
  ])
  t.comment(`6 processes healthy after ${elapsed()}`)
  await sleep(750) // both engine heartbeats seen by both gateways

  // ---------------------------------------------------------------- 1. traffic through both gateways
  const A = gwA.base
  const B = gwB.base
  const sessions: Session[] = []
  for (let i = 0; i < SESSIONS; i++) {
    const [home, other] = i % 2 === 0 ? [A, B] : [B, A]
    const created = await createSession(home)
    sessions.push({ i, sessionId: created.sessionId, consumerId: created.consumerId, stream: created.stream, home, other, acked: [] })
  }
  // Sent through the other gateway, answered on the stream the home gateway holds.
  await Promise.all(
    sessions.map(async s => {
      await say(s.other, s, 'hello')
      await s.stream.next(e => e.event === 'assistant.message' && e.data.text === 'Hello! How can I help you today?', 15_000)
      await s.stream.next('crew.status.waiting', 15_000)
    }),
  )
  t.pass(`${SESSIONS} sessions created through both gateways, answered across gateways`)

  const batchId = await createBatch(A)
  const operationIds = await Promise.all(
    Array.from({ length: LOADS }, async (_, r) => {
      const contacts = Array.from({ length: PER_LOAD }, (_, i) => contact(r * PER_LOAD + i))
      const res = await call(r % 2 === 0 ? A : B, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: { contacts } })
      if (res.status !== 202) throw new Error(`load refused: ${res.status} ${res.text}`)
      return res.json.operationId as string
    }),
  )
  t.comment(`${LOADS} loads accepted through both gateways after ${elapsed()}`)

  // ---------------------------------------------------------------- 2. kill -9 an engine and a worker
  const probe = await connect({ servers: nats.url, maxReconnectAttempts: -1, reconnectTimeWait: 250 })
  t.teardown(() => probe.close())
  const owners = await new Kvm(probe).open(OWNERS_BUCKET)
  const ownerOf = async (id: string) => (await owners.get(id))?.json<{ node: string }>().node
  const placed = await Promise.all(sessions.map(async s => ({ s, owner: await ownerOf(s.sessionId) })))
  const counts = new Map<string, number>()
  for (const p of placed) counts.set(p.owner ?? '?', (counts.get(p.owner ?? '?') ?? 0) + 1)
  t.ok([...counts.keys()].every(k => nodeOf.has(k)), 'every session is owned by one of the two engine nodes')
  t.equal(counts.size, 2, `sessions placed on both nodes (${[...counts.values()].join(' / ')})`)
  const victimNode = placed[0]!.owner!
  const victimProc = nodeOf.get(victimNode)!
  const survivorNode = [...nodeOf.keys()].find(n => n !== victimNode)!
  const victims = placed.filter(p => p.owner === victimNode).map(p => p.s)
  const bystanders = placed.filter(p => p.owner !== victimNode).map(p => p.s)

  // Acknowledged messages (through the other gateway), then the owner dies mid-reply.
  for (const s of victims) await say(s.other, s, `second ${s.i}`)
  await Promise.all(victims.map(s => s.stream.next('assistant.response', 10_000)))
  // The worker dies once it is demonstrably working on the queue.
  const deadline = Date.now() + 30_000
  while ((await chunksProcessed(w1)) < 1) {
    if (Date.now() > deadline) throw new Error(`worker-1 processed no chunks:\n${outputs()}`)
    await sleep(25)
  }
  const jsm = await jetstreamManager(probe)
  const chunks = streamName('SB', LOAD_QUEUE)
  const before = await jsm.consumers.info(chunks, 'workers')
  await Promise.all([victimProc.kill(), w1.kill()])
  t.ok(before.num_pending + before.num_ack_pending > 0, `chunks still queued (${before.num_pending}) or in flight (${before.num_ack_pending}) when worker-1 died`)
  const killedAt = Date.now()
  t.comment(`${victimProc.name} (${victims.length} sessions) and worker-1 killed -9 after ${elapsed()}`)

  // Every session answers again; the killed node's through a takeover by the survivor.
  const timings = await Promise.all(
    sessions.map(async s => {
      const text = `third ${s.i}`
      await say(s.i % 4 < 2 ? s.other : s.home, s, text)
      const accepted = Date.now() - killedAt
      await s.stream.next(e => e.event === 'assistant.message' && String(e.data.text).includes(text), 20_000)
      await s.stream.next('crew.status.waiting', 15_000)
      return { victim: victims.includes(s), accepted, replied: Date.now() - killedAt }
    }),
  )
  const moved = timings.filter(x => x.victim)
  t.comment(`failover: kill -> command accepted ${Math.min(...moved.map(x => x.accepted))}..${Math.max(...moved.map(x => x.accepted))} ms, -> reply ${Math.min(...moved.map(x => x.replied))}..${Math.max(...moved.map(x => x.replied))} ms`)
  for (const s of victims) t.equal(await ownerOf(s.sessionId), survivorNode, `session ${s.i} moved to the survivor`)

  // Nothing acknowledged lost or doubled, asked through both gateways.
  for (const s of sessions) {
    for (const base of [A, B]) {
      const history = await call(base, 'GET', `${ADMIN}/${s.sessionId}/history`, { headers: { UserId: 'sup' } })
      t.equal(history.status, 200)
      const entries = history.json.data as any[]
      t.same(entries.filter(e => e.type === 'message.user').map(e => e.text), s.acked, `session ${s.i}: every acknowledged message exactly once, in order`)
      const seqs = entries.map(e => e.seq)
      t.equal(new Set(seqs).size, seqs.length, 'no history sequence number twice')
    }
  }
  for (const s of victims) {
    const snapshot = await call(B, 'GET', `${ADMIN}/${s.sessionId}/snapshot`, { headers: { UserId: 'sup' } })
    const users = (snapshot.json.data.snapshot.memory.messages as any[]).filter(m => m.author === 'user').map(m => m.text)
    t.same(users, s.acked, `session ${s.i}: the restored conversation holds every acknowledged message`)
  }
  t.ok(bystanders.length >= 1, 'the survivor kept its own sessions')
  for (const s of sessions) {
    // The new owner numbers on from the log: every stream's ids run on without a hole or a repeat.
    const ids = s.stream.events.filter(e => e.event !== 'hearthbeat').map(e => Number(e.id))
    t.ok(ids.every((id, i) => id === ids[0]! + i), `session ${s.i}: stream ids ${ids[0]}..${ids.at(-1)} contiguous across the failover`)
  }

  const results = await waitOperations(A, operationIds, 45_000, outputs)
  for (const id of operationIds) t.match(results.get(id), exactLoad(PER_LOAD), `load ${id}: exact counters`)
  const listed = await call(B, 'GET', `/dialer/v1/batches/${batchId}/contacts?limit=1`)
  t.equal(listed.json.total, LOADS * PER_LOAD, 'the batch holds exactly the contacts sent')
  t.equal((await call(A, 'GET', `/dialer/v1/batches/${batchId}`)).json.totalContacts, LOADS * PER_LOAD, 'totalContacts is exact')
  t.equal((await jsm.streams.info(chunks)).state.messages, 0, 'every chunk acked: the work-queue stream is empty')
  t.comment(`every load finished after ${elapsed()}`)

  // ---------------------------------------------------------------- 3. Last-Event-ID through the other gateway
  {
    const s = sessions[0]!
    // A second listener on the home gateway sees what the disconnected client misses.
    const witness = (await openSse(s.home, 'POST', `${CHANNEL}/${s.sessionId}/listen`)).stream!
    await witness.next('session.consumer.attached')
    const lastId = Number(s.stream.events.filter(e => e.id !== undefined && e.event !== 'hearthbeat').at(-1)!.id)
    s.stream.close()
    await say(s.home, s, 'while away')
    await witness.next(e => e.event === 'assistant.message' && String(e.data.text).includes('while away'), 15_000)
    await witness.next('crew.status.waiting', 15_000)
    const missed = witness.events.filter(e => e.event !== 'hearthbeat' && Number(e.id) > lastId)

    const resumed = await openSse(s.other, 'POST', `${CHANNEL}/${s.sessionId}/listen?consumerId=${s.consumerId}`, { headers: { 'Last-Event-ID': String(lastId) } })
    t.equal(resumed.status, 200, 'the other gateway accepts the resumption')
    const stream = resumed.stream!
    t.match(await stream.next(), { event: 'session.consumer.attached', id: String(lastId), data: { consumerId: s.consumerId, resumed: true, lastEventId: lastId } })
    // A heartbeat published while away may be replayed among them (the witness's are left out above too).
    const replayed: typeof missed = []
    while (replayed.length < missed.length) {
      const event = await stream.next(undefined, 15_000)
      if (event.event !== 'hearthbeat') replayed.push(event)
    }
    t.same(
      replayed.map(e => [e.id, e.event, e.data]),
      missed.map(e => [e.id, e.event, e.data]),
      'every event missed while away, in order, with its original id, from a gateway that never served the session',
    )
    await say(s.other, s, 'hello again')
    const live = await stream.next(e => e.event === 'assistant.message' && e.data.text === 'Hello! How can I help you today?', 15_000)
    const seen = await witness.next(e => e.event === 'assistant.message' && e.data.text === 'Hello! How can I help you today?', 15_000)
    t.equal(live.id, seen.id, 'then live, with the same ids as on the home gateway')
    witness.close()
    s.stream = stream
  }

  // ---------------------------------------------------------------- 4. nats-server restart
  await nats.restart({ downMs: 1000 })
  const restartedAt = Date.now()
  t.comment(`nats-server restarted after ${elapsed()}`)
  const created = await eventually('a new session through gateway A', async () => createSession(A))
  t.pass(`a new session is created ${created.ms} ms after the restart`)
  const fresh = { i: 100, ...created.value, home: A, other: B, acked: [] } as Session
  await eventually('a message through gateway B to the new session', () => say(B, fresh, 'hello'))
  await fresh.stream.next(e => e.event === 'assistant.message' && e.data.text === 'Hello! How can I help you today?', 15_000)
  // Sessions from before the restart: every one answers again (leases may have lapsed while NATS was down).
  await Promise.all(
    sessions.map(async s => {
      await eventually(`a message to session ${s.i}`, () => say(s.i % 2 === 0 ? B : A, s, `after restart ${s.i}`))
      try {
        await s.stream.next(e => e.event === 'assistant.message' && String(e.data.text).includes(`after restart ${s.i}`), 15_000)
      } catch (error) {
        // Seen once in CI and not reproduced since: what each process logged is what tells why.
        const owner = await ownerOf(s.sessionId).catch(() => '?')
        throw new Error(`session ${s.i} (${s.sessionId}, owner ${owner}): ${(error as Error).message}\n${outputs()}`)
      }
    }),
  )
  t.comment(`every old session answered ${Date.now() - restartedAt} ms after the restart`)
  for (const s of [...sessions, fresh]) {
    const history = await call(A, 'GET', `${ADMIN}/${s.sessionId}/history`, { headers: { UserId: 'sup' } })
    t.same(history.json.data.filter((e: any) => e.type === 'message.user').map((e: any) => e.text), s.acked, `session ${s.i}: history exact after the restart`)
  }
  const loadAfter = await eventually('a load through gateway B', async () => {
    const contacts = Array.from({ length: 250 }, (_, i) => contact(1_000_000 + i))
    const res = await call(B, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: { contacts } })
    if (res.status !== 202) throw new Error(`${res.status} ${res.text}`)
    return res.json.operationId as string
  })
  const after = await waitOperations(A, [loadAfter.value], 30_000, outputs)
  t.match(after.get(loadAfter.value), exactLoad(250), 'a load after the restart succeeds with exact counters')
  t.equal((await call(B, 'GET', `/dialer/v1/batches/${batchId}/contacts?limit=1`)).json.total, LOADS * PER_LOAD + 250, 'the batch holds exactly what was sent')
  t.comment(`service recovered ${Date.now() - restartedAt} ms after the restart; retried: ${retried.length ? retried.join(' | ') : 'nothing'}`)
  // While NATS is away a request may be refused, but as 503/504 (retry), never as a 500.
  t.same(retried.filter(r => /\b500\b/.test(r)), [], 'no 500 while the nats-server restarted')

  for (const p of [gwA, gwB, e1, e2, w2].filter(p => p !== victimProc)) t.ok(p.alive(), `${p.name} still running`)
  for (const s of [...sessions, fresh]) s.stream.close()
  t.comment(`done in ${elapsed()}`)
})
