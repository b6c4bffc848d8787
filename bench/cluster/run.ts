// Cluster bench: a load test of the scale-out deployment against the single process, same run.
// Each configuration is started fresh (its own nats-server and MongoDB stand-in), then the load
// generator (load.ts, its own process) opens BENCH_SESSIONS sessions through the one HTTP entry
// and sends BENCH_RATE messages/s over them, open loop: a warm-up, then BENCH_SECONDS measured.
// Each round, in order:
//   a. single: one process, ROLE=all, embedded store (its own DATA_DIR), no NATS: the baseline;
//   b. one node: 1 gateway + 1 engine node + nats-server (JetStream) + the MongoDB wire test server;
//   c. two nodes: the same with 2 engine nodes.
// Measured per configuration: PUT -> its assistant.message on the session's stream and PUT -> 201
// (p50/p99/max, from the client), errors and timeouts; CPU per message of every process from
// /proc/<pid>/stat over the measured window (the MongoDB stand-in apart); live sessions per
// engine node. BENCH_ROUNDS rounds; medians. Then, once:
//   failover (the first round's two-node cluster, under load): kill -9 of the node owning the most
//     sessions; 16 of its sessions send at once; kill -> all 16 answered on their streams;
//   MongoDB outage (a fresh one-node cluster): 8 sessions send every 2 s; the stand-in is
//     SIGSTOPped for BENCH_OUTAGE_SECONDS; messages acknowledged (201 within 10 s) and replies
//     during it; after SIGCONT every acknowledged message must be in its history exactly once.
// Loopback only; bounded (BENCH_HARD_LIMIT_MS, 12 min). Writes results.json and results.md.
//
//   node --import @tapjs/typescript/import bench/cluster/run.ts
//   BENCH_SESSIONS=1000 BENCH_RATE=500 BENCH_SECONDS=15 BENCH_WARMUP_SECONDS=4 BENCH_ROUNDS=3 BENCH_OUTAGE_SECONDS=30
//   BENCH_SERVICE_ENV='{"K":"V"}'  settings added to every service process
import { execFileSync, fork, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { randomUUID } from 'node:crypto'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { Kvm } from '@nats-io/kv'
import { OWNERS_BUCKET } from '../../engine/cluster/ownership.js'
import { API_KEYS, KEYS } from '../../test/support/harness.js'
import { startMongoTestServer, type MongoTestServer } from '../../test/support/mongo-server.js'
import { startNatsServer, type NatsTestServer } from '../../test/support/nats-server.js'
import { startProcess, waitHealthy, type Proc } from '../../test/support/processes.js'
import { machineInfo, writeResults } from '../support.js'

const num = (name: string, fallback: number) => Number(process.env[name] ?? fallback)
const SESSIONS = num('BENCH_SESSIONS', 1000)
const RATE = num('BENCH_RATE', 500)
const SECONDS = num('BENCH_SECONDS', 15)
const WARMUP_SECONDS = num('BENCH_WARMUP_SECONDS', 4)
const ROUNDS = num('BENCH_ROUNDS', 3)
const OUTAGE_SECONDS = num('BENCH_OUTAGE_SECONDS', 30)
const HARD_LIMIT_MS = num('BENCH_HARD_LIMIT_MS', 720_000)
const FAILOVER_SESSIONS = 16
const OUTAGE_SESSIONS = 8
const OUTAGE_EVERY_MS = 2000
const ACK_WITHIN_MS = 10_000
const SERVICE_ENV: Record<string, string> = JSON.parse(process.env.BENCH_SERVICE_ENV ?? '{}')
const ADMIN = '/engine/api/administration/session'
const ROOT = fileURLToPath(new URL('../../', import.meta.url))

const started = Date.now()
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))
const log = (line: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${line}`)
/** Wall-clock ms with sub-ms precision, as load.ts stamps its messages. */
const now = () => performance.timeOrigin + performance.now()
const pct = (sorted: number[], p: number): number | null => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]! : null)
const median = (values: (number | null | undefined)[]) => {
  const sorted = values.filter((v): v is number => typeof v === 'number' && Number.isFinite(v)).sort((a, b) => a - b)
  return sorted.length ? sorted[Math.floor(sorted.length / 2)]! : null
}

// ------------------------------------------------------------------ teardown and the time limit

/** What one configuration started, stopped when it ends (last started, first stopped). */
class Scope {
  private readonly fns: (() => unknown)[] = []
  teardown(fn: () => unknown) {
    this.fns.push(fn)
  }
  async close() {
    for (const fn of this.fns.splice(0).reverse()) {
      try {
        await fn()
      } catch {}
    }
  }
}
const scopes = new Set<Scope>()
const paused = new Set<number>()
let loadChild: ChildProcess | undefined

async function cleanupAll() {
  // A stopped process would not see SIGTERM: let it run before it is stopped.
  for (const pid of paused) signal(pid, 'SIGCONT')
  loadChild?.kill('SIGKILL')
  for (const scope of [...scopes].reverse()) await scope.close()
}

const watchdog = setTimeout(() => {
  console.error(`bench exceeded ${HARD_LIMIT_MS / 1000} s; stopping`)
  void cleanupAll().finally(() => process.exit(2))
}, HARD_LIMIT_MS)
watchdog.unref()

function signal(pid: number, sig: NodeJS.Signals) {
  try {
    process.kill(pid, sig)
  } catch {}
}

// ------------------------------------------------------------------ /proc

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100
  } catch {
    return 100
  }
})()

/** The fields of /proc/<pid>/stat after the command name (index 0 = field 3, the state). */
function statFields(pid: number): string[] | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return text.slice(text.lastIndexOf(')') + 2).split(' ')
  } catch {
    return null
  }
}

/** utime + stime of every thread of the process, in ms. */
function cpuMs(pid: number): number | null {
  const f = statFields(pid)
  return f ? ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK : null
}

/** A child of this process whose command line matches (the helpers do not expose their pids). */
function childPid(matches: (cmdline: string) => boolean, exclude: Set<number>): number | null {
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry)
    if (!Number.isInteger(pid) || exclude.has(pid) || Number(statFields(pid)?.[1]) !== process.pid) continue
    try {
      if (matches(readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' '))) return pid
    } catch {}
  }
  return null
}

// ------------------------------------------------------------------ the load generator

interface LoadClient {
  pid: number
  ask<T = any>(type: string, payload?: object, timeoutMs?: number): Promise<T>
  onMark(fn: ((phase: 'start' | 'end') => void) | undefined): void
}

async function startLoad(): Promise<LoadClient> {
  const child = fork(fileURLToPath(new URL('./load.ts', import.meta.url)), [], {
    cwd: ROOT,
    execArgv: ['--import', '@tapjs/typescript/import'],
    // load.ts imports node:http only: nothing to type-check, start it fast.
    env: { ...process.env, TS_NODE_TRANSPILE_ONLY: '1' },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  })
  loadChild = child
  const waiting = new Map<string, { resolve: (v: any) => void; reject: (e: Error) => void }>()
  let mark: ((phase: 'start' | 'end') => void) | undefined
  const ready = new Promise<number>((resolve, reject) => {
    child.once('exit', code => reject(new Error(`load generator exited (${code})`)))
    child.on('message', (m: any) => {
      if (m.type === 'ready') return resolve(m.pid)
      if (m.type === 'mark') return mark?.(m.phase)
      const w = waiting.get(m.id)
      if (!w) return
      waiting.delete(m.id)
      if (m.ok) w.resolve(m.result)
      else w.reject(new Error(`load generator: ${m.error}`))
    })
  })
  child.on('exit', () => {
    for (const w of waiting.values()) w.reject(new Error('load generator exited'))
  })
  const pid = await ready
  return {
    pid,
    onMark: fn => (mark = fn),
    ask(type, payload = {}, timeoutMs = 300_000) {
      const id = randomUUID()
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiting.delete(id)
          reject(new Error(`load generator: no answer to ${type} within ${timeoutMs} ms`))
        }, timeoutMs)
        waiting.set(id, {
          resolve: v => (clearTimeout(timer), resolve(v)),
          reject: e => (clearTimeout(timer), reject(e)),
        })
        child.send({ id, type, ...payload })
      })
    },
  }
}

// ------------------------------------------------------------------ deployments

interface Measured {
  name: string
  role: 'service' | 'gateway' | 'engine' | 'nats' | 'mongo' | 'load'
  pid: number
}

interface Deployment {
  kind: (typeof CONFIGS)[number]
  /** The HTTP entry's port. */
  port: number
  /** How the load generator speaks the channel: SSE + PUT, or one WebSocket per session. */
  transport: 'sse' | 'ws'
  entry: Proc
  engines: { proc: Proc; node: string | undefined }[]
  nats?: NatsTestServer
  mongoPid: number | null
  processes: Measured[]
  scope: Scope
}

function crewsFile(dir: string): string {
  const crews = JSON.parse(readFileSync(new URL('../../config/crews.json', import.meta.url), 'utf8'))
  for (const crew of crews.crews) {
    crew.maxConcurrentSessions = 1_000_000
    // The reply quotes the message (`#<n>#`): load.ts matches each reply to its message.
    if (crew.id === 'demo') crew.assistant = { provider: 'scripted', chunkDelayMs: 0, rules: [], fallback: 'Noted: {{text}}' }
  }
  const path = join(dir, 'crews.json')
  writeFileSync(path, JSON.stringify(crews))
  return path
}

/** A temporary directory removed when the scope closes. */
function tempDir(scope: Scope, prefix: string) {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  scope.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** Settings every service process gets: 1,000 streams of one key, no load shedding, quiet logs. */
function baseEnv(scope: Scope): Record<string, string> {
  return {
    API_KEYS,
    CREWS_FILE: crewsFile(tempDir(scope, 'sb-bench-cluster-crews-')),
    LOG_LEVEL: 'warn',
    DIALER_CYCLE_MS: '0',
    OVERLOAD_LOOP_DELAY_MS: '0',
    OVERLOAD_ACCOUNT_STREAMS_PERCENT: '100',
    OVERLOAD_MAX_STREAMS: String(Math.max(20_000, SESSIONS * 4)),
    UPLOAD_SIGNING_SECRET: 'bench-signing-secret-0123456789abcdef',
    ...SERVICE_ENV,
  }
}

function newScope() {
  const scope = new Scope()
  scopes.add(scope)
  return scope
}

async function startSingle(transport: Deployment['transport'] = 'sse'): Promise<Deployment> {
  const scope = newScope()
  const env = { ...baseEnv(scope), ROLE: 'all', DATA_DIR: tempDir(scope, 'sb-bench-cluster-data-') }
  const proc = await startProcess(scope, 'single', env)
  await waitHealthy(proc)
  return { kind: transport === 'ws' ? 'singleSocket' : 'single', port: proc.port, transport, entry: proc, engines: [{ proc, node: undefined }], mongoPid: null, processes: [{ name: 'service', role: 'service', pid: proc.child.pid! }], scope }
}

const seenMongoPids = new Set<number>()

async function startCluster(engineCount: number): Promise<Deployment> {
  const scope = newScope()
  const nats = await startNatsServer(scope)
  const natsPid = childPid(cmd => cmd.includes('nats-server') && cmd.includes(nats.storeDir), new Set())
  const mongo: MongoTestServer = await startMongoTestServer()
  scope.teardown(() => mongo.stop())
  const mongoPid = process.env.MONGO_URL ? null : childPid(cmd => cmd.includes('mongo-wire-server.py'), seenMongoPids)
  if (mongoPid) seenMongoPids.add(mongoPid)
  scope.teardown(() => mongoPid && paused.has(mongoPid) && (signal(mongoPid, 'SIGCONT'), paused.delete(mongoPid)))
  const mongoUrl = new URL(mongo.url)
  mongoUrl.pathname = `/sb_bench_${randomUUID().replace(/-/g, '')}`
  const env = { ...baseEnv(scope), MONGO_URL: mongoUrl.toString(), NATS_URL: nats.url }
  const dataDir = (name: string) => ({ DATA_DIR: tempDir(scope, `sb-bench-cluster-${name}-`) })
  const gateway = await startProcess(scope, 'gateway', { ...env, ...dataDir('gateway'), ROLE: 'gateway' })
  const engineProcs = await Promise.all(Array.from({ length: engineCount }, (_, i) => startProcess(scope, `engine-${i + 1}`, { ...env, ...dataDir(`engine-${i + 1}`), ROLE: 'engine' })))
  const [, ...health] = await Promise.all([waitHealthy(gateway), ...engineProcs.map(p => waitHealthy(p))])
  // The gateway places sessions on the nodes it has heard from (heartbeat 1 s): wait for them all.
  await sleep(1500)
  const processes: Measured[] = [
    { name: 'gateway', role: 'gateway', pid: gateway.child.pid! },
    ...engineProcs.map((p): Measured => ({ name: p.name, role: 'engine', pid: p.child.pid! })),
    ...(natsPid ? [{ name: 'nats-server', role: 'nats', pid: natsPid } as Measured] : []),
    ...(mongoPid ? [{ name: 'MongoDB stand-in', role: 'mongo', pid: mongoPid } as Measured] : []),
  ]
  return {
    kind: engineCount === 1 ? 'oneNode' : 'twoNodes',
    port: gateway.port,
    transport: 'sse',
    entry: gateway,
    engines: engineProcs.map((proc, i) => ({ proc, node: health[i]!.engineNode as string | undefined })),
    nats,
    mongoPid,
    processes,
    scope,
  }
}

/** The floor (floor.ts): its gateway and engine as processes of their own, with their own nats-server. */
async function startFloor(): Promise<Deployment> {
  const scope = newScope()
  const nats = await startNatsServer(scope)
  const natsPid = childPid(cmd => cmd.includes('nats-server') && cmd.includes(nats.storeDir), new Set())
  const env = { ...process.env, NATS_URL: nats.url, FLOOR_API_KEY: KEYS.acme, TS_NODE_TRANSPILE_ONLY: '1' }
  const start = (role: 'gateway' | 'engine') =>
    new Promise<{ child: ChildProcess; port?: number }>((resolve, reject) => {
      const child = fork(fileURLToPath(new URL('./floor.ts', import.meta.url)), [role], { execArgv: ['--import', '@tapjs/typescript/import'], env, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
      scope.teardown(() => new Promise<void>(done => (child.exitCode !== null ? done() : (child.once('exit', () => done()), child.kill('SIGKILL')))))
      child.once('message', (m: any) => resolve({ child, port: m.port }))
      child.once('exit', code => reject(new Error(`floor ${role} exited (${code})`)))
    })
  const engine = await start('engine')
  const gateway = await start('gateway')
  const processes: Measured[] = [
    { name: 'gateway', role: 'gateway', pid: gateway.child.pid! },
    { name: 'engine-1', role: 'engine', pid: engine.child.pid! },
    ...(natsPid ? [{ name: 'nats-server', role: 'nats', pid: natsPid } as Measured] : []),
  ]
  return { kind: 'floor', port: gateway.port!, transport: 'sse', entry: null as unknown as Proc, engines: [], nats, mongoPid: null, processes, scope }
}

async function stopDeployment(dep: Deployment, load: LoadClient) {
  await load.ask('close').catch(() => undefined)
  await dep.scope.close()
  scopes.delete(dep.scope)
}

/** switchboard_sessions_live (all crews) of a process hosting sessions. */
async function liveSessions(proc: Proc): Promise<number | null> {
  try {
    const text = await (await fetch(`${proc.metricsBase}/metrics`, { signal: AbortSignal.timeout(5000) })).text()
    let sum = 0
    for (const m of text.matchAll(/^switchboard_sessions_live(?:\{[^}]*\})? (\S+)$/gm)) sum += Number(m[1])
    return sum
  } catch {
    return null
  }
}

// ------------------------------------------------------------------ the load part

interface ConfigRun {
  config: Deployment['kind']
  round: number
  open: { sessions: number; seconds: number; perSecond: number; refused: number }
  load: any
  cpu: {
    windowSeconds: number
    byProcess: { name: string; role: Measured['role']; cpuMs: number | null; msPerMessage: number | null }[]
    /** gateway + engine nodes + nats-server (or the single process). */
    clusterMsPerMessage: number | null
    mongoMsPerMessage: number | null
    loadGeneratorMsPerMessage: number | null
  }
  sessionsPerEngine: { name: string; node?: string; live: number | null }[]
  /** The largest distance of a node's live sessions from the nodes' mean, in percent of it. */
  spreadPercent: number | null
}

async function measure(dep: Deployment, load: LoadClient, round: number): Promise<ConfigRun> {
  const open = await load.ask('open', { target: { host: '127.0.0.1', port: dep.port }, key: KEYS.acme, count: SESSIONS, transport: dep.transport })
  log(`  ${SESSIONS} sessions open in ${open.seconds.toFixed(1)} s (${open.perSecond.toFixed(0)}/s, ${open.refused} refused)`)
  const measured = [...dep.processes, { name: 'load generator', role: 'load', pid: load.pid } as Measured]
  const samples: { at: number; cpu: (number | null)[] }[] = []
  const sample = () => samples.push({ at: now(), cpu: measured.map(p => cpuMs(p.pid)) })
  load.onMark(sample)
  const result = await load.ask('run', { rate: RATE, warmupSeconds: WARMUP_SECONDS, seconds: SECONDS })
  load.onMark(undefined)
  const sessionsPerEngine = await Promise.all(dep.engines.map(async e => ({ name: e.proc.name, node: e.node, live: await liveSessions(e.proc) })))
  const [before, after] = samples as [(typeof samples)[0], (typeof samples)[0]]
  const answered = Math.max(1, result.measured.answered)
  const byProcess = measured.map((p, i) => {
    const ms = before.cpu[i] != null && after.cpu[i] != null ? after.cpu[i]! - before.cpu[i]! : null
    return { name: p.name, role: p.role, cpuMs: ms, msPerMessage: ms === null ? null : ms / answered }
  })
  const sumOf = (roles: Measured['role'][]) => {
    const parts = byProcess.filter(p => roles.includes(p.role))
    return parts.length && parts.every(p => p.msPerMessage !== null) ? parts.reduce((s, p) => s + p.msPerMessage!, 0) : null
  }
  return {
    config: dep.kind,
    round,
    open,
    load: result,
    cpu: {
      windowSeconds: (after.at - before.at) / 1000,
      byProcess,
      clusterMsPerMessage: sumOf(['service', 'gateway', 'engine', 'nats']),
      mongoMsPerMessage: sumOf(['mongo']),
      loadGeneratorMsPerMessage: sumOf(['load']),
    },
    sessionsPerEngine,
    spreadPercent: spread(sessionsPerEngine.map(e => e.live)),
  }
}

function spread(live: (number | null)[]): number | null {
  if (live.some(n => n === null)) return null
  const mean = (live as number[]).reduce((a, b) => a + b, 0) / live.length
  return mean ? (100 * Math.max(...live.map(n => Math.abs(n! - mean)))) / mean : null
}

function describe(r: ConfigRun) {
  const m = r.load.measured
  const f = (n: number | null, d = 2) => (n === null ? '-' : n.toFixed(d))
  const procs = r.cpu.byProcess.map(p => `${p.name} ${f(p.msPerMessage, 3)}`).join(', ')
  return (
    `  ${r.config} round ${r.round}: ${m.sent} sent (${f(m.achievedRate, 0)}/s), ${m.answered} answered; PUT → reply p50 ${f(m.rttMs.p50)} p99 ${f(m.rttMs.p99)} max ${f(m.rttMs.max, 1)} ms; ` +
    `201 p50 ${f(m.ackMs.p50)} p99 ${f(m.ackMs.p99)} ms; errors ${m.errors}, timeouts ${m.timeouts}, skipped ${m.skippedBusy}; CPU ms/msg: cluster ${f(r.cpu.clusterMsPerMessage, 3)} (${procs}); ` +
    `live sessions ${r.sessionsPerEngine.map(e => e.live).join(' / ')}`
  )
}

// ------------------------------------------------------------------ failover

/** Which engine node owns each session (the lease bucket in JetStream KV). */
async function owners(nc: NatsConnection, ids: string[]): Promise<Map<string, string | undefined>> {
  const kv = await new Kvm(nc).open(OWNERS_BUCKET)
  const out = new Map<string, string | undefined>()
  for (let i = 0; i < ids.length; i += 50) {
    await Promise.all(ids.slice(i, i + 50).map(async id => out.set(id, (await kv.get(id))?.json<{ node: string }>().node)))
  }
  return out
}

async function failover(dep: Deployment, load: LoadClient) {
  const nc = await connect({ servers: dep.nats!.url })
  dep.scope.teardown(() => nc.close())
  const ids: string[] = await load.ask('ids')
  const owned = await owners(nc, ids)
  const count = (node: string | undefined) => ids.filter(id => owned.get(id) === node).length
  const victim = [...dep.engines].sort((a, b) => count(b.node) - count(a.node))[0]!
  const victimSessions = ids.filter(id => owned.get(id) === victim.node)
  const chosen = victimSessions.slice(0, FAILOVER_SESSIONS)
  if (chosen.length < FAILOVER_SESSIONS) throw new Error(`the lease bucket names ${victimSessions.length} sessions of the busiest node, not ${FAILOVER_SESSIONS}`)
  await load.ask('reserve', { ids: chosen })
  await load.ask('background', { rate: RATE })
  await sleep(2000) // the others busy: the kill lands mid-traffic
  victim.proc.child.kill('SIGKILL')
  const killedAt = now()
  // Sent once the process is gone, as a client would find it: a request that races the kill itself
  // is lost on the dying node's socket and waits out the gateway's timeout (the background load
  // counts those).
  await victim.proc.exited
  const exitedAt = now()
  const burst: any[] = await load.ask('burst', { ids: chosen, deadlineMs: 30_000 }, 60_000)
  const allAnsweredAt = now()
  await sleep(1000)
  const background = await load.ask('stopBackground')
  const replied = burst.filter(b => b.replyAt !== null)
  const since = (field: 'ackAt' | 'replyAt') => replied.map(b => b[field] - killedAt).sort((a, b) => a - b)
  const result = {
    engines: dep.engines.map(e => ({ name: e.proc.name, node: e.node, sessions: count(e.node) })),
    victim: victim.proc.name,
    victimSessions: victimSessions.length,
    sessions: chosen.length,
    answered: replied.length,
    resent: burst.reduce((n, b) => n + b.attempts - 1, 0),
    refusals: burst.flatMap(b => b.refusals as string[]),
    killToExitMs: exitedAt - killedAt,
    killToAllAnsweredMs: replied.length === chosen.length ? Math.max(...since('replyAt')) : null,
    killToAnswersReceivedMs: allAnsweredAt - killedAt,
    acceptedMs: { p50: pct(since('ackAt'), 50), max: since('ackAt').at(-1) ?? null },
    repliedMs: { p50: pct(since('replyAt'), 50), max: since('replyAt').at(-1) ?? null },
    backgroundRate: RATE,
    background,
  }
  log(`failover: ${result.answered}/${result.sessions} of ${result.victim}'s sessions answered, all within ${result.killToAllAnsweredMs?.toFixed(0)} ms of the kill -9 (accepted p50 ${result.acceptedMs.p50?.toFixed(0)} ms)`)
  return result
}

// ------------------------------------------------------------------ MongoDB outage

async function health(proc: Proc) {
  try {
    const res = await fetch(`${proc.base}/healthz`, { signal: AbortSignal.timeout(3000) })
    return { status: res.status, body: await res.json() }
  } catch (error) {
    return { status: null, body: String((error as Error).message) }
  }
}

async function histories(base: string, ids: string[]) {
  const out = new Map<string, string[] | null>()
  for (const id of ids) {
    try {
      const res = await fetch(`${base}${ADMIN}/${id}/history?limit=5000`, { headers: { apikey: KEYS.acme, UserId: 'bench' }, signal: AbortSignal.timeout(30_000) })
      const json: any = await res.json()
      out.set(id, res.status === 200 ? json.data.filter((e: any) => e.type === 'message.user').map((e: any) => e.text) : null)
    } catch {
      out.set(id, null)
    }
  }
  return out
}

async function outage(load: LoadClient) {
  const dep = await startCluster(1)
  try {
    if (!dep.mongoPid) return { skipped: 'MONGO_URL set: no stand-in to pause' }
    const trickle = await load.ask('trickle', { target: { host: '127.0.0.1', port: dep.port }, key: KEYS.acme, count: OUTAGE_SESSIONS, everyMs: OUTAGE_EVERY_MS })
    // Answered normally first; stopped 1 s after a round of sends, so every send of the outage
    // leaves at least 1 s before the resume to be acknowledged in.
    await sleep(3 * OUTAGE_EVERY_MS + 1000)
    signal(dep.mongoPid, 'SIGSTOP')
    paused.add(dep.mongoPid)
    const stoppedAt = now()
    await sleep(100)
    const stateWhileStopped = statFields(dep.mongoPid)?.[0] ?? null // 'T': stopped
    log(`MongoDB stand-in stopped (SIGSTOP) for ${OUTAGE_SECONDS} s`)
    await sleep((OUTAGE_SECONDS * 1000) / 2)
    const during = { gateway: await health(dep.entry), engine: await health(dep.engines[0]!.proc) }
    await sleep(Math.max(0, stoppedAt + OUTAGE_SECONDS * 1000 - now()))
    signal(dep.mongoPid, 'SIGCONT')
    paused.delete(dep.mongoPid)
    const resumedAt = now()
    log('MongoDB stand-in resumed (SIGCONT)')
    await sleep(ACK_WITHIN_MS + 5000) // the last messages of the outage have their 10 s
    const { messages, replies } = await load.ask('stopTrickle', { drainMs: 30_000 }, 60_000)
    const history = await histories(dep.entry.base, trickle.ids)
    return { standInState: stateWhileStopped, ...summariseOutage(messages, replies, history, stoppedAt, resumedAt, during) }
  } finally {
    await stopDeployment(dep, load)
  }
}

function summariseOutage(messages: any[], replies: Record<string, number[]>, history: Map<string, string[] | null>, stoppedAt: number, resumedAt: number, during: object) {
  const inOutage = (t: number | null) => t !== null && t >= stoppedAt && t < resumedAt
  const sentDuring = messages.filter(m => inOutage(m.sentAt))
  const acked = messages.filter(m => m.status === 201)
  const once = acked.filter(m => history.get(m.sessionId)?.filter(t => t === m.text).length === 1).length
  const missing = acked.filter(m => (history.get(m.sessionId)?.filter(t => t === m.text).length ?? 0) === 0).length
  const statuses: Record<string, number> = {}
  for (const m of sentDuring) statuses[String(m.status)] = (statuses[String(m.status)] ?? 0) + 1
  const result = {
    seconds: (resumedAt - stoppedAt) / 1000,
    sessions: OUTAGE_SESSIONS,
    everyMs: OUTAGE_EVERY_MS,
    sentDuring: sentDuring.length,
    ackedWithin10sDuring: sentDuring.filter(m => m.status === 201 && m.ackAt - m.sentAt <= ACK_WITHIN_MS).length,
    // Acknowledged during the outage: a 201 within 10 s, while the stand-in was still stopped.
    ackedDuring: sentDuring.filter(m => m.status === 201 && m.ackAt - m.sentAt <= ACK_WITHIN_MS && m.ackAt < resumedAt).length,
    ackedEventuallyDuring: sentDuring.filter(m => m.status === 201).length,
    statusesDuring: statuses,
    answeredDuring: sentDuring.filter(m => inOutage(m.replyAt)).length,
    repliesOnStreamsDuring: Object.values(replies).flat().filter(inOutage).length,
    healthDuring: during,
    // Each message of the outage: sent, acknowledged and answered, in ms from the SIGSTOP.
    timeline: sentDuring.map(m => ({
      sent: Math.round(m.sentAt - stoppedAt),
      status: m.status,
      ack: m.ackAt === null ? null : Math.round(m.ackAt - stoppedAt),
      reply: m.replyAt === null ? null : Math.round(m.replyAt - stoppedAt),
    })),
    after: {
      sent: messages.length,
      acknowledged: acked.length,
      inHistoryOnce: once,
      missing,
      duplicated: acked.length - once - missing,
      unacknowledgedInHistory: messages.filter(m => m.status !== 201 && (history.get(m.sessionId)?.includes(m.text) ?? false)).length,
      historiesRead: [...history.values()].filter(Boolean).length,
      sessionsAnsweringAfter: Object.values(replies).filter(r => r.some(t => t > resumedAt)).length,
    },
  }
  log(`outage: ${result.ackedDuring}/${result.sentDuring} acknowledged during it (201 within 10 s), ${result.repliesOnStreamsDuring} replies during it; after: ${result.after.inHistoryOnce}/${result.after.acknowledged} acknowledged messages in the history once`)
  return result
}

// ------------------------------------------------------------------ summary

const ALL_CONFIGS = ['single', 'singleSocket', 'floor', 'oneNode', 'twoNodes'] as const
/** BENCH_CONFIGS: which to run, in this order (all by default). */
const CONFIGS = ALL_CONFIGS.filter(c => (process.env.BENCH_CONFIGS ?? ALL_CONFIGS.join(',')).split(',').includes(c))

function summarise(runs: ConfigRun[]) {
  const byConfig = Object.fromEntries(
    CONFIGS.map(config => {
      const mine = runs.filter(r => r.config === config)
      const m = (pick: (r: ConfigRun) => number | null) => median(mine.map(pick))
      const names = [...new Set(mine.flatMap(r => r.cpu.byProcess.map(p => p.name)))]
      return [
        config,
        {
          rttMs: { p50: m(r => r.load.measured.rttMs.p50), p99: m(r => r.load.measured.rttMs.p99), max: m(r => r.load.measured.rttMs.max) },
          ackMs: { p50: m(r => r.load.measured.ackMs.p50), p99: m(r => r.load.measured.ackMs.p99), max: m(r => r.load.measured.ackMs.max) },
          p99Rounds: mine.map(r => r.load.measured.rttMs.p99),
          achievedRate: m(r => r.load.measured.achievedRate),
          sent: mine.reduce((n, r) => n + r.load.measured.sent, 0),
          errors: mine.reduce((n, r) => n + r.load.measured.errors, 0),
          timeouts: mine.reduce((n, r) => n + r.load.measured.timeouts, 0),
          openPerSecond: m(r => r.open.perSecond),
          cpuMsPerMessage: {
            cluster: m(r => r.cpu.clusterMsPerMessage),
            clusterRounds: mine.map(r => r.cpu.clusterMsPerMessage),
            mongo: m(r => r.cpu.mongoMsPerMessage),
            loadGenerator: m(r => r.cpu.loadGeneratorMsPerMessage),
            byProcess: Object.fromEntries(names.map(name => [name, m(r => r.cpu.byProcess.find(p => p.name === name)?.msPerMessage ?? null)])),
          },
          sessionsPerEngine: mine.map(r => r.sessionsPerEngine.map(e => e.live)),
          spreadPercent: m(r => r.spreadPercent),
        },
      ]
    }),
  )
  // Ratios within each round (same machine state), then their median.
  const ratio = (a: ConfigRun['config'], b: ConfigRun['config']) => {
    const rounds = [...new Set(runs.map(r => r.round))].map(round => {
      const x = runs.find(r => r.round === round && r.config === a)?.cpu.clusterMsPerMessage
      const y = runs.find(r => r.round === round && r.config === b)?.cpu.clusterMsPerMessage
      return x && y ? x / y : null
    })
    return { median: median(rounds), rounds }
  }
  return {
    byConfig,
    cpuRatio: {
      oneNodeToSingle: ratio('oneNode', 'single'),
      twoNodesToSingle: ratio('twoNodes', 'single'),
      twoNodesToOneNode: ratio('twoNodes', 'oneNode'),
      floorToSingle: ratio('floor', 'single'),
      socketToSingle: ratio('singleSocket', 'single'),
      oneNodeToFloor: ratio('oneNode', 'floor'),
    },
  }
}

function markdown(summary: ReturnType<typeof summarise>, fo: any, out: any, machine: string, rounds: number) {
  const f = (n: number | null | undefined, d = 2) => (n === null || n === undefined ? '-' : n.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }))
  const label = { single: 'single process (embedded)', singleSocket: 'single process, the channel over WebSocket', floor: 'floor: 1 gateway + 1 engine node (floor.ts)', oneNode: '1 gateway + 1 engine node', twoNodes: '1 gateway + 2 engine nodes' }
  const rows = CONFIGS.map(c => {
    const s = (summary.byConfig as any)[c]
    const parts = Object.entries(s.cpuMsPerMessage.byProcess)
      .filter(([name]) => name !== 'MongoDB stand-in' && name !== 'load generator')
      .map(([name, v]) => `${name} ${f(v as number, 3)}`)
      .join(', ')
    const perNode = s.sessionsPerEngine.map((r: (number | null)[]) => r.join(' / ')).join('; ')
    const spreadNote = c === 'twoNodes' ? ` (±${f(s.spreadPercent, 1)} %)` : ''
    return `| ${label[c]} | ${f(s.rttMs.p50)} / ${f(s.rttMs.p99)} / ${f(s.rttMs.max, 1)} | ${f(s.ackMs.p50)} / ${f(s.ackMs.p99)} | ${f(s.cpuMsPerMessage.cluster, 3)} (${parts}) | ${f(s.cpuMsPerMessage.mongo, 3)} | ${perNode}${spreadNote} | ${s.errors} / ${s.timeouts} |`
  })
  const r = summary.cpuRatio
  const ratioRounds = (x: { rounds: (number | null)[] }) => x.rounds.map(v => f(v)).join(', ')
  const lines = [
    `${SESSIONS.toLocaleString('en-US')} sessions, ${RATE} msg/s open loop, ${SECONDS} s measured after ${WARMUP_SECONDS} s warm-up, median of ${rounds} round(s)${rounds < ROUNDS ? ` (of ${ROUNDS}: the time limit)` : ''}; ${machine}.`,
    '',
    '| configuration | PUT → reply p50 / p99 / max (ms) | PUT → 201 p50 / p99 (ms) | CPU ms per message (gateway + engines + nats-server) | MongoDB stand-in (apart) | live sessions per engine, by round | errors / timeouts |',
    '|---|---:|---:|---|---:|---|---:|',
    ...rows,
    '',
    `CPU per message, cluster ÷ single process: 1 node ×${f(r.oneNodeToSingle.median)} (rounds ${ratioRounds(r.oneNodeToSingle)}), 2 nodes ×${f(r.twoNodesToSingle.median)} (${ratioRounds(r.twoNodesToSingle)}); 2 nodes ÷ 1 node ×${f(r.twoNodesToOneNode.median)} (${ratioRounds(r.twoNodesToOneNode)}); ` +
      `floor ÷ single process ×${f(r.floorToSingle.median)} (${ratioRounds(r.floorToSingle)}); 1 node ÷ floor ×${f(r.oneNodeToFloor.median)} (${ratioRounds(r.oneNodeToFloor)}); ` +
      `single process over WebSocket ÷ over SSE + PUT ×${f(r.socketToSingle.median)} (${ratioRounds(r.socketToSingle)}).`,
    '',
  ]
  if (fo?.error || out?.error) lines.push(`Not measured: ${[fo?.error && `failover (${fo.error})`, out?.error && `outage (${out.error})`].filter(Boolean).join('; ')}.`, '')
  if (fo && !fo.error) {
    lines.push(
      `Failover (2 nodes, ${fo.backgroundRate} msg/s on the other sessions): kill -9 of ${fo.victim} (${fo.victimSessions} of ${SESSIONS} sessions); ${fo.sessions} of its sessions send at once: ${fo.answered}/${fo.sessions} answered, all within ${f(fo.killToAllAnsweredMs, 0)} ms of the kill (sent once the process had exited, ${f(fo.killToExitMs, 0)} ms after it; accepted p50 ${f(fo.acceptedMs.p50, 0)} / max ${f(fo.acceptedMs.max, 0)} ms, replied p50 ${f(fo.repliedMs.p50, 0)} / max ${f(fo.repliedMs.max, 0)} ms; ${fo.resent} re-sent after a refusal${fo.refusals.length ? `: ${fo.refusals.join(', ')}` : ''}). ` +
        `The background load meanwhile: ${fo.background?.answered}/${fo.background?.sent} answered, p99 ${f(fo.background?.rttMs.p99, 0)} ms, max ${f(fo.background?.rttMs.max, 0)} ms, ${fo.background?.errors} errors, ${fo.background?.timeouts} timeouts.`,
      '',
    )
  }
  if (out && !out.skipped && !out.error) {
    const a = out.after
    lines.push(
      `| MongoDB stand-in stopped ${f(out.seconds, 0)} s (SIGSTOP), ${out.sessions} sessions sending every ${out.everyMs / 1000} s through the gateway | |`,
      '|---|---|',
      `| messages sent during the outage, acknowledged during it (201 within 10 s, before SIGCONT) | ${out.ackedDuring} of ${out.sentDuring} (201 within 10 s at all ${out.ackedWithin10sDuring}; eventually ${out.ackedEventuallyDuring}; statuses ${JSON.stringify(out.statusesDuring)}) |`,
      `| of those, answered on the stream during the outage | ${out.answeredDuring} (assistant.message events received meanwhile: ${out.repliesOnStreamsDuring}) |`,
      `| /healthz midway: gateway / engine (stand-in's state: ${out.standInState}) | ${out.healthDuring.gateway.status} / ${out.healthDuring.engine.status} |`,
      `| after it: acknowledged messages in the history exactly once | ${a.inHistoryOnce} of ${a.acknowledged} (missing ${a.missing}, twice or more ${a.duplicated}; unacknowledged but kept ${a.unacknowledgedInHistory}; histories read ${a.historiesRead}/${out.sessions}; sessions answering after ${a.sessionsAnsweringAfter}/${out.sessions}) |`,
      '',
    )
  }
  return lines.join('\n')
}

// ------------------------------------------------------------------ main

async function main() {
  log(`bench/cluster: ${SESSIONS} sessions, ${RATE} msg/s, ${SECONDS} s (+${WARMUP_SECONDS} s warm-up), ${ROUNDS} round(s), outage ${OUTAGE_SECONDS} s; CLK_TCK ${CLK_TCK}`)
  const load = await startLoad()
  const runs: ConfigRun[] = []
  let fo: any = null
  let roundsRun = 0
  // A round that would not leave the outage its time is not started (the watchdog is the last resort).
  const deadline = started + HARD_LIMIT_MS - (OUTAGE_SECONDS + 75) * 1000
  for (let round = 1, roundMs = 0; round <= ROUNDS; round++) {
    if (Date.now() + roundMs > deadline) {
      log(`round ${round} not started: it would not end within the time limit`)
      break
    }
    const roundStart = Date.now()
    for (const config of CONFIGS) {
      log(`round ${round}/${ROUNDS}: ${config}`)
      const dep = config === 'single' ? await startSingle() : config === 'singleSocket' ? await startSingle('ws') : config === 'floor' ? await startFloor() : await startCluster(config === 'oneNode' ? 1 : 2)
      try {
        const run = await measure(dep, load, round)
        runs.push(run)
        log(describe(run))
        // In the first round: the one sure to run.
        if (config === 'twoNodes' && round === 1) fo = await failover(dep, load).catch(error => ({ error: String(error) }))
      } finally {
        await stopDeployment(dep, load)
      }
    }
    roundsRun = round
    roundMs = Date.now() - roundStart
  }
  const out = OUTAGE_SECONDS > 0 ? await outage(load).catch(error => ({ error: String(error) })) : null
  loadChild?.kill('SIGTERM')
  const summary = summarise(runs)
  const info = machineInfo()
  const machine = `${info.cpus} cores (${info.cpuModel}), load average ${loadavg()[0]!.toFixed(1)} at the end, Node ${info.node}`
  const md = markdown(summary, fo, out, machine, roundsRun)
  writeFileSync(new URL('./results.md', import.meta.url), md)
  writeResults(import.meta.url, started, {
    date: new Date().toISOString(),
    machine: { ...info, loadAverage1m: Number(loadavg()[0]!.toFixed(1)) },
    durationSeconds: Math.round((Date.now() - started) / 1000),
    store: process.env.MONGO_URL ? 'mongod (MONGO_URL)' : 'MongoDB wire test server (mockupdb + mongomock, Python)',
    settings: { configs: CONFIGS, sessions: SESSIONS, rate: RATE, seconds: SECONDS, warmupSeconds: WARMUP_SECONDS, rounds: ROUNDS, roundsRun, outageSeconds: OUTAGE_SECONDS, clockTicksPerSecond: CLK_TCK, serviceEnv: SERVICE_ENV, reply: 'scripted, quotes the message, no delay' },
    summary,
    failover: fo,
    outage: out,
    runs,
  })
  console.log(`\n${md}`)
}

main()
  .catch(async error => {
    console.error(error)
    process.exitCode = 1
  })
  .finally(async () => {
    await cleanupAll()
    clearTimeout(watchdog)
    log('done')
    // Handles of helpers (NATS connection, timers) must not keep a finished bench alive.
    process.exit()
  })
