// The server side of the SSE bench, run as a child process so the load generator does not
// share its event loop:
//   switchboard  the whole service (uWebSockets.js gateway, XState actors, store writes, scripted assistant)
//   uws          a bare uWebSockets.js SSE server doing the channel's protocol work (same paths,
//                auth header, JSON bodies, frames, payloads, reply chunking, heartbeats) and nothing else
//   node         the same bare server on node:http
// Every mode answers the parent's probes over IPC: event-loop delay (perf_hooks), CPU time of this
// process, memory and old-space size, GC pauses by kind.
import { randomUUID } from 'node:crypto'
import { readdirSync, readFileSync, rmSync } from 'node:fs'
import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { getHeapSpaceStatistics } from 'node:v8'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { monitorEventLoopDelay, performance } from 'node:perf_hooks'
import { ProfileWindow } from '../profile-window.js'
import { GcTally } from '../support.js'
import type { FloorSession } from '../floor-machine.js'

const mode = process.argv[2]
const KEY = 'bench-key-0000000000000000'
const CHANNEL = '/assistants-channel/api/v1/channel/api/eventstream'
const HEARTBEAT_MS = Number(process.env.BENCH_HEARTBEAT_MS ?? 1000)

// ------------------------------------------------------------------ probes

const loopDelay = monitorEventLoopDelay({ resolution: 1 })
loopDelay.enable()
let cpuMark = process.cpuUsage()
let eluMark = performance.eventLoopUtilization()
const gc = new GcTally()

const oldSpace = () => getHeapSpaceStatistics().find(s => s.space_name === 'old_space')?.space_used_size ?? 0

/**
 * CPU ms of this process's threads, from Linux's /proc (utime + stime, in clock ticks of 10 ms):
 * the main thread (the event loop) and every other thread (lmdb-js's write thread, the store's
 * write thread, V8's GC helpers, libuv's pool), by name. Empty elsewhere.
 */
function threadCpu(): Record<string, number> {
  const out: Record<string, number> = {}
  try {
    for (const tid of readdirSync('/proc/self/task')) {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8')
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      const ms = (Number(fields[11]) + Number(fields[12])) * 10
      const name = Number(tid) === process.pid ? 'main' : `${readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim()}#${tid}`
      out[name] = (out[name] ?? 0) + ms
    }
  } catch {
    // not Linux
  }
  return out
}
let threadMark = threadCpu()
const threadsSince = (mark: Record<string, number>) => Object.fromEntries(Object.entries(threadCpu()).map(([name, ms]) => [name, ms - (mark[name] ?? 0)]).filter(([, ms]) => (ms as number) > 0))

function stats() {
  const cpu = process.cpuUsage(cpuMark)
  const m = process.memoryUsage()
  return {
    loopDelayMs: { p50: loopDelay.percentile(50) / 1e6, p99: loopDelay.percentile(99) / 1e6, max: loopDelay.max / 1e6, mean: loopDelay.mean / 1e6 },
    cpuMs: (cpu.user + cpu.system) / 1000,
    /** The same CPU by thread (main: the event loop). */
    threadCpuMs: threadsSince(threadMark),
    /** Share of the window the event loop was busy (not waiting for I/O). */
    loopUtilization: performance.eventLoopUtilization(eluMark).utilization,
    gc: gc.read(),
    rss: m.rss,
    heapUsed: m.heapUsed,
    oldSpace: oldSpace(),
  }
}

function resetStats() {
  loopDelay.reset()
  resetExtra()
  cpuMark = process.cpuUsage()
  threadMark = threadCpu()
  eluMark = performance.eventLoopUtilization()
  gc.reset()
}

/** RSS by kind (Linux): anonymous (heaps, buffers) and file-backed (the embedded store's mapped file, code). */
function rssKinds(): { anon: number; file: number } {
  try {
    const status = readFileSync('/proc/self/status', 'utf8')
    const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024
    return { anon: kib('RssAnon'), file: kib('RssFile') + kib('RssShmem') }
  } catch {
    return { anon: 0, file: 0 }
  }
}

function memory() {
  ;(globalThis as any).gc?.()
  const m = process.memoryUsage()
  const kinds = rssKinds()
  return { rss: m.rss, rssAnon: kinds.anon, rssFile: kinds.file, heapUsed: m.heapUsed, external: m.external, oldSpace: oldSpace() }
}

// ------------------------------------------------------------------ servers

const dataDirs: string[] = []
function dataDir(prefix: string) {
  const dir = join(tmpdir(), `${prefix}-${randomUUID()}`)
  dataDirs.push(dir)
  return dir
}

let extraStats: () => Record<string, unknown> = () => ({})
let resetExtra = () => {}

async function startSwitchboard(): Promise<number> {
  const { loadConfig } = await import('../../platform/config.js')
  const { createLogger } = await import('../../platform/logger.js')
  const { startService } = await import('../../service.js')
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    API_KEYS: `${KEY}=bench`,
    LOG_LEVEL: 'silent',
    CREWS_FILE: process.env.BENCH_CREWS_FILE!,
    DATA_DIR: dataDir('switchboard-bench'),
    SSE_HEARTBEAT_MS: String(HEARTBEAT_MS),
    // One account holds every stream of the bench: its share is the whole process.
    OVERLOAD_ACCOUNT_STREAMS_PERCENT: '100',
    ...JSON.parse(process.env.BENCH_SERVICE_ENV ?? '{}'),
  })
  const service = await startService(config, { logger: createLogger('silent') })
  // The embedded store's write transactions: how long each held the loop (see platform/store/write-holds.ts).
  const holds = (service.platform.store as { holds?: import('../../platform/store/write-holds.js').WriteHolds }).holds
  if (holds) {
    extraStats = () => ({ storeWriteHoldMs: holds.summary() })
    resetExtra = () => holds.reset()
  }
  return service.port
}

/**
 * The channel's replies, computed as the scripted crew does ("You said: <text>"). Its words come at
 * once, so the channel writes them as one assistant.response (engine/session/generation.ts): so
 * does this server, so both send the same frames.
 */
function replyFrames(sessionId: string, turnId: number, message: string) {
  const text = `You said: ${message}`
  const messageId = `t${turnId}.0`
  const frames: [string, unknown][] = [['crew.status.writing', { sessionId, agentId: 'general', turnId }]]
  frames.push(['assistant.response', { messageId, turnId, index: 0, delta: text }])
  frames.push(['assistant.message', { sessionId, messageId, turnId, agentId: 'general', text, at: Date.now() }])
  frames.push(['crew.status.waiting', { sessionId, agentId: 'general' }])
  return frames
}

const frameText = (id: number, event: string, data: unknown) => `id: ${id}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`
const heartbeat = `event: hearthbeat\ndata: ${JSON.stringify({ minutes: HEARTBEAT_MS / 60_000 })}\n\n`

async function startUws(): Promise<number> {
  const { loadNativeUws } = await import('../../gateway/uws.js')
  const uws = loadNativeUws()
  const app = uws.App()
  interface S {
    res: import('../../gateway/uws.js').HttpResponse
    seq: number
    turn: number
    open: boolean
    beat: NodeJS.Timeout
  }
  const streams = new Map<string, S>()
  const readJson = (res: import('../../gateway/uws.js').HttpResponse, done: (body: any) => void) => {
    let buffer: Buffer | null = null
    res.onData((chunk, last) => {
      const part = Buffer.from(chunk)
      buffer = buffer ? Buffer.concat([buffer, part]) : part
      if (!last) return
      let body: any
      try {
        body = JSON.parse(buffer.toString('utf8'))
      } catch {}
      done(body)
    })
  }
  app.post(`${CHANNEL}/:crewId`, (res, req) => {
    const key = req.getHeader('apikey')
    let aborted = false
    res.onAborted(() => (aborted = true))
    if (key !== KEY) return void res.cork(() => void res.writeStatus('401 Unauthorized').end('{"code":"UNAUTHORIZED"}'))
    readJson(res, () => {
      if (aborted) return
      const sessionId = randomUUID()
      const consumerId = randomUUID()
      const s: S = { res, seq: 0, turn: 0, open: true, beat: setInterval(() => s.open && res.cork(() => void res.write(`id: ${s.seq}\n${heartbeat}`)), HEARTBEAT_MS) }
      s.beat.unref()
      streams.set(sessionId, s)
      res.onAborted(() => {
        s.open = false
        clearInterval(s.beat)
        streams.delete(sessionId)
      })
      res.cork(() => {
        res.writeStatus('200 OK').writeHeader('Content-Type', 'text/event-stream').writeHeader('Cache-Control', 'no-cache')
        res.write(frameText(++s.seq, 'Initialized', { sessionId, consumerId }) + frameText(++s.seq, 'crew.status.waiting', { sessionId, agentId: 'general' }))
      })
    })
  })
  app.put(`${CHANNEL}/:sessionId/:consumerId`, (res, req) => {
    const key = req.getHeader('apikey')
    const sessionId = req.getParameter(0)
    const consumerId = req.getParameter(1)
    let aborted = false
    res.onAborted(() => (aborted = true))
    if (key !== KEY) return void res.cork(() => void res.writeStatus('401 Unauthorized').end('{"code":"UNAUTHORIZED"}'))
    readJson(res, body => {
      if (aborted) return
      const s = streams.get(sessionId)
      if (!s || typeof body?.message !== 'string') return void res.cork(() => void res.writeStatus(s ? '400 Bad Request' : '404 Not Found').end('{"code":"BAD_REQUEST"}'))
      res.cork(() => void res.writeStatus('201 Created').writeHeader('Content-Type', 'application/json').end(JSON.stringify({ sessionId, consumerId, status: 'accepted' })))
      let chunk = ''
      for (const [event, data] of replyFrames(sessionId, ++s.turn, body.message)) chunk += frameText(++s.seq, event, data)
      s.res.cork(() => void s.res.write(chunk))
    })
  })
  return new Promise((resolve, reject) =>
    app.listen('127.0.0.1', 0, socket => (socket ? resolve(uws.us_socket_local_port(socket as any)) : reject(new Error('uws listen failed')))),
  )
}

/**
 * The floor of the lighter design: its essential parts and nothing else, to show what a turn must
 * cost with them. uWebSockets.js as the bare server uses it; per session one XState actor of the
 * real machine (engine/session/machine.ts) whose effects write the turn's history entries and SSE
 * frames; the entries and the control state committed to the embedded store's ordered log
 * (platform/store OrderedLog), one write per session per 2 ms window; the 201 once its entry is
 * committed, as the service does. No generic gateway, hub, transport, conversation, report record,
 * metrics or checkpoints.
 */
async function startFloor(): Promise<number> {
  const { loadNativeUws } = await import('../../gateway/uws.js')
  const { LmdbStore } = await import('../../platform/store/lmdb-store.js')
  const { persistedControl } = await import('../../engine/session/machine.js')
  const { floorMachine } = await import('../floor-machine.js')
  const uws = loadNativeUws()
  const app = uws.App()
  const store = new LmdbStore({ path: dataDir('switchboard-floor'), sweepIntervalMs: 0 })
  const journal = store.orderedLog<unknown>('journal')
  interface S extends FloorSession {
    res: import('../../gateway/uws.js').HttpResponse
    open: boolean
    beat: NodeJS.Timeout
    seq: number
    pending: { stream: string; position: number; value: unknown }[]
    waiting: { seq: number; resolve: () => void }[]
    frames: string
  }
  const sessions = new Map<string, S>()
  // Frames of one macrotask go in one write per stream; the journal's dirty sessions every 2 ms.
  const toWrite = new Set<S>()
  const frame = (s: S, event: string, data: unknown) => {
    s.frames += frameText(++s.seq, event, data)
    if (toWrite.size === 0) setImmediate(() => {
      for (const w of toWrite) if (w.open) w.res.cork(() => void w.res.write(w.frames))
      for (const w of toWrite) w.frames = ''
      toWrite.clear()
    })
    toWrite.add(s)
  }
  const dirty = new Set<S>()
  const log = (s: S, type: string, at: number, fields: Record<string, unknown>) => {
    s.pending.push({ stream: s.id, position: ++s.history, value: { seq: s.history, at, type, ...fields } })
    if (dirty.size === 0) setTimeout(flush, 2)
    dirty.add(s)
  }
  const flush = () => {
    for (const s of dirty) {
      const records = s.pending
      s.pending = []
      const upTo = s.history
      records.push({ stream: s.id, position: 0, value: { seq: upTo, control: persistedControl(s.actor.getSnapshot()) } })
      void journal.write(records).then(() => {
        const waiting = s.waiting
        s.waiting = []
        for (const w of waiting) (w.seq <= upTo ? w.resolve() : s.waiting.push(w))
      })
    }
    dirty.clear()
  }
  const floor = floorMachine<S>({ log, frame, reply: text => `You said: ${text}` })
  const readJson = (res: import('../../gateway/uws.js').HttpResponse, done: (body: any) => void) => {
    let buffer: Buffer | null = null
    res.onData((chunk, last) => {
      const part = Buffer.from(chunk)
      buffer = buffer ? Buffer.concat([buffer, part]) : part
      if (!last) return
      let body: any
      try {
        body = JSON.parse(buffer.toString('utf8'))
      } catch {}
      done(body)
    })
  }
  app.post(`${CHANNEL}/:crewId`, (res, req) => {
    const key = req.getHeader('apikey')
    let aborted = false
    res.onAborted(() => (aborted = true))
    if (key !== KEY) return void res.cork(() => void res.writeStatus('401 Unauthorized').end('{"code":"UNAUTHORIZED"}'))
    readJson(res, () => {
      if (aborted) return
      const id = randomUUID()
      const consumerId = randomUUID()
      const actor = floor.actor()
      const s: S = { id, res, open: true, actor, seq: 0, history: 0, pending: [], waiting: [], frames: '', user: { seq: 0, text: '' }, beat: setInterval(() => s.open && res.cork(() => void res.write(`id: ${s.seq}\n${heartbeat}`)), HEARTBEAT_MS) }
      s.beat.unref()
      floor.bind(s)
      sessions.set(id, s)
      res.onAborted(() => {
        s.open = false
        clearInterval(s.beat)
        sessions.delete(id)
      })
      res.cork(() => void res.writeStatus('200 OK').writeHeader('Content-Type', 'text/event-stream').writeHeader('Cache-Control', 'no-cache'))
      log(s, 'session.created', Date.now(), { crewId: 'demo', agentId: 'general', consumerId })
      frame(s, 'Initialized', { sessionId: id, consumerId })
      actor.start()
    })
  })
  app.put(`${CHANNEL}/:sessionId/:consumerId`, (res, req) => {
    const key = req.getHeader('apikey')
    const sessionId = req.getParameter(0)
    const consumerId = req.getParameter(1)
    let aborted = false
    res.onAborted(() => (aborted = true))
    if (key !== KEY) return void res.cork(() => void res.writeStatus('401 Unauthorized').end('{"code":"UNAUTHORIZED"}'))
    readJson(res, body => {
      if (aborted) return
      const s = sessions.get(sessionId)
      if (!s || typeof body?.message !== 'string') return void res.cork(() => void res.writeStatus(s ? '400 Bad Request' : '404 Not Found').end('{"code":"BAD_REQUEST"}'))
      s.actor.send({ type: 'user.message', text: body.message, consumerId, at: Date.now() })
      // Acknowledged once the message's entry is committed.
      s.waiting.push({
        seq: s.user.seq,
        resolve: () => aborted || res.cork(() => void res.writeStatus('201 Created').writeHeader('Content-Type', 'application/json').end(JSON.stringify({ sessionId, consumerId, status: 'accepted' }))),
      })
    })
  })
  return new Promise((resolve, reject) =>
    app.listen('127.0.0.1', 0, socket => (socket ? resolve(uws.us_socket_local_port(socket as any)) : reject(new Error('uws listen failed')))),
  )
}

function startNode(): Promise<number> {
  const streams = new Map<string, { res: ServerResponse; seq: number; turn: number }>()
  const server = createServer((req, res) => {
    if (req.headers.apikey !== KEY) {
      res.writeHead(401, { 'content-type': 'application/json' })
      return res.end('{"code":"UNAUTHORIZED"}')
    }
    const parts = (req.url ?? '').slice(CHANNEL.length + 1).split('/')
    const chunks: Buffer[] = []
    req.on('data', c => chunks.push(c))
    req.on('end', () => {
      if (req.method === 'POST' && parts.length === 1) {
        const sessionId = randomUUID()
        const consumerId = randomUUID()
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
        const s = { res, seq: 0, turn: 0 }
        streams.set(sessionId, s)
        const beat = setInterval(() => res.write(`id: ${s.seq}\n${heartbeat}`), HEARTBEAT_MS)
        beat.unref()
        res.on('close', () => {
          clearInterval(beat)
          streams.delete(sessionId)
        })
        res.write(frameText(++s.seq, 'Initialized', { sessionId, consumerId }) + frameText(++s.seq, 'crew.status.waiting', { sessionId, agentId: 'general' }))
        return
      }
      if (req.method === 'PUT' && parts.length === 2) {
        const [sessionId, consumerId] = parts as [string, string]
        const s = streams.get(sessionId)
        let message: unknown
        try {
          message = JSON.parse(Buffer.concat(chunks).toString('utf8')).message
        } catch {}
        if (!s || typeof message !== 'string') {
          res.writeHead(s ? 400 : 404, { 'content-type': 'application/json' })
          return res.end('{"code":"BAD_REQUEST"}')
        }
        res.writeHead(201, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ sessionId, consumerId, status: 'accepted' }))
        let chunk = ''
        for (const [event, data] of replyFrames(sessionId, ++s.turn, message)) chunk += frameText(++s.seq, event, data)
        s.res.write(chunk)
        return
      }
      res.writeHead(404)
      res.end()
    })
  })
  server.keepAliveTimeout = 60_000
  server.headersTimeout = 65_000
  server.requestTimeout = 0
  server.maxConnections = 100_000
  return new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)))
}

// BENCH_PROFILE=dir: a CPU and an allocation profile of each measured window (started on
// `reset`, written on `stats`), named <mode>-<n> (bench/profile-window.ts).
let profiling: ProfileWindow | null = null
let windowNo = 0
async function startProfile() {
  profiling = await ProfileWindow.start()
}
async function stopProfile() {
  await profiling?.stop(`${mode}-${++windowNo}`)
  profiling = null
}

const port = mode === 'uws' ? await startUws() : mode === 'floor' ? await startFloor() : mode === 'node' || mode === 'baseline' ? await startNode() : await startSwitchboard()
process.on('message', (m: any) => {
  if (m?.type === 'memory') process.send!({ type: 'memory', memory: memory() })
  if (m?.type === 'reset') {
    void startProfile().then(() => {
      resetStats()
      process.send!({ type: 'reset' })
    })
  }
  if (m?.type === 'heapsnapshot') {
    ;(globalThis as any).gc?.()
    void import('node:v8').then(v8 => process.send!({ type: 'heapsnapshot', file: v8.writeHeapSnapshot(m.file) }))
  }
  if (m?.type === 'peek') process.send!({ type: 'peek', stats: stats() })
  if (m?.type === 'stats') {
    const measured = { ...stats(), ...extraStats() }
    void stopProfile().then(() => process.send!({ type: 'stats', stats: measured }))
  }
})
process.on('SIGTERM', () => process.exit(0))
process.on('disconnect', () => process.exit(0))
// A run's database goes with its server (a full bench leaves ~1 GB otherwise).
process.on('exit', () => {
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true })
})
process.send!({ type: 'ready', port, key: KEY })
