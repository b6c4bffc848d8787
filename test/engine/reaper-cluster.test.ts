// The orphan reaper across engine nodes: two ROLE=engine processes and a gateway on a real
// nats-server and one MongoDB database. The crew is filled, one engine node is killed with
// SIGKILL, and no client touches its sessions again. The survivor's reaper takes their leases
// (the owner is dead), restores them past their idle deadline and closes them as idle
// timeouts: their streams get session.closed, their records end as abandoned, and the crew
// accepts as many new sessions as its limit again (without the reaper their places leak).
import t from 'tap'
import { connect } from '@nats-io/transport-node'
import { Kvm } from '@nats-io/kv'
import { OWNERS_BUCKET } from '../../engine/cluster/ownership.js'
import { MongoStore } from '../../platform/store/index.js'
import { mongoUrlFor, startTestService } from '../support/harness.js'
import { startNatsServer } from '../support/nats-server.js'
import { createSession } from '../support/sse.js'
import { crewsFile } from './fixtures/crews.js'
import { clusterEnv, startProcess, waitHealthy } from '../support/processes.js'

const LIMIT = 6
const IDLE = 3000
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))

t.test('the sessions of an engine node killed -9 that nobody touches again free their crew slots', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const env = clusterEnv(t, { natsUrl: nats.url, mongoUrl }, {
    CREWS_FILE: crewsFile({ patchDemo: { maxConcurrentSessions: LIMIT } }),
    SESSION_IDLE_TIMEOUT_MS: String(IDLE),
    ENGINE_REAPER_INTERVAL_MS: '200',
  })
  const [p1, p2] = await Promise.all([startProcess(t, 'engine-1', { ...env, ROLE: 'engine' }), startProcess(t, 'engine-2', { ...env, ROLE: 'engine' })])
  const [h1, h2] = await Promise.all([waitHealthy(p1), waitHealthy(p2)])
  const gw = await startTestService(t, { env: { ...env, ROLE: 'gateway', LOG_LEVEL: 'silent' } })
  await sleep(600) // both heartbeats seen by the gateway
  const store = await MongoStore.connect(mongoUrl)
  t.teardown(() => store.close())

  const sessions = []
  for (let i = 0; i < LIMIT; i++) sessions.push(await createSession(gw.base))
  t.teardown(() => sessions.forEach(s => s.stream.close()))
  await t.rejects(createSession(gw.base), /429/, 'the crew is full')

  const probe = await connect({ servers: nats.url })
  t.teardown(() => probe.close())
  const owners = await new Kvm(probe).open(OWNERS_BUCKET)
  const placed = await Promise.all(sessions.map(async s => ({ ...s, owner: (await owners.get(s.sessionId))?.json<{ node: string }>().node })))
  const victims = placed.filter(s => s.owner === h1.engineNode)
  t.ok(victims.length >= 1 && victims.length < LIMIT, `sessions on both nodes (${victims.length} on the victim)`)
  t.ok(placed.every(s => s.owner === h1.engineNode || s.owner === h2.engineNode))

  p1.child.kill('SIGKILL')
  const killedAt = Date.now()
  await p1.exited
  const deadline = Math.max(...(await store.collection('engine_sessions').find({ _id: { $in: victims.map(s => s.sessionId) } })).map(d => d.deadlines.idle))

  // Nobody sends anything: the survivor's reaper closes them as their idle timeout would.
  for (const s of victims) {
    const closed = await s.stream.next('session.closed', IDLE + 15_000)
    t.same(closed.data, { sessionId: s.sessionId, reason: 'idle_timeout' }, 'the client learns it idled out')
  }
  let free = -1
  for (let i = 0; i < 300 && free < 0; i++) {
    if ((await store.collection('engine_crew_slots').findOne({ _id: 'acme:demo' }))?.live === 0) free = Date.now()
    else await sleep(50)
  }
  t.ok(free > 0, 'every slot released')
  const line = `reaper (${victims.length} orphans): slots free ${free - killedAt} ms after the kill, ${free - deadline} ms after the last idle deadline (idle ${IDLE} ms, reaper every 200 ms)`
  t.comment(line)
  console.log(line)
  for (const s of victims) {
    t.match(await store.collection('engine_sessions').findOne({ _id: s.sessionId }), { state: 'destroyed', closeReason: 'idle_timeout' })
    t.match(await store.collection('session_records').findOne({ _id: s.sessionId }), { status: 'abandoned', end_reason: 'idle_timeout' })
    const lease = await owners.get(s.sessionId)
    t.ok(!lease || lease.operation !== 'PUT', 'its lease is gone')
  }
  const again = []
  for (let i = 0; i < LIMIT; i++) again.push(await createSession(gw.base))
  t.equal(again.length, LIMIT, 'the crew takes as many sessions as its limit again')
  again.forEach(s => s.stream.close())
})
