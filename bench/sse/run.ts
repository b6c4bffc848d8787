// SSE bench: N concurrent sessions, each with an open stream; user messages sent at a fixed
// rate (open loop) and timed from the PUT to the `assistant.message` frame read by the client;
// then a closed-loop burst for the events/s ceiling. The same run drives a plain node:http SSE
// server doing the same protocol work (bench/sse/server.ts baseline) for the ratio. Servers run
// in child processes; everything stays on 127.0.0.1; the whole run is bounded (~2.5 min).
//
//   node --import @tapjs/typescript/import bench/sse/run.ts
//   BENCH_SESSIONS=10000 BENCH_RATE=1000 BENCH_SECONDS=10 BENCH_TARGETS=switchboard,baseline
import { fork, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { machineInfo, writeResults } from '../support.js'

const N = Number(process.env.BENCH_SESSIONS ?? 10_000)
const RATE = Number(process.env.BENCH_RATE ?? 1000)
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10)
const BURST_SECONDS = Number(process.env.BENCH_BURST_SECONDS ?? 4)
const BURST_IN_FLIGHT = Number(process.env.BENCH_BURST_IN_FLIGHT ?? 256)
const TARGETS = (process.env.BENCH_TARGETS ?? 'switchboard,baseline').split(',')
const OPEN_CONCURRENCY = 128
const HARD_LIMIT_MS = 170_000
const CHANNEL = '/assistants-channel/api/v1/channel/api/eventstream'
const HOST = '127.0.0.1'

const here = new URL('.', import.meta.url).pathname
const started = Date.now()
const watchdog = setTimeout(() => {
  console.error(`bench exceeded ${HARD_LIMIT_MS / 1000}s; stopping`)
  for (const child of children) child.kill('SIGKILL')
  process.exit(2)
}, HARD_LIMIT_MS)
watchdog.unref()
const children = new Set<ChildProcess>()

// ------------------------------------------------------------------ server child processes

interface Server {
  child: ChildProcess
  port: number
  key: string
  memory(): Promise<{ rss: number; heapUsed: number; external: number }>
  cpu(): NodeJS.CpuUsage
  stop(): void
}

function crewsFile(): string {
  const crews = JSON.parse(readFileSync(new URL('../../config/crews.json', import.meta.url), 'utf8'))
  for (const crew of crews.crews) crew.maxConcurrentSessions = N * 2
  const path = join(mkdtempSync(join(tmpdir(), 'sb-bench-')), 'crews.json')
  writeFileSync(path, JSON.stringify(crews))
  return path
}

function startServer(mode: string): Promise<Server> {
  return new Promise((resolve, reject) => {
    const child = fork(join(here, 'server.ts'), [mode], {
      execArgv: ['--import', '@tapjs/typescript/import', '--expose-gc', '--max-old-space-size=4096', ...(process.env.BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE}`] : [])],
      env: { ...process.env, BENCH_CREWS_FILE: crewsFile() },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    })
    children.add(child)
    child.once('error', reject)
    child.once('exit', code => reject(new Error(`${mode} server exited (${code})`)))
    child.once('message', (m: any) => {
      if (m.type !== 'ready') return reject(new Error('unexpected message'))
      const cpuStart = process.cpuUsage()
      resolve({
        child,
        port: m.port,
        key: m.key,
        memory: () =>
          new Promise(done => {
            const on = (r: any) => {
              if (r.type !== 'memory') return
              child.off('message', on)
              done(r.memory)
            }
            child.on('message', on)
            child.send({ type: 'memory' })
          }),
        cpu: () => process.cpuUsage(cpuStart),
        stop: () => {
          child.removeAllListeners('exit')
          child.kill('SIGTERM')
          setTimeout(() => child.kill('SIGKILL'), 5000).unref()
          children.delete(child)
        },
      })
    })
  })
}

// ------------------------------------------------------------------ a raw SSE client per session

/** One POST-opened SSE stream on its own socket, with chunked decoding and minimal SSE parsing. */
class Stream {
  sessionId = ''
  consumerId = ''
  private buffer: Buffer = Buffer.alloc(0)
  private headDone = false
  private chunkLeft = -1
  private text = ''
  onFrame: (event: string, data: string) => void = () => {}
  onError: (error: Error) => void = () => {}
  inFlight = false

  constructor(readonly socket: Socket) {
    socket.setNoDelay(true)
    socket.on('data', chunk => this.feed(chunk))
  }

  private feed(chunk: Buffer) {
    this.buffer = this.buffer.length ? Buffer.concat([this.buffer, chunk]) : chunk
    if (!this.headDone) {
      const end = this.buffer.indexOf('\r\n\r\n')
      if (end < 0) return
      const head = this.buffer.subarray(0, end).toString('latin1')
      if (!/^HTTP\/1\.1 200/.test(head)) {
        this.socket.destroy()
        this.onError(new Error(`stream open failed: ${head.split('\r\n')[0]} ${this.buffer.subarray(end).toString('utf8').slice(0, 200)}`))
        return
      }
      this.buffer = this.buffer.subarray(end + 4)
      this.headDone = true
    }
    // Chunked transfer encoding (uWS sends the CRLF that ends a chunk with the next one).
    while (this.buffer.length) {
      if (this.chunkLeft < 0) {
        let from = 0
        if (this.buffer[0] === 13 && this.buffer[1] === 10) from = 2
        const eol = this.buffer.indexOf('\r\n', from)
        if (eol < 0) break
        this.chunkLeft = parseInt(this.buffer.subarray(from, eol).toString('latin1'), 16)
        this.buffer = this.buffer.subarray(eol + 2)
        if (this.chunkLeft === 0) break
      }
      const take = Math.min(this.chunkLeft, this.buffer.length)
      this.text += this.buffer.subarray(0, take).toString('utf8')
      this.buffer = this.buffer.subarray(take)
      this.chunkLeft -= take
      if (this.chunkLeft === 0) this.chunkLeft = -1
    }
    let sep: number
    while ((sep = this.text.indexOf('\n\n')) >= 0) {
      const frame = this.text.slice(0, sep)
      this.text = this.text.slice(sep + 2)
      const ev = frame.indexOf('\nevent: ')
      const da = frame.indexOf('\ndata: ')
      if (ev >= 0 && da > ev) this.onFrame(frame.slice(ev + 8, da), frame.slice(da + 7))
    }
  }
}

function openStream(port: number, key: string): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, HOST)
    const stream = new Stream(socket)
    socket.once('error', reject)
    stream.onError = reject
    stream.onFrame = (event, data) => {
      if (event !== 'Initialized') return
      const parsed = JSON.parse(data)
      stream.sessionId = parsed.sessionId
      stream.consumerId = parsed.consumerId
      stream.onFrame = () => {}
      resolve(stream)
    }
    socket.write(`POST ${CHANNEL}/demo HTTP/1.1\r\nHost: ${HOST}\r\napikey: ${key}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`)
  })
}

// ------------------------------------------------------------------ load

function percentile(sorted: number[], p: number) {
  if (!sorted.length) return NaN
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}

interface TargetResult {
  target: string
  sessions: number
  openSeconds: number
  memoryPerSessionKiB: { rss: number; heap: number }
  rate: { requested: number; achieved: number; sent: number; completed: number; errors: number; skippedBusy: number }
  rttMs: { p50: number; p90: number; p99: number; max: number }
  eventsPerSecond: number
  burst: { messagesPerSecond: number; eventsPerSecond: number; p50: number; p99: number }
  serverCpuNote?: string
}

async function runTarget(target: string): Promise<TargetResult> {
  const server = await startServer(target)
  const agent = new Agent({ keepAlive: true, maxSockets: 64 })
  try {
    console.error(`   server ready on ${server.port} (${((Date.now() - started) / 1000).toFixed(1)}s)`)
    const before = await server.memory()
    const streams: Stream[] = []
    const openStart = Date.now()
    let next = 0
    await Promise.all(
      Array.from({ length: OPEN_CONCURRENCY }, async () => {
        while (next < N) {
          next++
          streams.push(await openStream(server.port, server.key))
          if (streams.length % 2500 === 0) console.error(`   ${streams.length} streams open`)
        }
      }),
    )
    const openSeconds = (Date.now() - openStart) / 1000
    console.error(`   ${streams.length} streams open in ${openSeconds.toFixed(1)}s`)
    const after = await server.memory()

    let events = 0
    const rtts: number[] = []
    const sentAt = new Map<Stream, number>()
    for (const s of streams) {
      s.onFrame = event => {
        events++
        if (event === 'assistant.message') {
          const t0 = sentAt.get(s)
          if (t0 !== undefined) {
            rtts.push(performance.now() - t0)
            sentAt.delete(s)
          }
          s.inFlight = false
          onReply?.(s)
        }
      }
    }
    let onReply: ((s: Stream) => void) | undefined
    let errors = 0
    let counter = 0
    const put = (s: Stream) => {
      s.inFlight = true
      sentAt.set(s, performance.now())
      const body = `{"message":"ping ${counter++}"}`
      const req = request(
        { host: HOST, port: server.port, method: 'PUT', path: `${CHANNEL}/${s.sessionId}/${s.consumerId}`, agent, headers: { apikey: server.key, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
        res => {
          if (res.statusCode !== 201) errors++
          res.resume()
        },
      )
      req.on('error', () => errors++)
      req.end(body)
    }

    // Open loop at RATE messages/s: a warm-up second, then the measured window.
    const openLoop = async (seconds: number, measure: boolean) => {
      let sent = 0
      let skipped = 0
      let cursor = 0
      const start = performance.now()
      if (measure) {
        rtts.length = 0
        events = 0
      }
      await new Promise<void>(resolve => {
        const tick = setInterval(() => {
          const elapsed = (performance.now() - start) / 1000
          const due = Math.min(Math.floor(elapsed * RATE), Math.floor(seconds * RATE)) - sent - skipped
          for (let i = 0; i < due; i++) {
            const s = streams[cursor++ % streams.length]!
            if (s.inFlight) skipped++
            else {
              put(s)
              sent++
            }
          }
          if (elapsed >= seconds) {
            clearInterval(tick)
            resolve()
          }
        }, 1)
      })
      const drainUntil = performance.now() + 2000
      while (sentAt.size && performance.now() < drainUntil) await new Promise(r => setTimeout(r, 10))
      const duration = (performance.now() - start) / 1000
      return { sent, skipped, duration }
    }
    await openLoop(1, false)
    const measured = await openLoop(SECONDS, true)
    const measuredEvents = events
    const sorted = [...rtts].sort((a, b) => a - b)

    // Closed loop: BURST_IN_FLIGHT sessions each send again as soon as their reply arrives.
    rtts.length = 0
    events = 0
    let burstMessages = 0
    let burstOn = true
    onReply = s => {
      burstMessages++
      if (burstOn) put(streams[(streams.indexOf(s) + BURST_IN_FLIGHT) % streams.length] ?? s)
    }
    const burstStart = performance.now()
    for (let i = 0; i < Math.min(BURST_IN_FLIGHT, streams.length); i++) put(streams[i]!)
    await new Promise(r => setTimeout(r, BURST_SECONDS * 1000))
    burstOn = false
    const burstSeconds = (performance.now() - burstStart) / 1000
    const burstEvents = events
    const burstSorted = [...rtts].sort((a, b) => a - b)
    onReply = undefined

    for (const s of streams) s.socket.destroy()
    return {
      target,
      sessions: streams.length,
      openSeconds,
      memoryPerSessionKiB: { rss: (after.rss - before.rss) / streams.length / 1024, heap: (after.heapUsed - before.heapUsed) / streams.length / 1024 },
      rate: { requested: RATE, achieved: measured.sent / SECONDS, sent: measured.sent, completed: sorted.length, errors, skippedBusy: measured.skipped },
      rttMs: { p50: percentile(sorted, 50), p90: percentile(sorted, 90), p99: percentile(sorted, 99), max: sorted.at(-1) ?? NaN },
      eventsPerSecond: measuredEvents / measured.duration,
      burst: { messagesPerSecond: burstMessages / burstSeconds, eventsPerSecond: burstEvents / burstSeconds, p50: percentile(burstSorted, 50), p99: percentile(burstSorted, 99) },
    }
  } finally {
    agent.destroy()
    server.stop()
  }
}

const results: TargetResult[] = []
for (const target of TARGETS) {
  console.error(`== ${target}: opening ${N} streams, then ${RATE} msg/s for ${SECONDS}s, then a ${BURST_SECONDS}s closed-loop burst`)
  results.push(await runTarget(target))
  await new Promise(r => setTimeout(r, 500))
}

const f = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : '-')
const rows = [
  ['target', 'streams', 'open s', 'KiB/session (rss/heap)', 'msg/s', 'done', 'err', 'RTT p50 ms', 'p99 ms', 'max ms', 'events/s', 'burst msg/s', 'burst ev/s', 'burst p99 ms'],
  ...results.map(r => [
    r.target,
    String(r.sessions),
    f(r.openSeconds, 1),
    `${f(r.memoryPerSessionKiB.rss, 1)} / ${f(r.memoryPerSessionKiB.heap, 1)}`,
    f(r.rate.achieved, 0),
    String(r.rate.completed),
    String(r.rate.errors),
    f(r.rttMs.p50),
    f(r.rttMs.p99),
    f(r.rttMs.max),
    f(r.eventsPerSecond, 0),
    f(r.burst.messagesPerSecond, 0),
    f(r.burst.eventsPerSecond, 0),
    f(r.burst.p99),
  ]),
]
const widths = rows[0]!.map((_, i) => Math.max(...rows.map(r => r[i]!.length)))
for (const row of rows) console.log(row.map((c, i) => c.padEnd(widths[i]!)).join('  '))

const sb = results.find(r => r.target === 'switchboard')
const base = results.find(r => r.target === 'baseline')
const ratio = sb && base ? { rttP50: sb.rttMs.p50 / base.rttMs.p50, rttP99: sb.rttMs.p99 / base.rttMs.p99, burstEventsPerSecond: sb.burst.eventsPerSecond / base.burst.eventsPerSecond, memoryPerSession: sb.memoryPerSessionKiB.rss / base.memoryPerSessionKiB.rss } : null
if (ratio) console.log(`switchboard / baseline: RTT p50 x${f(ratio.rttP50)}, p99 x${f(ratio.rttP99)}, burst events/s x${f(ratio.burstEventsPerSecond)}, memory/session x${f(ratio.memoryPerSession)}`)
if (sb) {
  console.log(
    `targets: ${N >= 10_000 ? '10,000' : N} concurrent streams: ${sb.sessions >= 10_000 ? 'met' : `ran ${sb.sessions}`}; ` +
      `p99 < 10 ms at ${RATE} msg/s: ${sb.rttMs.p99 < 10 ? 'met' : 'NOT met'} (${f(sb.rttMs.p99)} ms)`,
  )
}
writeResults(import.meta.url, started, { date: new Date().toISOString(), node: process.version, cpus: machineInfo().cpus, config: { sessions: N, rate: RATE, seconds: SECONDS, burstSeconds: BURST_SECONDS, burstInFlight: BURST_IN_FLIGHT }, results, ratio, wallSeconds: (Date.now() - started) / 1000 })
process.exit(0)
