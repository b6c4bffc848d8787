// Soak run: a mixed workload against one real `make run`-style process for SOAK_MINUTES — live
// sessions streaming and chatting (with churn: sessions end and new ones start), SSE reconnects
// with Last-Event-ID, contact loads, reports and administration operations — sampling the
// process's RSS, heap and event-loop delay (its own prom-client gauges, read from the metrics
// listener) and every error, every SOAK_SAMPLE_SECONDS. Memory is judged flat when the last
// sample is within 10 % of the first one after warm-up (a third of the run, at least 1 minute).
//
// The process is the built service (`dist/main.js`, what `make run` starts; `make soak` builds it
// first): under the TypeScript loader the TypeScript compiler would sit in the memory of each of
// the process's threads (~400 MB more RSS at rest). Besides the metrics, each sample reads the
// process's anonymous and file-backed RSS from /proc (Linux): the file-backed part is the
// embedded database's pages that the process has touched, which the kernel can drop.
//
//   SOAK_MINUTES=20 make soak         (defaults: 20 min, 60 sessions, 60 msg/s, a load every 10 s)
//   SOAK_CPU_PROFILE=dir  a CPU profile of the process for the whole run
//   SOAK_NODE_ARGS="--trace-gc"  more node flags for the service (its output goes to this stdout)
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runHeader, writeResults } from '../support.js'
import { freePorts } from '../../test/support/nats-server.js'

const MINUTES = Number(process.env.SOAK_MINUTES ?? 20)
const SESSIONS = Number(process.env.SOAK_SESSIONS ?? 60)
const RATE = Number(process.env.SOAK_MSG_PER_SECOND ?? 60)
const LOAD_EVERY_S = Number(process.env.SOAK_LOAD_EVERY_SECONDS ?? 10)
const SAMPLE_S = Number(process.env.SOAK_SAMPLE_SECONDS ?? 30)
const KEY = 'soak-key-00000000000000000'
const CHANNEL = '/assistants-channel/api/v1/channel/api/eventstream'
const started = Date.now()
const until = started + MINUTES * 60_000

/**
 * The demo crews with room for every session of the run: the shipped demo crew allows 100 live
 * sessions, and past them new sessions are refused (429), so a run of 1,000 sessions ran 100.
 */
function crewsFile(): string {
  const crews = JSON.parse(readFileSync(new URL('../../config/crews.json', import.meta.url), 'utf8'))
  for (const crew of crews.crews) crew.maxConcurrentSessions = Math.max(crew.maxConcurrentSessions ?? 0, SESSIONS * 2)
  const path = join(mkdtempSync(join(tmpdir(), 'sb-soak-crews-')), 'crews.json')
  writeFileSync(path, JSON.stringify(crews))
  return path
}

const [port, metricsPort] = (await freePorts(2)) as [number, number]
const base = `http://127.0.0.1:${port}`
// The service's node flags. SOAK_CPU_PROFILE=dir: a CPU profile of the whole run (bench/sse/long-ticks.ts
// finds the long ticks in it); SOAK_NODE_ARGS: any others (e.g. `--trace-gc`; its lines go to this stdout).
const nodeFlags = [
  ...(process.env.SOAK_CPU_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.SOAK_CPU_PROFILE}`] : []),
  ...(process.env.SOAK_NODE_ARGS ?? '').split(' ').filter(Boolean),
]
const root = new URL('../../', import.meta.url).pathname
if (!existsSync(join(root, 'dist/main.js'))) {
  console.error('dist/main.js is missing: run `make build` first (`make soak` does)')
  process.exit(2)
}
const child = spawn(process.execPath, [...nodeFlags, 'dist/main.js'], {
  cwd: root,
  env: { ...process.env, API_KEYS: `${KEY}=soak`, PORT: String(port), METRICS_PORT: String(metricsPort), HOST: '127.0.0.1', DATA_DIR: mkdtempSync(join(tmpdir(), 'sb-soak-')), LOG_LEVEL: 'warn', SSE_HEARTBEAT_MS: '5000', AUTH_FAILURE_LIMIT: '0', CREWS_FILE: crewsFile() },
  stdio: ['ignore', 'inherit', 'inherit'],
})
const hardStop = setTimeout(() => child.kill('SIGKILL'), (MINUTES + 3) * 60_000)
hardStop.unref()
process.on('exit', () => child.kill('SIGKILL'))

const errors: Record<string, number> = {}
const fail = (what: string) => void (errors[what] = (errors[what] ?? 0) + 1)
const headers = { apikey: KEY, 'content-type': 'application/json', userid: 'soak-supervisor' }
const api = async (method: string, path: string, body?: unknown, expect = 200) => {
  try {
    const res = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await res.text()
    // The error's code and reason too (a 503 is OVERLOADED or SESSION_NOT_PERSISTED, which differ).
    const why = res.status === expect ? '' : /"code":"([A-Z_]+)"(?:.*"reason":"([a-z_]+)")?/.exec(text)?.slice(1).filter(Boolean).join(' ') ?? ''
    if (res.status !== expect) fail(`${method} ${path.replace(/[0-9a-f-]{36}/g, ':id')} ${res.status} ${why}`.trim())
    return text ? JSON.parse(text) : undefined
  } catch (error) {
    fail(`${method} ${path.replace(/[0-9a-f-]{36}/g, ':id')} ${(error as Error).message}`)
  }
}

for (let i = 0; i < 200; i++) {
  if (await fetch(`${base}/healthz`).then(r => r.ok, () => false)) break
  await new Promise(r => setTimeout(r, 200))
}

// ---------------------------------------------------------------- sessions with live streams
interface Session {
  id: string
  consumerId: string
  lastEventId: string
  controller: AbortController
  waiting: { at: number } | null
}
const sessions = new Map<string, Session>()
const latencies: number[] = []
let sent = 0
let replied = 0

async function follow(session: Session, res: Response) {
  const decoder = new TextDecoder()
  let buffer = ''
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true })
      let end: number
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const frame = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        const id = /^id: (\d+)/m.exec(frame)?.[1]
        if (id) session.lastEventId = id
        if (/^event: assistant\.message/m.test(frame) && session.waiting) {
          latencies.push(Date.now() - session.waiting.at)
          session.waiting = null
          replied++
        }
      }
    }
  } catch {
    // aborted by a reconnect or an end of session
  }
}

async function openSession() {
  const controller = new AbortController()
  try {
    const res = await fetch(`${base}${CHANNEL}/demo`, { method: 'POST', headers, body: '{}', signal: controller.signal })
    if (res.status !== 200) return fail(`create session ${res.status}`)
    const reader = res.body!.getReader()
    let text = ''
    while (!/event: Initialized\ndata: (.*)\n/.test(text)) text += new TextDecoder().decode((await reader.read()).value)
    reader.releaseLock()
    const data = JSON.parse(/event: Initialized\ndata: (.*)\n/.exec(text)![1]!)
    const session: Session = { id: data.sessionId, consumerId: data.consumerId, lastEventId: '1', controller, waiting: null }
    sessions.set(session.id, session)
    void follow(session, res)
  } catch (error) {
    fail(`create session ${(error as Error).message}`)
  }
}

async function reconnect(session: Session) {
  session.controller.abort()
  const controller = new AbortController()
  session.controller = controller
  try {
    const res = await fetch(`${base}${CHANNEL}/${session.id}/listen`, { method: 'POST', headers: { ...headers, 'last-event-id': session.lastEventId }, signal: controller.signal })
    if (res.status !== 200) return fail(`listen ${res.status}`)
    void follow(session, res)
  } catch (error) {
    fail(`listen ${(error as Error).message}`)
  }
}

async function endSession(session: Session) {
  sessions.delete(session.id)
  await api('DELETE', `${CHANNEL}/${session.id}`, { reason: 'user_closed' }, 201)
  session.controller.abort()
}

for (let i = 0; i < SESSIONS; i++) await openSession()

// ---------------------------------------------------------------- the workload's timers
const pick = () => [...sessions.values()][Math.floor(Math.random() * sessions.size)]
const timers: NodeJS.Timeout[] = []
const every = (ms: number, work: () => unknown) => timers.push(setInterval(() => void work(), ms))

every(1000 / RATE, async () => {
  const session = pick()
  if (!session) return
  if (session.waiting) {
    if (Date.now() - session.waiting.at > 10_000) {
      fail('reply missing after 10 s')
      session.waiting = null
    }
    return
  }
  session.waiting = { at: Date.now() }
  sent++
  await api('PUT', `${CHANNEL}/${session.id}/${session.consumerId}`, { message: `hola ${sent}` }, 201)
})
every(2000, async () => {
  const session = pick()
  if (session && !session.waiting) await reconnect(session)
})
every(5000, async () => {
  const session = pick()
  if (!session) return
  await api('PUT', `/engine/api/administration/session/${session.id}/whisper`, { text: 'keep it short' })
  await api('GET', `/engine/api/administration/session/${session.id}/history`)
})
every(10_000, async () => {
  const session = pick()
  if (session && !session.waiting) {
    await endSession(session)
    await openSession()
  }
})
let batchId: string | undefined
let loaded = 0
every(LOAD_EVERY_S * 1000, async () => {
  batchId ??= (await api('POST', '/dialer/v1/batches', { name: 'soak', channel: 'phone', duplicateStrategy: 'merge' }, 201))?.batchId
  if (!batchId) return
  const contacts = Array.from({ length: 1000 }, (_, i) => ({ identifier: `s${loaded + i}`, name: 'Soak', addresses: [{ address: String(34600000000 + ((loaded + i) % 1_000_000)), type: 'phone', priority: 1 }] }))
  loaded += 1000
  await api('POST', `/dialer/v1/batches/${batchId}/contacts`, { contacts }, 202)
})
every(5000, () => api('GET', `/engine/v1/api/reports/sessions-detail?crew_id=demo&start_ts=${started - 3_600_000}&end_ts=${Date.now() + 60_000}&page=0&pageSize=50`))

// ---------------------------------------------------------------- sampling
interface Sample {
  minute: number
  rssMB: number
  /** Anonymous and file-backed resident memory (/proc/<pid>/status RssAnon, RssFile). */
  rssAnonMB: number
  rssFileMB: number
  heapMB: number
  loopP99ms: number
  loopMaxMs: number
  sent: number
  replied: number
  replyP99ms: number
  errors: number
}
const samples: Sample[] = []
const gauge = (text: string, name: string) => Number(new RegExp(`^${name} ([0-9.e+-]+)`, 'm').exec(text)?.[1] ?? NaN)
const p99 = (values: number[]) => (values.length ? [...values].sort((a, b) => a - b)[Math.floor(values.length * 0.99)]! : 0)
/** A line of /proc/<pid>/status in MB (NaN off Linux). */
function procStatusMB(field: string): number {
  try {
    const kB = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1]
    return kB ? Math.round(Number(kB) / 1024) : NaN
  } catch {
    return NaN
  }
}
async function sample() {
  const text = await fetch(`http://127.0.0.1:${metricsPort}/metrics`).then(r => r.text(), () => '')
  const window = latencies.splice(0)
  samples.push({
    minute: Math.round((Date.now() - started) / 600) / 100,
    rssMB: Math.round(gauge(text, 'process_resident_memory_bytes') / 1048576),
    rssAnonMB: procStatusMB('RssAnon'),
    rssFileMB: procStatusMB('RssFile'),
    heapMB: Math.round(gauge(text, 'nodejs_heap_size_used_bytes') / 1048576),
    loopP99ms: Math.round(gauge(text, 'nodejs_eventloop_lag_p99_seconds') * 1e4) / 10,
    loopMaxMs: Math.round(gauge(text, 'nodejs_eventloop_lag_max_seconds') * 1e4) / 10,
    sent,
    replied,
    replyP99ms: p99(window),
    errors: Object.values(errors).reduce((a, b) => a + b, 0),
  })
  console.log(Object.values(samples.at(-1)!).join('\t'))
}
console.log(`soak: ${MINUTES} min, ${SESSIONS} sessions, ${RATE} msg/s, 1,000 contacts every ${LOAD_EVERY_S} s`)
console.log('minute\trssMB\tanonMB\tfileMB\theapMB\tloopP99\tloopMax\tsent\treplied\treplyP99\terrors')
while (Date.now() < until) {
  await new Promise(r => setTimeout(r, Math.min(SAMPLE_S * 1000, until - Date.now())))
  await sample()
}
for (const timer of timers) clearInterval(timer)
for (const session of sessions.values()) session.controller.abort()
child.kill('SIGTERM')

const warm = samples.find(s => s.minute >= Math.max(1, MINUTES / 3)) ?? samples[0]!
const last = samples.at(-1)!
const growth = (a: number, b: number) => Math.round(((b - a) / a) * 1000) / 10
const summary = {
  heapGrowthAfterWarmupPercent: growth(warm.heapMB, last.heapMB),
  rssGrowthAfterWarmupPercent: growth(warm.rssMB, last.rssMB),
  rssAnonGrowthAfterWarmupPercent: growth(warm.rssAnonMB, last.rssAnonMB),
  maxLoopP99ms: Math.max(...samples.map(s => s.loopP99ms)),
  maxLoopMs: Math.max(...samples.map(s => s.loopMaxMs)),
  messages: sent,
  replies: replied,
  contactsLoaded: loaded,
  errors,
}
console.log(JSON.stringify(summary, null, 2))
writeResults(import.meta.url, started, { ...runHeader(started), config: { MINUTES, SESSIONS, RATE, LOAD_EVERY_S }, summary, samples })
// The process drains and exits on SIGTERM (writing its CPU profile, when asked for, on the way out).
await new Promise<void>(done => (child.exitCode !== null ? done() : child.once('exit', () => done())))
process.exit(0)
