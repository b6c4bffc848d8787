// Cluster bench: engine nodes over NATS, as separate processes (main.ts with a ROLE) behind one
// gateway, on a real nats-server and one MongoDB (the wire-protocol test server, or MONGO_URL).
// In the same run:
//   1. one engine node: sessions created/s (closed loop, CREATE_IN_FLIGHT at once, until
//      Initialized) and messages/s (MSG_SESSIONS sessions, each PUT -> its assistant.message on
//      the stream, then the next PUT);
//   2. the node is stopped (SIGTERM) and two fresh engine nodes started: the same two figures;
//   3. failover: one of the two is killed -9; one session it owned sends a message (time from
//      the kill to the 201 and to the reply on the stream: detection + one restore), then all
//      the others at once (restores in bulk, timed from their send).
// Loopback only; bounded (hard limit 4 min). Writes bench/cluster/results.json and results.md.
//
//   node --import @tapjs/typescript/import bench/cluster/run.ts
//   BENCH_SECONDS=8 BENCH_MSG_SESSIONS=32 BENCH_CREATE_IN_FLIGHT=16
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { randomUUID } from 'node:crypto'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { connect } from '@nats-io/transport-node'
import { Kvm } from '@nats-io/kv'
import { OWNERS_BUCKET } from '../../engine/cluster/ownership.js'
import { API_KEYS, call } from '../../test/support/harness.js'
import { startMongoTestServer } from '../../test/support/mongo-server.js'
import { startNatsServer } from '../../test/support/nats-server.js'
import { CHANNEL, createSession, type SseClient } from '../../test/support/sse.js'
import { startProcess, waitHealthy, type Proc } from '../../test/support/processes.js'
import { writeResults } from '../support.js'

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8)
const MSG_SESSIONS = Number(process.env.BENCH_MSG_SESSIONS ?? 32)
const CREATE_IN_FLIGHT = Number(process.env.BENCH_CREATE_IN_FLIGHT ?? 16)
const HARD_LIMIT_MS = 230_000
const REPLY = 'Noted.'
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))
const started = Date.now()
const log = (line: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${line}`)

const teardowns: (() => unknown)[] = []
const t = { teardown: (fn: () => unknown) => void teardowns.push(fn) }
async function cleanup() {
  for (const fn of teardowns.reverse()) {
    try {
      await fn()
    } catch {}
  }
}
const watchdog = setTimeout(() => {
  console.error(`bench exceeded ${HARD_LIMIT_MS / 1000} s; stopping`)
  void cleanup().finally(() => process.exit(2))
}, HARD_LIMIT_MS)
watchdog.unref()

function crewsFile(): string {
  const crews = JSON.parse(readFileSync(new URL('../../config/crews.json', import.meta.url), 'utf8'))
  for (const crew of crews.crews) {
    crew.maxConcurrentSessions = 1_000_000
    if (crew.id === 'demo') crew.assistant = { provider: 'scripted', chunkDelayMs: 0, rules: [], fallback: REPLY }
  }
  const path = join(mkdtempSync(join(tmpdir(), 'sb-bench-cluster-')), 'crews.json')
  writeFileSync(path, JSON.stringify(crews))
  return path
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? NaN

/** Closed loop: CREATE_IN_FLIGHT clients create sessions (until Initialized) for SECONDS. */
async function createRate(base: string) {
  const latencies: number[] = []
  let errors = 0
  const end = Date.now() + SECONDS * 1000
  await Promise.all(
    Array.from({ length: CREATE_IN_FLIGHT }, async () => {
      while (Date.now() < end) {
        const t0 = performance.now()
        try {
          const s = await createSession(base)
          latencies.push(performance.now() - t0)
          s.stream.close()
        } catch {
          errors++
        }
      }
    }),
  )
  latencies.sort((a, b) => a - b)
  return { created: latencies.length, perSecond: latencies.length / SECONDS, p50: pct(latencies, 50), p99: pct(latencies, 99), errors }
}

interface Live {
  sessionId: string
  consumerId: string
  stream: SseClient
}

/** Closed loop: each session sends a message, waits for its reply on the stream, sends the next. */
async function messageRate(base: string, sessions: Live[]) {
  const latencies: number[] = []
  let errors = 0
  const end = Date.now() + SECONDS * 1000
  await Promise.all(
    sessions.map(async s => {
      let n = 0
      while (Date.now() < end) {
        const t0 = performance.now()
        const put = await call(base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: `m${n++}` } })
        if (put.status !== 201) {
          errors++
          await sleep(50)
          continue
        }
        try {
          await s.stream.next(e => e.event === 'assistant.message', 15_000)
          latencies.push(performance.now() - t0)
        } catch {
          errors++
        }
      }
    }),
  )
  latencies.sort((a, b) => a - b)
  return { messages: latencies.length, perSecond: latencies.length / SECONDS, p50: pct(latencies, 50), p99: pct(latencies, 99), errors }
}

async function openSessions(base: string, n: number): Promise<Live[]> {
  const out: Live[] = []
  for (let i = 0; i < n; i += 8) {
    out.push(...(await Promise.all(Array.from({ length: Math.min(8, n - i) }, () => createSession(base)))))
  }
  return out
}

async function main() {
  const nats = await startNatsServer(t)
  const mongo = await startMongoTestServer()
  t.teardown(() => mongo.stop())
  const mongoUrl = new URL(mongo.url)
  mongoUrl.pathname = `/sb_bench_${randomUUID().replace(/-/g, '')}`
  const env = {
    MONGO_URL: mongoUrl.toString(),
    NATS_URL: nats.url,
    API_KEYS,
    CREWS_FILE: crewsFile(),
    LOG_LEVEL: 'warn',
    DIALER_CYCLE_MS: '0',
  }
  const gateway = await startProcess(t, 'gateway', { ...env, ROLE: 'gateway' })
  const e1 = await startProcess(t, 'engine-1', { ...env, ROLE: 'engine' })
  await Promise.all([waitHealthy(gateway), waitHealthy(e1)])
  await sleep(1500) // the gateway has seen the node's heartbeat
  const base = gateway.base
  log('gateway + 1 engine node up')

  // Warm-up (JIT, collections, indexes), not measured.
  const warm = await openSessions(base, 8)
  await messageRate(base, warm).catch(() => undefined)
  for (const s of warm) s.stream.close()

  const one = { create: await createRate(base), message: undefined as Awaited<ReturnType<typeof messageRate>> | undefined }
  log(`1 node: ${one.create.perSecond.toFixed(1)} sessions/s`)
  const oneSessions = await openSessions(base, MSG_SESSIONS)
  one.message = await messageRate(base, oneSessions)
  log(`1 node: ${one.message.perSecond.toFixed(1)} messages/s`)
  for (const s of oneSessions) s.stream.close()

  // Two fresh nodes (the first one's sessions would skew least-loaded placement).
  e1.child.kill('SIGTERM')
  await e1.exited
  const [e2, e3] = await Promise.all([startProcess(t, 'engine-2', { ...env, ROLE: 'engine' }), startProcess(t, 'engine-3', { ...env, ROLE: 'engine' })])
  const [h2] = await Promise.all([waitHealthy(e2), waitHealthy(e3)])
  await sleep(1500)
  log('2 engine nodes up')
  const warm2 = await openSessions(base, 8)
  await messageRate(base, warm2).catch(() => undefined)
  for (const s of warm2) s.stream.close()
  const two = { create: await createRate(base), message: undefined as Awaited<ReturnType<typeof messageRate>> | undefined }
  log(`2 nodes: ${two.create.perSecond.toFixed(1)} sessions/s`)
  const twoSessions = await openSessions(base, MSG_SESSIONS)
  two.message = await messageRate(base, twoSessions)
  log(`2 nodes: ${two.message.perSecond.toFixed(1)} messages/s`)

  // Failover: kill -9 the node that owns the first session; its sessions speak at once.
  const probe = await connect({ servers: nats.url })
  t.teardown(() => probe.close())
  const owners = await new Kvm(probe).open(OWNERS_BUCKET)
  const owned = await Promise.all(twoSessions.map(async s => ({ s, node: (await owners.get(s.sessionId))?.json<{ node: string }>().node })))
  const victimNode = owned[0]!.node
  const victim: Proc = victimNode === h2.engineNode ? e2 : e3
  const moved = owned.filter(o => o.node === victimNode).map(o => o.s)
  await sleep(500) // quiet: the message loop has ended
  victim.child.kill('SIGKILL')
  const killedAt = performance.now()
  await victim.exited
  // The first session alone (detection + one restore), then the rest at once (restores in bulk).
  const speak = async (s: Live) => {
    const put = await call(base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'after the kill' } })
    const accepted = performance.now() - killedAt
    if (put.status !== 201) throw new Error(`failover message refused: ${put.status} ${put.text}`)
    await s.stream.next(e => e.event === 'assistant.message', 20_000)
    return { accepted, replied: performance.now() - killedAt }
  }
  const first = await speak(moved[0]!)
  const restStart = performance.now() - killedAt
  const rest = await Promise.all(moved.slice(1).map(speak))
  for (const s of twoSessions) s.stream.close()
  const accepted = rest.map(f => f.accepted - restStart).sort((a, b) => a - b)
  const replied = rest.map(f => f.replied - restStart).sort((a, b) => a - b)
  const fo = {
    sessions: moved.length,
    heartbeatMs: 1000,
    first: { accepted: first.accepted, replied: first.replied },
    rest: { sessions: rest.length, acceptedP50: pct(accepted, 50), acceptedMax: accepted.at(-1) ?? NaN, repliedP50: pct(replied, 50), repliedMax: replied.at(-1) ?? NaN },
  }
  log(`failover: first session accepted ${fo.first.accepted.toFixed(0)} ms after the kill; the other ${fo.rest.sessions} at once: replied ≤ ${fo.rest.repliedMax.toFixed(0)} ms`)

  const load = (await import('node:os')).loadavg()[0]!
  const results = {
    at: new Date().toISOString(),
    machine: { cpus: (await import('node:os')).cpus().length, loadAverage1m: Number(load.toFixed(1)) },
    store: process.env.MONGO_URL ? 'mongod (MONGO_URL)' : 'MongoDB wire test server (mockupdb + mongomock, Python)',
    settings: { seconds: SECONDS, createInFlight: CREATE_IN_FLIGHT, messageSessions: MSG_SESSIONS, heartbeatMs: 1000, leaseRenewMs: 2000, reply: 'scripted, one word, no delay' },
    oneNode: one,
    twoNodes: two,
    ratio: { sessionsPerSecond: two.create.perSecond / one.create.perSecond, messagesPerSecond: two.message.perSecond / one.message.perSecond },
    failover: fo,
  }
  writeResults(import.meta.url, started, results)
  const f = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d })
  const md = [
    `| engine nodes (1 gateway) | sessions created/s (p50 / p99) | messages/s, PUT → assistant.message (p50 / p99) |`,
    `|---|---:|---:|`,
    `| 1 | ${f(one.create.perSecond, 1)} (${f(one.create.p50)} / ${f(one.create.p99)} ms) | ${f(one.message.perSecond, 1)} (${f(one.message.p50)} / ${f(one.message.p99)} ms) |`,
    `| 2 | ${f(two.create.perSecond, 1)} (${f(two.create.p50)} / ${f(two.create.p99)} ms) | ${f(two.message.perSecond, 1)} (${f(two.message.p50)} / ${f(two.message.p99)} ms) |`,
    `| 2 ÷ 1 | ×${f(results.ratio.sessionsPerSecond, 2)} | ×${f(results.ratio.messagesPerSecond, 2)} |`,
    '',
    `Failover (kill -9 of a node owning ${fo.sessions} of the message sessions, heartbeat ${fo.heartbeatMs} ms): the first session's next message is accepted ${f(fo.first.accepted)} ms after the kill (reply on the stream at ${f(fo.first.replied)} ms); then the other ${fo.rest.sessions} send at once: accepted p50 ${f(fo.rest.acceptedP50)} / max ${f(fo.rest.acceptedMax)} ms, replied p50 ${f(fo.rest.repliedP50)} / max ${f(fo.rest.repliedMax)} ms (restores in bulk).`,
    '',
    `${results.machine.cpus} cores, load average ${results.machine.loadAverage1m}; store: ${results.store}; errors: create ${one.create.errors}/${two.create.errors}, message ${one.message.errors}/${two.message.errors}.`,
    '',
  ].join('\n')
  writeFileSync(new URL('./results.md', import.meta.url), md)
  console.log(`\n${md}`)
}

main()
  .then(cleanup, async error => {
    console.error(error)
    await cleanup()
    process.exitCode = 1
  })
  .finally(() => {
    clearTimeout(watchdog)
    log('done')
  })
