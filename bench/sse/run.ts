// SSE bench: the assistant channel against a bare uWebSockets.js SSE server doing the channel's
// protocol work (bench/sse/server.ts `uws`; `node` is the same on node:http), in the same run,
// servers in child processes, everything on 127.0.0.1. Per target and run:
//   1. open SESSIONS streams (each its own socket, POST eventstream/{crewId});
//   2. for each rate in RATES: RATE user messages/s (open loop) spread over those sessions for
//      SECONDS after a warm-up second, each timed from the PUT to its `assistant.message` frame
//      on the stream; the server reports its event-loop delay (perf_hooks.monitorEventLoopDelay,
//      1 ms resolution), CPU time, GC pauses and old-space growth over the same window;
//   3. open more streams up to HOLD (the open rate) and report RSS and heap per held session, right
//      after opening and once they are held quiet for BENCH_HOLD_SETTLE_MS (12 s: quiet sessions
//      hibernate after 10 s), each the marginal cost of the streams added in this phase.
// RUNS runs of each target, alternating; the report gives the median of the runs, and the ratio
// to the baseline measured in the same run. Capacity: the highest rate of RATES whose p99 < 10 ms.
//
//   node --import @tapjs/typescript/import bench/sse/run.ts
//   BENCH_RUNS=3 BENCH_SESSIONS=1000 BENCH_HOLD=10000 BENCH_RATES=500,1000,2000 BENCH_SECONDS=5 BENCH_TARGETS=switchboard,uws,floor
//   BENCH_OVERLAP=1  a session takes its next message before its last is answered (several in
//   flight per session, e.g. BENCH_SESSIONS=90 BENCH_RATES=300: 3.3 messages a second each)
//   BENCH_SOCKETS=64  keep-alive sockets the PUTs share (64: a PUT waits for a free one, so a slow 201
//   shows in the reply time as it would for one client multiplexing sessions; the number of sessions:
//   each session its own client). BENCH_SERVICE_ENV='{"K":"V"}' adds service settings.
//   BENCH_PROFILE=dir  a CPU and an allocation profile of each measured window (bench/sse/long-ticks.ts
//   reads them); BENCH_TRACE_GC=1 adds --trace-gc; BENCH_PROMOTED=1 profiles only what outlived
//   young-generation collections; BENCH_SERVER_NODE_FLAGS='--flag ...' adds Node/V8 flags to the
//   server processes (e.g. --heapsnapshot-signal=SIGUSR2 --diagnostic-dir=/tmp/hs)
// After the runs, with switchboard among the targets: the session machine alone (machine-alone.ts,
// in a process of its own), its CPU per turn beside the targets' CPU per message.
import { execFileSync, fork, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { machineInfo, writeResults } from '../support.js'

const RUNS = Number(process.env.BENCH_RUNS ?? 3)
const N = Number(process.env.BENCH_SESSIONS ?? 1000)
const HOLD = Number(process.env.BENCH_HOLD ?? 10_000)
const RATES = (process.env.BENCH_RATES ?? '500,1000,2000').split(',').filter(Boolean).map(Number)
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5)
const HOLD_SETTLE_MS = Number(process.env.BENCH_HOLD_SETTLE_MS ?? 12_000)
const TARGETS = (process.env.BENCH_TARGETS ?? 'switchboard,uws,floor').split(',')
const BASELINE = TARGETS.includes('uws') ? 'uws' : (TARGETS.find(t => t !== 'switchboard') ?? 'uws')
const OPEN_CONCURRENCY = 128
const HARD_LIMIT_MS = Number(process.env.BENCH_HARD_LIMIT_MS ?? 900_000)
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

export interface ServerStats {
  loopDelayMs: { p50: number; p99: number; max: number; mean: number }
  /** The embedded store's write transactions: how long each held the loop (switchboard only). */
  storeWriteHoldMs?: { count: number; p50: number; p99: number; max: number; waits: { count: number; p50: number; p99: number; max: number } }
  cpuMs: number
  /** The same CPU by thread (main: the event loop; Linux only). */
  threadCpuMs: Record<string, number>
  loopUtilization: number
  gc: { major: number; minor: number; majorMs: number; minorMs: number; maxMs: number }
  rss: number
  heapUsed: number
  oldSpace: number
}

interface Server {
  child: ChildProcess
  port: number
  key: string
  memory(): Promise<{ rss: number; rssAnon: number; rssFile: number; heapUsed: number; external: number; oldSpace: number }>
  reset(): Promise<void>
  stats(): Promise<ServerStats>
  /** Stats without ending the measured window. */
  peek(): Promise<ServerStats>
  stop(): Promise<void>
}

function crewsFile(): string {
  const crews = JSON.parse(readFileSync(new URL('../../config/crews.json', import.meta.url), 'utf8'))
  for (const crew of crews.crews) crew.maxConcurrentSessions = Math.max(N, HOLD) * 2
  const path = join(mkdtempSync(join(tmpdir(), 'sb-bench-')), 'crews.json')
  writeFileSync(path, JSON.stringify(crews))
  return path
}

function ask<T>(child: ChildProcess, type: string, field?: string): Promise<T> {
  return new Promise(done => {
    const on = (r: any) => {
      if (r.type !== type) return
      child.off('message', on)
      done(field ? r[field] : r)
    }
    child.on('message', on)
    child.send({ type })
  })
}

/** The session machine's CPU per turn alone, beside a lean XState machine and a plain reducer (machine-alone.ts); null if it fails. */
function machineAlone(): { turns: number; cpuMsPerTurn: { session: number; lean: number; plain: number }; ratio: { sessionToLean: number; sessionToPlain: number }; complete: boolean } | null {
  try {
    const out = execFileSync(process.execPath, ['--import', '@tapjs/typescript/import', join(here, 'machine-alone.ts')], { encoding: 'utf8', timeout: 600_000 })
    const result = JSON.parse(out.trim().split('\n').at(-1)!)
    return result.complete ? result : null
  } catch (error) {
    console.error(`session machine alone: not measured (${(error as Error).message})`)
    return null
  }
}

export function startServer(mode: string, env: Record<string, string> = {}): Promise<Server> {
  return new Promise((resolve, reject) => {
    const child = fork(join(here, 'server.ts'), [mode], {
      execArgv: [
        '--import',
        '@tapjs/typescript/import',
        '--expose-gc',
        '--max-old-space-size=4096',
        ...(process.env.BENCH_TRACE_GC ? ['--trace-gc'] : []),
        ...(process.env.BENCH_SERVER_NODE_FLAGS ?? '').split(' ').filter(Boolean),
      ],
      env: { ...process.env, BENCH_CREWS_FILE: crewsFile(), ...env },
      stdio: ['ignore', process.env.BENCH_TRACE_GC ? 'inherit' : 'ignore', 'inherit', 'ipc'],
    })
    children.add(child)
    child.once('error', reject)
    child.once('exit', code => reject(new Error(`${mode} server exited (${code})`)))
    child.once('message', (m: any) => {
      if (m.type !== 'ready') return reject(new Error('unexpected message'))
      resolve({
        child,
        port: m.port,
        key: m.key,
        memory: () => ask(child, 'memory', 'memory'),
        reset: () => ask(child, 'reset'),
        stats: () => ask(child, 'stats', 'stats'),
        peek: () => ask(child, 'peek', 'stats'),
        stop: () => {
          child.removeAllListeners('exit')
          const exited = new Promise<void>(done => child.once('exit', () => done()))
          // The child exits through process.exit on SIGTERM, which lets --cpu-prof write its profile.
          child.kill('SIGTERM')
          setTimeout(() => child.kill('SIGKILL'), 10_000).unref()
          children.delete(child)
          return exited
        },
      })
    })
  })
}

// ------------------------------------------------------------------ a raw SSE client per session

/** One POST-opened SSE stream on its own socket, with chunked decoding and minimal SSE parsing. */
export class Stream {
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

export function openStream(port: number, key: string): Promise<Stream> {
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

export async function openStreams(port: number, key: string, count: number, into: Stream[]) {
  const target = into.length + count
  await Promise.all(
    Array.from({ length: OPEN_CONCURRENCY }, async () => {
      while (into.length + pendingOpens < target) {
        pendingOpens++
        try {
          into.push(await openStream(port, key))
        } catch (error) {
          // Refused while the service is overloaded (503, Retry-After): a client waits and retries.
          if (!/ 503 /.test((error as Error).message)) throw error
          refusedOpens++
          await new Promise(r => setTimeout(r, 250))
        } finally {
          pendingOpens--
        }
      }
    }),
  )
}
let pendingOpens = 0
/** Stream opens refused with 503 (overload) and retried. */
export let refusedOpens = 0

// ------------------------------------------------------------------ load

export function percentile(sorted: number[], p: number) {
  if (!sorted.length) return NaN
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}

export interface RateResult {
  rate: number
  achieved: number
  sent: number
  completed: number
  errors: number
  lost: number
  skippedBusy: number
  rttMs: { p50: number; p90: number; p99: number; max: number }
  /** PUT → 201 (the message's history entry committed). */
  ackMs: { p50: number; p99: number }
  loopDelayMs: { p99: number; max: number }
  loopUtilization: number
  storeWriteHoldMs?: ServerStats['storeWriteHoldMs']
  cpuMsPerMessage: number
  /** cpuMsPerMessage split: the event loop's thread, and the others (the store's commits, GC helpers, ...) by name. */
  cpuMsPerMessageMain: number
  cpuMsPerMessageThreads: Record<string, number>
  gc: ServerStats['gc']
  oldSpaceGrowthMBps: number
}

/** Drives PUT → `assistant.message` round trips over `streams` (each session has one message in flight at most). */
export class Load {
  private readonly agent = new Agent({ keepAlive: true, maxSockets: Number(process.env.BENCH_SOCKETS ?? 64) })
  private readonly sentAt = new Map<Stream, number>()
  rtts: number[] = []
  /** PUT → 201 (the message acknowledged: its history entry is written). */
  acks: number[] = []
  errors = 0
  private counter = 0

  /**
   * BENCH_OVERLAP=1: a session takes its next message whether or not the last one was answered
   * (several in flight, as a user who types on); a message is answered by the reply that quotes it
   * or a later one of the same session (the scripted reply quotes the message it answers).
   */
  private readonly overlap = process.env.BENCH_OVERLAP === '1'
  private readonly waiting = new Map<Stream, { n: number; at: number }[]>()

  constructor(private readonly port: number, private readonly key: string, private readonly streams: Stream[]) {
    for (const s of streams) {
      s.onFrame = (event, data) => {
        if (event !== 'assistant.message') return
        if (this.overlap) return this.answered(s, data)
        const t0 = this.sentAt.get(s)
        if (t0 !== undefined) {
          this.rtts.push(performance.now() - t0)
          this.sentAt.delete(s)
        }
        s.inFlight = false
      }
    }
  }

  private answered(s: Stream, data: string) {
    const n = Number(/ping (\d+)/.exec(data)?.[1] ?? -1)
    const queue = this.waiting.get(s) ?? []
    const now = performance.now()
    while (queue.length && queue[0]!.n <= n) this.rtts.push(now - queue.shift()!.at)
    if (queue.length === 0) {
      this.waiting.delete(s)
      this.sentAt.delete(s)
    }
  }

  get inFlight() {
    return this.sentAt.size
  }

  private put(s: Stream) {
    s.inFlight = !this.overlap
    const sent = performance.now()
    const n = this.counter++
    if (this.overlap) {
      if (!this.waiting.has(s)) this.waiting.set(s, [])
      this.waiting.get(s)!.push({ n, at: sent })
      if (!this.sentAt.has(s)) this.sentAt.set(s, sent)
    } else this.sentAt.set(s, sent)
    const body = `{"message":"ping ${n}"}`
    const req = request(
      {
        host: HOST,
        port: this.port,
        method: 'PUT',
        path: `${CHANNEL}/${s.sessionId}/${s.consumerId}`,
        agent: this.agent,
        headers: { apikey: this.key, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      res => {
        this.acks.push(performance.now() - sent)
        if (res.statusCode !== 201) {
          this.errors++
          this.sentAt.delete(s)
          s.inFlight = false
        }
        res.resume()
      },
    )
    req.on('error', () => {
      this.errors++
      this.sentAt.delete(s)
      s.inFlight = false
    })
    req.end(body)
  }

  /** RATE messages/s for `seconds` (a session still waiting for its reply is skipped); waits for the replies (at most 3 s). */
  async openLoop(rate: number, seconds: number) {
    this.rtts = []
    this.acks = []
    this.errors = 0
    let sent = 0
    let skipped = 0
    let cursor = 0
    const start = performance.now()
    await new Promise<void>(resolve => {
      const tick = setInterval(() => {
        const elapsed = (performance.now() - start) / 1000
        const due = Math.min(Math.floor(elapsed * rate), Math.floor(seconds * rate)) - sent - skipped
        for (let i = 0; i < due; i++) {
          const s = this.streams[cursor++ % this.streams.length]!
          if (s.inFlight) skipped++
          else {
            this.put(s)
            sent++
          }
        }
        if (elapsed >= seconds) {
          clearInterval(tick)
          resolve()
        }
      }, 1)
    })
    const drainUntil = performance.now() + 3000
    while (this.sentAt.size && performance.now() < drainUntil) await new Promise(r => setTimeout(r, 10))
    const lost = this.overlap ? [...this.waiting.values()].reduce((n, q) => n + q.length, 0) : this.sentAt.size
    for (const s of this.sentAt.keys()) s.inFlight = false
    this.sentAt.clear()
    this.waiting.clear()
    return { sent, skipped, lost, errors: this.errors, rtts: [...this.rtts].sort((a, b) => a - b), acks: [...this.acks].sort((a, b) => a - b) }
  }

  close() {
    this.agent.destroy()
  }
}

export async function measureRate(server: Server, load: Load, rate: number, seconds: number): Promise<RateResult> {
  await load.openLoop(rate, 1) // warm-up
  await server.reset()
  const before = await server.peek()
  const run = await load.openLoop(rate, seconds)
  const after = await server.stats()
  const completed = run.rtts.length
  return {
    rate,
    achieved: run.sent / seconds,
    sent: run.sent,
    completed,
    errors: run.errors,
    lost: run.lost,
    skippedBusy: run.skipped,
    rttMs: { p50: percentile(run.rtts, 50), p90: percentile(run.rtts, 90), p99: percentile(run.rtts, 99), max: run.rtts.at(-1) ?? NaN },
    ackMs: { p50: percentile(run.acks, 50), p99: percentile(run.acks, 99) },
    loopDelayMs: { p99: after.loopDelayMs.p99, max: after.loopDelayMs.max },
    loopUtilization: after.loopUtilization,
    ...(after.storeWriteHoldMs ? { storeWriteHoldMs: after.storeWriteHoldMs } : {}),
    cpuMsPerMessage: after.cpuMs / Math.max(1, completed),
    cpuMsPerMessageMain: (after.threadCpuMs.main ?? 0) / Math.max(1, completed),
    cpuMsPerMessageThreads: Object.fromEntries(Object.entries(after.threadCpuMs).filter(([name]) => name !== 'main').map(([name, ms]) => [name, ms / Math.max(1, completed)])),
    gc: after.gc,
    // Old space over the window (majors in it pull it down: this is the net growth).
    oldSpaceGrowthMBps: (after.oldSpace - before.oldSpace) / 1e6 / seconds,
  }
}

interface TargetRun {
  target: string
  run: number
  sessions: number
  rates: RateResult[]
  capacity: number
  hold: { streams: number; openPerSecond: number; cpuMsPerOpen: number; rssPerSessionKiB: number; rssAnonPerSessionKiB: number; rssFilePerSessionKiB: number; heapPerSessionKiB: number; justOpened: { rssPerSessionKiB: number; heapPerSessionKiB: number } }
}

async function runTarget(target: string, run: number): Promise<TargetRun> {
  const server = await startServer(target)
  try {
    const streams: Stream[] = []
    await openStreams(server.port, server.key, N, streams)
    console.error(`   ${target} run ${run}: ${streams.length} streams open`)
    const load = new Load(server.port, server.key, streams)
    const rates: RateResult[] = []
    for (const rate of RATES) {
      const r = await measureRate(server, load, rate, SECONDS)
      rates.push(r)
      console.error(
        `   ${target} run ${run} @${rate}/s: p50 ${r.rttMs.p50.toFixed(2)} p90 ${r.rttMs.p90.toFixed(2)} p99 ${r.rttMs.p99.toFixed(2)} max ${r.rttMs.max.toFixed(1)} ms (PUT → 201 p50 ${r.ackMs.p50.toFixed(1)} p99 ${r.ackMs.p99.toFixed(1)}); ` +
          `loop delay p99 ${r.loopDelayMs.p99.toFixed(1)} max ${r.loopDelayMs.max.toFixed(1)} ms, busy ${(100 * r.loopUtilization).toFixed(0)} %; ` +
          (r.storeWriteHoldMs ? `store write holds ${r.storeWriteHoldMs.count} p99 ${r.storeWriteHoldMs.p99} max ${r.storeWriteHoldMs.max} ms (waits p99 ${r.storeWriteHoldMs.waits.p99} max ${r.storeWriteHoldMs.waits.max}); ` : '') +
          `cpu/msg ${r.cpuMsPerMessage.toFixed(3)} ms (main ${r.cpuMsPerMessageMain.toFixed(3)}; ${Object.entries(r.cpuMsPerMessageThreads).sort((a, b) => b[1] - a[1]).slice(0, 3).map(([name, ms]) => `${name} ${ms.toFixed(3)}`).join(', ')}); lost ${r.lost}; err ${r.errors}; gc young ${(r.sent ? (1000 * r.gc.minorMs) / r.sent : 0).toFixed(0)} µs/msg, major ${r.gc.major} (max ${r.gc.maxMs.toFixed(1)} ms); old space ${r.oldSpaceGrowthMBps.toFixed(2)} MB/s`,
      )
    }
    load.close()
    // Held streams: RSS per session at HOLD open streams (the sessions above are idle now).
    const beforeHold = await server.memory()
    // The opening is a measured window of its own: the server's CPU per open, steadier than the
    // rate on a shared machine (BENCH_PROFILE: profiled, the server's next <mode>-<n> files).
    await server.reset()
    const t0 = performance.now()
    await openStreams(server.port, server.key, Math.max(0, HOLD - streams.length), streams)
    const openSeconds = (performance.now() - t0) / 1000
    const opening = await server.stats()
    const justOpened = await server.memory()
    // Held: open and quiet for a while (quiet sessions hibernate after ENGINE_HIBERNATE_AFTER_MS, 10 s).
    await new Promise(r => setTimeout(r, HOLD_SETTLE_MS))
    const afterHold = await server.memory()
    const added = Math.max(1, HOLD - N)
    const hold = {
      streams: streams.length,
      openPerSecond: added / openSeconds,
      cpuMsPerOpen: opening.cpuMs / added,
      // The marginal cost of a held session (streams opened in this phase only, after GC on both ends).
      rssPerSessionKiB: (afterHold.rss - beforeHold.rss) / added / 1024,
      rssAnonPerSessionKiB: (afterHold.rssAnon - beforeHold.rssAnon) / added / 1024,
      rssFilePerSessionKiB: (afterHold.rssFile - beforeHold.rssFile) / added / 1024,
      heapPerSessionKiB: (afterHold.heapUsed - beforeHold.heapUsed) / added / 1024,
      justOpened: { rssPerSessionKiB: (justOpened.rss - beforeHold.rss) / added / 1024, heapPerSessionKiB: (justOpened.heapUsed - beforeHold.heapUsed) / added / 1024 },
    }
    console.error(
      `   ${target} run ${run}: ${hold.streams} held, ${hold.openPerSecond.toFixed(0)} opened/s (server CPU ${hold.cpuMsPerOpen.toFixed(3)} ms per open); per session after ${HOLD_SETTLE_MS / 1000} s: ${hold.rssPerSessionKiB.toFixed(1)} KiB RSS (anonymous ${hold.rssAnonPerSessionKiB.toFixed(1)}, file-backed ${hold.rssFilePerSessionKiB.toFixed(1)}), ${hold.heapPerSessionKiB.toFixed(1)} KiB heap` +
        ` (just opened: ${hold.justOpened.rssPerSessionKiB.toFixed(1)} / ${hold.justOpened.heapPerSessionKiB.toFixed(1)})`,
    )
    for (const s of streams) s.socket.destroy()
    return { target, run, sessions: N, rates, capacity: Math.max(0, ...rates.filter(r => r.rttMs.p99 < 10 && r.lost === 0).map(r => r.rate)), hold }
  } finally {
    await server.stop()
  }
}

const median = (values: number[]) => {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b)
  return sorted.length ? sorted[Math.floor(sorted.length / 2)]! : NaN
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const runs: TargetRun[] = []
  for (let run = 1; run <= RUNS; run++) {
    for (const target of TARGETS) {
      console.error(`== run ${run}/${RUNS}: ${target}`)
      runs.push(await runTarget(target, run))
      await new Promise(r => setTimeout(r, 500))
    }
  }

  const f = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : '-')
  const summary: Record<string, any> = {}
  for (const target of TARGETS) {
    const mine = runs.filter(r => r.target === target)
    summary[target] = {
      rates: RATES.map(rate => {
        const at = mine.map(r => r.rates.find(x => x.rate === rate)!)
        const m = (pick: (r: RateResult) => number) => median(at.map(pick))
        return {
          rate,
          p50: m(r => r.rttMs.p50),
          p90: m(r => r.rttMs.p90),
          p99: m(r => r.rttMs.p99),
          max: m(r => r.rttMs.max),
          p99Runs: at.map(r => r.rttMs.p99),
          maxRuns: at.map(r => r.rttMs.max),
          loopDelayP99: m(r => r.loopDelayMs.p99),
          loopDelayMax: m(r => r.loopDelayMs.max),
          loopDelayP99Runs: at.map(r => r.loopDelayMs.p99),
          storeWriteHoldP99: at[0]?.storeWriteHoldMs ? m(r => r.storeWriteHoldMs!.p99) : null,
          storeWriteHoldMax: at[0]?.storeWriteHoldMs ? m(r => r.storeWriteHoldMs!.max) : null,
          storeWriteHoldMaxRuns: at.map(r => r.storeWriteHoldMs?.max ?? null),
          cpuMsPerMessage: m(r => r.cpuMsPerMessage),
          cpuMsPerMessageMain: m(r => r.cpuMsPerMessageMain),
          cpuMsPerMessageOtherThreads: m(r => r.cpuMsPerMessage - r.cpuMsPerMessageMain),
          oldSpaceGrowthMBps: m(r => r.oldSpaceGrowthMBps),
          lost: at.reduce((n, r) => n + r.lost, 0),
          errors: at.reduce((n, r) => n + r.errors, 0),
        }
      }),
      capacity: median(mine.map(r => r.capacity)),
      hold: {
        streams: median(mine.map(r => r.hold.streams)),
        openPerSecond: median(mine.map(r => r.hold.openPerSecond)),
        cpuMsPerOpen: median(mine.map(r => r.hold.cpuMsPerOpen)),
        rssPerSessionKiB: median(mine.map(r => r.hold.rssPerSessionKiB)),
        rssAnonPerSessionKiB: median(mine.map(r => r.hold.rssAnonPerSessionKiB)),
        rssFilePerSessionKiB: median(mine.map(r => r.hold.rssFilePerSessionKiB)),
        heapPerSessionKiB: median(mine.map(r => r.hold.heapPerSessionKiB)),
      },
    }
  }
  const sb = summary.switchboard
  const base = summary[BASELINE]
  const rows = [['target', 'rate', 'p50', 'p90', 'p99 (runs)', 'max', 'loop p99 / max', 'store hold p99 / max', 'cpu ms/msg', 'old MB/s', 'lost', 'err']]
  for (const target of TARGETS) {
    for (const r of summary[target].rates) {
      rows.push([target, String(r.rate), f(r.p50), f(r.p90), `${f(r.p99)} (${r.p99Runs.map((x: number) => f(x, 1)).join(', ')})`, f(r.max, 1), `${f(r.loopDelayP99, 1)} / ${f(r.loopDelayMax, 1)}`, r.storeWriteHoldP99 === null ? '-' : `${f(r.storeWriteHoldP99, 2)} / ${f(r.storeWriteHoldMax, 2)}`, f(r.cpuMsPerMessage, 3), f(r.oldSpaceGrowthMBps), String(r.lost), String(r.errors)])
    }
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map(r => r[i]!.length)))
  for (const row of rows) console.log(row.map((c, i) => c.padEnd(widths[i]!)).join('  '))
  for (const target of TARGETS) {
    const h = summary[target].hold
    console.log(`${target}: capacity (p99 < 10 ms) ${summary[target].capacity} msg/s; ${h.streams} held streams: ${f(h.openPerSecond, 0)} opened/s (${f(h.cpuMsPerOpen, 3)} ms CPU each), ${f(h.rssPerSessionKiB, 1)} KiB RSS/session, ${f(h.heapPerSessionKiB, 1)} KiB heap/session`)
  }
  let ratio: Record<string, unknown> | null = null
  if (sb && base) {
    ratio = {
      p99: sb.rates.map((r: any, i: number) => ({ rate: r.rate, ratio: r.p99 / base.rates[i].p99 })),
      cpuPerMessage: sb.rates.map((r: any, i: number) => ({ rate: r.rate, ratio: r.cpuMsPerMessage / base.rates[i].cpuMsPerMessage })),
      capacity: sb.capacity / base.capacity,
      openRate: sb.hold.openPerSecond / base.hold.openPerSecond,
      cpuPerOpen: sb.hold.cpuMsPerOpen / base.hold.cpuMsPerOpen,
      rssPerSession: sb.hold.rssPerSessionKiB / base.hold.rssPerSessionKiB,
    }
    console.log(`switchboard / ${BASELINE}: ${JSON.stringify(ratio, (_k, v) => (typeof v === 'number' ? Number(v.toFixed(2)) : v))}`)
  }
  // The floor of the lighter design (server.ts `floor`), as a ratio to the same baseline.
  const floor = summary.floor
  if (floor && base) {
    ratio = {
      ...ratio,
      floor: {
        p99: floor.rates.map((r: any, i: number) => ({ rate: r.rate, ratio: r.p99 / base.rates[i].p99 })),
        cpuPerMessage: floor.rates.map((r: any, i: number) => ({ rate: r.rate, ratio: r.cpuMsPerMessage / base.rates[i].cpuMsPerMessage })),
        capacity: floor.capacity / base.capacity,
      },
    }
    console.log(`floor / ${BASELINE}: ${JSON.stringify((ratio as any).floor, (_k, v) => (typeof v === 'number' ? Number(v.toFixed(2)) : v))}`)
  }
  const machine = sb ? machineAlone() : null
  if (machine) {
    const perMessage = (target: string) => summary[target].rates.map((r: any) => `${f(r.cpuMsPerMessage, 3)} at ${r.rate}/s`).join(', ')
    const { session, lean, plain } = machine.cpuMsPerTurn
    console.log(`session machine alone (machine-alone.ts, ${machine.turns} turns): ${f(session, 4)} ms CPU per turn (a lean XState machine ${f(lean, 4)}, ${f(machine.ratio.sessionToLean, 2)}x; a plain reducer ${f(plain, 4)}); switchboard ${perMessage('switchboard')}${base ? `; ${BASELINE} ${perMessage(BASELINE)}` : ''} (ms CPU per message)`)
  }
  writeResults(import.meta.url, started, {
    date: new Date().toISOString(),
    machine: machineInfo(),
    config: { runs: RUNS, sessions: N, hold: HOLD, rates: RATES, seconds: SECONDS, targets: TARGETS, heartbeatMs: Number(process.env.BENCH_HEARTBEAT_MS ?? 1000) },
    summary,
    ratio,
    machineAlone: machine,
    runs,
    wallSeconds: (Date.now() - started) / 1000,
  })
  process.exit(0)
}
