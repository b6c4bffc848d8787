// MongoDB away while conversations go on: two ROLE=engine processes and a gateway on a real
// nats-server and the MongoDB wire test server. The database is paused (SIGSTOP: it keeps its
// data in memory, as a stalled primary would) while every session keeps talking, and one engine
// node is killed -9 in the middle of it. A turn's durable write is the session journal on
// JetStream, so every message is acknowledged and answered through the outage, the dead node's
// sessions are restored from the journal by the survivor, the engine nodes say they are behind,
// and once the database answers again it holds every acknowledged message exactly once.
import t from 'tap'
import { connect } from '@nats-io/transport-node'
import { Kvm } from '@nats-io/kv'
import { OWNERS_BUCKET } from '../../engine/cluster/ownership.js'
import { MongoStore } from '../../platform/store/index.js'
import { call, eventually, startTestService } from '../support/harness.js'
import { startMongoTestServer } from '../support/mongo-server.js'
import { startNatsServer } from '../support/nats-server.js'
import { ADMIN, CHANNEL, createSession } from '../support/sse.js'
import { crewsFile } from '../engine/fixtures/crews.js'
import { clusterEnv, outputsOf, startProcess, waitHealthy, type Proc } from '../support/processes.js'

const SESSIONS = 4
const ROUNDS = 3
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))
const health = async (proc: Proc) => (await fetch(`${proc.base}/healthz`)).json() as Promise<Record<string, any>>

t.test('a MongoDB outage: live sessions keep taking turns, a dead node loses nothing, MongoDB catches up', async t => {
  const mongo = await startMongoTestServer()
  t.teardown(async () => {
    if (mongo.pid) process.kill(mongo.pid, 'SIGCONT')
    await mongo.stop()
  })
  if (!mongo.pid) {
    t.skip('MONGO_URL names a real mongod: this test pauses the local test server')
    return
  }
  const mongoUrl = `${mongo.url.replace('/?', '/sb_outage?')}`
  const nats = await startNatsServer(t)
  const env = clusterEnv(t, { natsUrl: nats.url, mongoUrl }, {
    CREWS_FILE: crewsFile(),
    // A MongoDB batch not answered within 1 s counts as failing (shown by /healthz), and is retried.
    ENGINE_STORE_WRITE_TIMEOUT_MS: '1000',
    // Not hibernated during the test: a wake reads the journal too, but the kill is the point here.
    ENGINE_HIBERNATE_AFTER_MS: '0',
  })
  const [p1, p2] = await Promise.all([startProcess(t, 'engine-1', { ...env, ROLE: 'engine' }), startProcess(t, 'engine-2', { ...env, ROLE: 'engine' })])
  const [h1, h2] = await Promise.all([waitHealthy(p1), waitHealthy(p2)])
  const outputs = outputsOf([p1, p2])
  const gw = await startTestService(t, { env: { ...env, ROLE: 'gateway', LOG_LEVEL: 'silent' } })
  await sleep(600) // both heartbeats seen by the gateway

  const sessions = []
  for (let i = 0; i < SESSIONS; i++) sessions.push({ i, ...(await createSession(gw.base)) })
  t.teardown(() => sessions.forEach(s => s.stream.close()))
  const say = async (s: (typeof sessions)[number], text: string) => {
    const started = Date.now()
    let put = await call(gw.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: text } })
    // As a client does: a 503 (this machine overloaded by the other tests running beside this one)
    // refused the message before recording anything, and says when to try again.
    for (let retry = 0; put.status === 503 && put.json?.code === 'OVERLOADED' && retry < 3; retry++) {
      await sleep(1000 * Math.min(2, Number(put.headers.get('retry-after') ?? 1)))
      put = await call(gw.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: text } })
    }
    const acked = Date.now() - started
    const reply = put.status === 201 ? await s.stream.next(e => e.event === 'assistant.message', 15_000) : undefined
    return { status: put.status, acked, reply: reply?.data.text as string | undefined, detail: put.text }
  }
  for (const s of sessions) t.equal((await say(s, 'before')).reply, 'You said: before', 'answered before the outage')

  const probe = await connect({ servers: nats.url })
  t.teardown(() => probe.close())
  const owners = await new Kvm(probe).open(OWNERS_BUCKET)
  const ownerOf = async (id: string) => (await owners.get(id))?.json<{ node: string }>().node
  for (const s of sessions) Object.assign(s, { owner: await ownerOf(s.sessionId) })
  const victims = sessions.filter(s => (s as { owner?: string }).owner === h1.engineNode)
  t.ok(victims.length >= 1 && victims.length < SESSIONS, `sessions on both nodes (${victims.length} on the node to be killed)`)

  process.kill(mongo.pid, 'SIGSTOP')
  const pausedAt = Date.now()
  const acks: number[] = []
  for (let round = 0; round < ROUNDS; round++) {
    const said = await Promise.all(sessions.map(s => say(s, `during ${round}`)))
    said.forEach((r, k) => {
      t.equal(r.status, 201, `acknowledged with MongoDB paused (round ${round}, session ${k})`, r.status === 201 ? {} : { detail: r.detail })
      t.equal(r.reply, `You said: during ${round}`, 'and answered')
      acks.push(r.acked)
    })
    await sleep(1000) // a conversation's pace: the outage lasts
  }
  t.comment(`acknowledged during the outage: ${acks.length}/${SESSIONS * ROUNDS}, slowest ${Math.max(...acks)} ms`)
  const behind = await eventually(() => health(p2), h => h.storeWrites?.failingForMs > 0, 10_000)
  t.equal(behind.status, 'degraded', '/healthz says the engine node is degraded')
  t.ok(behind.storeWrites.behind > 0, `and how many writes MongoDB is behind (${behind.storeWrites.behind})`)
  const metrics = await (await fetch(`${p2.metricsBase}/metrics`)).text()
  t.match(metrics, /switchboard_store_behind 1/, 'the metric says so too')

  // The node owning some sessions dies while MongoDB is away: the survivor restores them from the journal.
  p1.child.kill('SIGKILL')
  await p1.exited
  const killedAt = Date.now()
  for (const s of victims) {
    const r = await say(s, 'after the kill')
    t.equal(r.status, 201, "a dead node's session takes a message during the outage", r.status === 201 ? {} : { detail: r.detail, outputs: outputs() })
    t.equal(r.reply, 'You said: after the kill', 'answered by the survivor')
    t.equal(await ownerOf(s.sessionId), h2.engineNode, 'which owns it now')
  }
  t.comment(`dead node's sessions answered ${Date.now() - killedAt} ms after the kill, MongoDB paused for ${Date.now() - pausedAt} ms`)

  process.kill(mongo.pid, 'SIGCONT')
  const caughtUp = await eventually(() => health(p2), h => h.status === 'ok' && h.storeWrites?.behind === 0, 30_000)
  t.same(caughtUp.storeWrites, { behind: 0, failingForMs: 0 }, 'MongoDB caught up')

  // What MongoDB holds now: every acknowledged message of every session, once, in order.
  const store = await MongoStore.connect(mongoUrl)
  t.teardown(() => store.close())
  for (const s of sessions) {
    const said = ['before', ...Array.from({ length: ROUNDS }, (_, r) => `during ${r}`), ...(victims.includes(s) ? ['after the kill'] : [])]
    const journal = await store.orderedLog<{ type?: string; text?: string; seq?: number }>('engine_session_journal').read(s.sessionId, 0)
    const users = journal.map(r => r.value).filter(v => v.type === 'message.user')
    t.same(users.map(v => v.text), said, `MongoDB's copy of session ${s.i}'s history: each acknowledged message once`)
    const seqs = journal.map(r => r.position)
    t.equal(new Set(seqs).size, seqs.length, 'no entry twice')
    const history = await call(gw.base, 'GET', `${ADMIN}/${s.sessionId}/history?limit=200`, { headers: { UserId: 'sup' } })
    t.same(history.json.data.filter((e: any) => e.type === 'message.user').map((e: any) => e.text), said, 'the history read says the same')
    const doc = await store.collection('engine_sessions').findOne({ _id: s.sessionId })
    t.match(doc, { state: 'active' }, 'the session document is there')
  }
})
