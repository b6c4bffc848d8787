// The load generator of bench/cluster, in a process of its own (forked by run.ts, driven over
// IPC) so its CPU is not the service's and the service's is not its. Raw node:http: each
// session's SSE stream on its own socket, the PUTs on one keep-alive agent. Or, with
// `transport: 'ws'` on open, the channel over WebSocket (the `ws` client): a socket per session,
// its messages as frames, a message's `ack` frame standing for its `201`.
//
// A message is `#<n>#`; the crew's scripted fallback quotes it, so the `assistant.message` that
// answers message n carries the tag: a reply with tag n answers every message of that session up
// to n (a turn may answer several messages at once), and a late reply of a timed-out message is
// not taken for the answer to the next one.
//
// Requests (each {id, type, ...}; answered {id, ok, result | error}):
//   open {target, key, count, transport?} opens `count` sessions (crew demo), each until Initialized
//   ids                                    the load sessions' ids
//   run {rate, warmupSeconds, seconds}     open loop over the load sessions; posts {type: 'mark',
//                                          phase: 'start' | 'end'} around the measured window
//   reserve {ids}                          takes sessions out of the open loop (waits until idle)
//   background {rate} / stopBackground     an open loop until stopped (failover)
//   burst {ids}                            each of `ids` sends one message at once, until answered
//   trickle {count, everyMs}               `count` new sessions, each sending every `everyMs`
//   stopTrickle {drainMs}                  stops the trickle; every message's fate
//   close                                  closes every stream
import { Agent, request, type IncomingMessage } from 'node:http'
import WebSocket from 'ws'

const CHANNEL = '/assistants-channel/api/v1/channel/api/eventstream'
const SOCKET = '/assistants-channel/api/v1/channel/api/socket'
type Transport = 'sse' | 'ws'
/** A load message not answered within this is a timeout (its session takes messages again). */
const REPLY_TIMEOUT_MS = 10_000
const OPEN_IN_FLIGHT = 32
const OPEN_DEADLINE_MS = 180_000
/** How long a measured run waits for its last replies after the window. */
const DRAIN_MS = REPLY_TIMEOUT_MS + 1000

/** Wall-clock milliseconds with sub-millisecond precision, comparable with run.ts's. */
const now = () => performance.timeOrigin + performance.now()
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))
/**
 * The PUTs' keep-alive sockets (BENCH_SOCKETS at most: past it a PUT waits for one, as behind one
 * client). FIFO keeps every socket in use: one left idle past the server's idle timeout (uWS: 10 s)
 * could be closed just as a PUT is written to it ("socket hang up", not the service's error).
 */
const newAgent = () => new Agent({ keepAlive: true, scheduling: 'fifo', maxSockets: Number(process.env.BENCH_SOCKETS ?? 128) })

interface Target {
  host: string
  port: number
}

/** One message: when it was sent, acknowledged and answered, and into which tally it counts. */
interface Message {
  n: number
  text: string
  sessionId: string
  sentAt: number
  status?: number
  ackAt?: number
  replyAt?: number
  tally?: Tally
  /** Settled: answered, refused or timed out (counted once). */
  settled: boolean
}

/** The outcomes of the messages sent in one phase (warm-up, measured window, background). */
class Tally {
  sent = 0
  skippedBusy = 0
  answered = 0
  errors = 0
  timeouts = 0
  rtts: number[] = []
  acks: number[] = []
  errorsByStatus: Record<string, number> = {}
  errorSamples: string[] = []
  outstanding = 0

  summary(seconds: number) {
    const rtts = [...this.rtts].sort((a, b) => a - b)
    const acks = [...this.acks].sort((a, b) => a - b)
    return {
      sent: this.sent,
      achievedRate: this.sent / seconds,
      answered: this.answered,
      errors: this.errors,
      timeouts: this.timeouts,
      unsettled: this.outstanding,
      skippedBusy: this.skippedBusy,
      errorsByStatus: this.errorsByStatus,
      errorSamples: this.errorSamples,
      rttMs: { p50: pct(rtts, 50), p90: pct(rtts, 90), p99: pct(rtts, 99), max: rtts.at(-1) ?? null },
      ackMs: { p50: pct(acks, 50), p99: pct(acks, 99), max: acks.at(-1) ?? null },
    }
  }
}

const pct = (sorted: number[], p: number): number | null => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]! : null)

class Session {
  /** Messages sent and not yet answered, by n (ascending: n only grows). */
  readonly waiting = new Map<number, Message>()
  reserved = false
  alive = true
  replies: number[] = []

  /** Over WebSocket: messages waiting for their ack frame, by n. */
  readonly acking = new Map<number, { m: Message; onAck?: (m: Message) => void }>()

  constructor(
    readonly id: string,
    readonly consumerId: string,
    /** The SSE stream, or the WebSocket carrying the session. */
    readonly response: IncomingMessage | WebSocket,
  ) {}

  get busy() {
    return this.waiting.size > 0
  }
}

class LoadGenerator {
  private target: Target = { host: '127.0.0.1', port: 0 }
  private key = ''
  private transport: Transport = 'sse'
  private agent = newAgent()
  private counter = 0
  private cursor = 0
  readonly load: Session[] = []
  private trickled: Session[] = []
  private trickleLog: Message[] = []
  private trickleTimer: NodeJS.Timeout | undefined
  private background: { tally: Tally; stop: () => void; started: number } | undefined
  streamsLost = 0

  constructor() {
    // Messages past their deadline free their session (the open loop goes on).
    setInterval(() => this.expire(), 100).unref()
  }

  setTarget(target: Target, key: string, transport: Transport = 'sse') {
    this.target = target
    this.key = key
    this.transport = transport
  }

  // ---------------------------------------------------------------- streams

  /** Opens one session on a WebSocket of its own; resolves at its open's ack. */
  private openSocket(): Promise<Session> {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(`ws://${this.target.host}:${this.target.port}${SOCKET}`, { headers: { apikey: this.key }, perMessageDeflate: false })
      let session: Session | undefined
      socket.on('open', () => socket.send('{"type":"open","id":"open","crewId":"demo"}'))
      socket.on('message', (raw: Buffer) => {
        const text = raw.toString('utf8')
        const frame = JSON.parse(text)
        if (!session) {
          if (frame.type === 'ack' && frame.of === 'open') resolve((session = new Session(frame.result.sessionId, frame.result.consumerId, socket)))
          else if (frame.type === 'error') reject(Object.assign(new Error(`open refused: ${text.slice(0, 200)}`), { status: frame.status }))
          return
        }
        if (frame.type === 'event') {
          if (frame.event === 'assistant.message') this.onReply(session, text)
        } else if (frame.type === 'ack' || frame.type === 'error') {
          const waiting = session.acking.get(frame.id)
          if (!waiting) return
          session.acking.delete(frame.id)
          const { m, onAck } = waiting
          m.ackAt = now()
          m.status = frame.type === 'ack' ? 201 : frame.status
          if (frame.type === 'ack') m.tally?.acks.push(m.ackAt - m.sentAt)
          else this.failed(session, m, `${frame.status} ${JSON.stringify(frame.error).slice(0, 160)}`)
          onAck?.(m)
        }
      })
      socket.on('error', error => (session ? undefined : reject(error)))
      socket.on('close', () => {
        if (!session) return reject(new Error('socket closed before its open was acknowledged'))
        if (session.alive) this.streamsLost++
        session.alive = false
      })
    })
  }

  /** Opens one session on its own socket; resolves at its Initialized event. */
  private openOne(): Promise<Session> {
    if (this.transport === 'ws') return this.openSocket()
    return new Promise((resolve, reject) => {
      const body = '{}'
      const req = request(
        {
          ...this.target,
          method: 'POST',
          path: `${CHANNEL}/demo`,
          agent: false,
          headers: { apikey: this.key, accept: 'text/event-stream', 'content-type': 'application/json', 'content-length': body.length },
        },
        res => {
          if (res.statusCode !== 200) {
            let text = ''
            res.setEncoding('utf8')
            res.on('data', chunk => (text += chunk))
            res.on('end', () => reject(Object.assign(new Error(`open answered ${res.statusCode}: ${text.slice(0, 200)}`), { status: res.statusCode })))
            return
          }
          let session: Session | undefined
          this.readEvents(res, (event, data) => {
            if (!session) {
              if (event !== 'Initialized') return
              const init = JSON.parse(data)
              session = new Session(init.sessionId, init.consumerId, res)
              resolve(session)
              return
            }
            if (event === 'assistant.message') this.onReply(session, data)
          })
          res.on('close', () => {
            if (!session) return reject(new Error('stream closed before Initialized'))
            if (session.alive) this.streamsLost++
            session.alive = false
          })
        },
      )
      req.on('error', reject)
      req.end(body)
    })
  }

  /** SSE frames of a response (node:http has undone the chunked encoding). */
  private readEvents(res: IncomingMessage, onEvent: (event: string, data: string) => void) {
    res.setEncoding('utf8')
    let buffer = ''
    res.on('data', (chunk: string) => {
      buffer += chunk
      let end: number
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const frame = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        let event = 'message'
        const data: string[] = []
        for (const line of frame.split('\n')) {
          if (line.startsWith('event: ')) event = line.slice(7)
          else if (line.startsWith('data: ')) data.push(line.slice(6))
        }
        if (data.length) onEvent(event, data.join('\n'))
      }
    })
  }

  /** Opens `count` sessions, OPEN_IN_FLIGHT at a time; a 503 (overload) is retried. */
  async open(count: number, into: Session[]) {
    const started = now()
    const deadline = Date.now() + OPEN_DEADLINE_MS
    const target = into.length + count
    let pending = 0
    let refused = 0
    await Promise.all(
      Array.from({ length: OPEN_IN_FLIGHT }, async () => {
        while (into.length + pending < target) {
          if (Date.now() > deadline) throw new Error(`only ${into.length} of ${target} sessions open after ${OPEN_DEADLINE_MS / 1000} s`)
          pending++
          try {
            into.push(await this.openOne())
          } catch (error) {
            if ((error as { status?: number }).status !== 503) throw error
            refused++
            await sleep(250)
          } finally {
            pending--
          }
        }
      }),
    )
    const seconds = (now() - started) / 1000
    return { sessions: count, seconds, perSecond: count / seconds, refused }
  }

  closeAll() {
    for (const s of [...this.load, ...this.trickled]) {
      s.alive = false
      if (s.response instanceof WebSocket) s.response.terminate()
      else s.response.destroy()
    }
    this.load.length = 0
    this.trickled = []
    this.agent.destroy()
    this.agent = newAgent()
  }

  // ---------------------------------------------------------------- messages

  private onReply(s: Session, data: string) {
    const at = now()
    s.replies.push(at)
    const tag = /#(\d+)#/.exec(data)
    if (!tag) return
    const n = Number(tag[1])
    for (const [k, m] of s.waiting) {
      if (k > n) break
      m.replyAt = at
      s.waiting.delete(k)
      if (!m.settled) this.settle(m, 'answered')
    }
  }

  private settle(m: Message, how: 'answered' | 'error' | 'timeout') {
    m.settled = true
    const tally = m.tally
    if (!tally) return
    tally.outstanding--
    if (how === 'answered') {
      tally.answered++
      tally.rtts.push(m.replyAt! - m.sentAt)
    } else if (how === 'timeout') tally.timeouts++
    else tally.errors++
  }

  /** Sends one message of session `s`; `onAck` sees the PUT's status. */
  send(s: Session, tally: Tally | undefined, onAck?: (m: Message) => void): Message {
    const n = this.counter++
    const m: Message = { n, text: `#${n}#`, sessionId: s.id, sentAt: now(), tally, settled: false }
    if (tally) {
      tally.sent++
      tally.outstanding++
    }
    s.waiting.set(n, m)
    if (s.response instanceof WebSocket) {
      s.acking.set(n, { m, onAck })
      s.response.send(`{"type":"message","id":${n},"message":"${m.text}"}`)
      return m
    }
    const body = `{"message":"${m.text}"}`
    const req = request(
      {
        ...this.target,
        method: 'PUT',
        path: `${CHANNEL}/${s.id}/${s.consumerId}`,
        agent: this.agent,
        headers: { apikey: this.key, 'content-type': 'application/json', 'content-length': body.length },
      },
      res => {
        m.status = res.statusCode
        m.ackAt = now()
        if (res.statusCode === 201) {
          tally?.acks.push(m.ackAt - m.sentAt)
          res.resume()
        } else this.refused(s, m, res)
        onAck?.(m)
      },
    )
    req.on('error', error => {
      m.status = 0
      m.ackAt = now()
      this.failed(s, m, `request: ${error.message}`)
      onAck?.(m)
    })
    req.end(body)
    return m
  }

  private refused(s: Session, m: Message, res: IncomingMessage) {
    let text = ''
    res.setEncoding('utf8')
    res.on('data', chunk => (text += chunk))
    res.on('end', () => this.failed(s, m, `${res.statusCode} ${text.slice(0, 160)}`))
  }

  private failed(s: Session, m: Message, why: string) {
    s.waiting.delete(m.n)
    if (m.settled) return
    const tally = m.tally
    if (tally) {
      const key = String(m.status)
      tally.errorsByStatus[key] = (tally.errorsByStatus[key] ?? 0) + 1
      if (tally.errorSamples.length < 5) tally.errorSamples.push(why)
    }
    this.settle(m, 'error')
  }

  private expire() {
    const cutoff = now() - REPLY_TIMEOUT_MS
    for (const s of this.load) {
      if (s.reserved) continue // a burst waits on its own deadline
      for (const [k, m] of s.waiting) {
        if (m.sentAt > cutoff) break
        s.waiting.delete(k)
        if (!m.settled) this.settle(m, 'timeout')
      }
    }
  }

  // ---------------------------------------------------------------- open loop

  /** Sends `rate` messages/s round-robin over the load sessions not reserved; a busy session is skipped. */
  private openLoop(rate: number, tallyOf: () => Tally) {
    const start = now()
    let issued = 0
    const timer = setInterval(() => {
      const due = Math.floor(((now() - start) / 1000) * rate) - issued
      for (let i = 0; i < due; i++) {
        issued++
        const s = this.next()
        if (!s) continue
        if (s.busy) tallyOf().skippedBusy++
        else this.send(s, tallyOf())
      }
    }, 1)
    return () => clearInterval(timer)
  }

  private next(): Session | undefined {
    for (let tries = 0; tries < this.load.length; tries++) {
      const s = this.load[this.cursor++ % this.load.length]!
      if (s.alive && !s.reserved) return s
    }
    return undefined
  }

  /** Warm-up, then the measured window (marked to the parent), then the window's last replies. */
  async run(rate: number, warmupSeconds: number, seconds: number, mark: (phase: 'start' | 'end') => void) {
    const warm = new Tally()
    const measured = new Tally()
    let tally = warm
    const stop = this.openLoop(rate, () => tally)
    await sleep(warmupSeconds * 1000)
    tally = measured
    mark('start')
    await sleep(seconds * 1000)
    stop()
    mark('end')
    const until = Date.now() + DRAIN_MS
    while (measured.outstanding > 0 && Date.now() < until) await sleep(20)
    return { rate, warmupSeconds, seconds, warmup: warm.summary(warmupSeconds), measured: measured.summary(seconds), streamsLost: this.streamsLost }
  }

  async reserve(ids: string[]) {
    const wanted = new Set(ids)
    const sessions = this.load.filter(s => wanted.has(s.id))
    for (const s of sessions) s.reserved = true
    const until = Date.now() + DRAIN_MS
    while (sessions.some(s => s.busy) && Date.now() < until) await sleep(20)
    return { reserved: sessions.length, stillBusy: sessions.filter(s => s.busy).length }
  }

  startBackground(rate: number) {
    const tally = new Tally()
    this.background = { tally, stop: this.openLoop(rate, () => tally), started: now() }
  }

  async stopBackground() {
    const bg = this.background
    if (!bg) return null
    bg.stop()
    const seconds = (now() - bg.started) / 1000
    const until = Date.now() + DRAIN_MS
    while (bg.tally.outstanding > 0 && Date.now() < until) await sleep(20)
    this.background = undefined
    return { seconds, ...bg.tally.summary(seconds) }
  }

  /** Each session sends one message at once; a refusal is sent again after 100 ms, until `deadlineMs`. */
  async burst(ids: string[], deadlineMs: number) {
    const wanted = new Set(ids)
    const sessions = this.load.filter(s => wanted.has(s.id))
    const until = Date.now() + deadlineMs
    const one = async (s: Session) => {
      let attempts = 0
      const refusals: string[] = []
      while (Date.now() < until) {
        attempts++
        const m = await new Promise<Message>(done => this.send(s, undefined, done))
        if (m.status === 201) {
          while (m.replyAt === undefined && Date.now() < until) await sleep(5)
          return { sessionId: s.id, attempts, refusals, status: 201, sentAt: m.sentAt, ackAt: m.ackAt, replyAt: m.replyAt ?? null }
        }
        refusals.push(`${m.status} after ${Math.round(m.ackAt! - m.sentAt)} ms`)
        await sleep(100)
      }
      return { sessionId: s.id, attempts, refusals, status: null, sentAt: null, ackAt: null, replyAt: null }
    }
    return Promise.all(sessions.map(one))
  }

  // ---------------------------------------------------------------- trickle (MongoDB outage)

  async startTrickle(count: number, everyMs: number) {
    const opened = await this.open(count, this.trickled)
    this.trickleLog = []
    this.trickleTimer = setInterval(() => {
      for (const s of this.trickled) if (s.alive) this.trickleLog.push(this.send(s, undefined))
    }, everyMs)
    return { ...opened, ids: this.trickled.map(s => s.id) }
  }

  /** Stops sending; waits up to `drainMs` for every PUT's status and reply. */
  async stopTrickle(drainMs: number) {
    clearInterval(this.trickleTimer)
    const until = Date.now() + drainMs
    const open = () => this.trickleLog.some(m => m.status === undefined || (m.status === 201 && m.replyAt === undefined))
    while (open() && Date.now() < until) await sleep(50)
    return {
      messages: this.trickleLog.map(({ n, text, sessionId, sentAt, status, ackAt, replyAt }) => ({ n, text, sessionId, sentAt, status: status ?? null, ackAt: ackAt ?? null, replyAt: replyAt ?? null })),
      replies: Object.fromEntries(this.trickled.map(s => [s.id, s.replies])),
    }
  }
}

// ------------------------------------------------------------------ IPC

const gen = new LoadGenerator()

async function handle(msg: any): Promise<unknown> {
  switch (msg.type) {
    case 'open':
      gen.setTarget(msg.target, msg.key, msg.transport)
      return gen.open(msg.count, gen.load)
    case 'ids':
      return gen.load.map(s => s.id)
    case 'run':
      return gen.run(msg.rate, msg.warmupSeconds, msg.seconds, phase => process.send!({ type: 'mark', phase, at: now() }))
    case 'reserve':
      return gen.reserve(msg.ids)
    case 'background':
      return gen.startBackground(msg.rate)
    case 'stopBackground':
      return gen.stopBackground()
    case 'burst':
      return gen.burst(msg.ids, msg.deadlineMs)
    case 'trickle':
      gen.setTarget(msg.target, msg.key)
      return gen.startTrickle(msg.count, msg.everyMs)
    case 'stopTrickle':
      return gen.stopTrickle(msg.drainMs)
    case 'close':
      return gen.closeAll()
    default:
      throw new Error(`unknown request ${msg.type}`)
  }
}

process.on('message', (msg: any) => {
  handle(msg).then(
    result => process.send!({ id: msg.id, ok: true, result: result ?? null }),
    error => process.send!({ id: msg.id, ok: false, error: String((error as Error).stack ?? error) }),
  )
})
// The bench gone (even killed), this process goes too.
process.on('disconnect', () => process.exit(0))
process.send!({ type: 'ready', pid: process.pid })
