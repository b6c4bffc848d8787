// A real WebSocket client for tests (the `ws` package over a real socket): the channel's frames
// collected in order, so tests wait for an event, an ack or the close and assert on everything
// received before it. Events look like the SSE client's (id as a string), so a test can compare
// what both transports delivered.
import WebSocket from 'ws'
import { KEYS } from './harness.js'
import type { SseEvent } from './sse.js'

export const SOCKET = '/assistants-channel/api/v1/channel/api/socket'

export interface SocketOptions {
  key?: string | null
  headers?: Record<string, string>
  protocols?: string[]
  query?: string
}

/**
 * Resolves once the socket is open; rejects when the handshake is refused, after handing its
 * status and JSON body to `onRefused`. Never an unhandled rejection.
 */
export function handshake(ws: WebSocket, onRefused: (refused: { status: number; body: any }) => void): Promise<void> {
  const opened = new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve())
    ws.once('unexpected-response', (_req, res) => {
      let text = ''
      res.on('data', (c: Buffer) => (text += c))
      res.on('end', () => {
        onRefused({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined })
        reject(new Error(`handshake refused: ${res.statusCode} ${text}`))
      })
    })
    ws.once('error', reject)
  })
  opened.catch(() => {})
  return opened
}

export class WsClient {
  /** Every frame, in order. */
  readonly frames: any[] = []
  /** The event frames, shaped as SSE events. */
  readonly events: SseEvent[] = []
  close_: { code: number; reason: string } | null = null
  /** The handshake's refusal: its status and JSON body. */
  refused: { status: number; body: any } | null = null
  readonly opened: Promise<void>
  readonly done: Promise<void>
  private waiters: (() => void)[] = []
  private cursor = 0
  private frameCursor = 0
  private nextId = 1

  constructor(readonly ws: WebSocket) {
    this.opened = handshake(ws, refused => {
      this.refused = refused
      this.wake()
    })
    ws.on('message', (data, isBinary) => {
      const frame = isBinary ? { binary: true } : JSON.parse(String(data))
      this.frames.push(frame)
      if (frame.type === 'event') this.events.push({ id: String(frame.id), event: frame.event, data: frame.data })
      this.wake()
    })
    this.done = new Promise(resolve =>
      ws.once('close', (code, reason) => {
        this.close_ = { code, reason: String(reason) }
        this.wake()
        resolve()
      }),
    )
  }

  private wake() {
    for (const w of this.waiters.splice(0)) w()
  }

  private async until<T>(find: () => T | undefined, what: string, timeoutMs: number): Promise<T> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const found = find()
      if (found !== undefined) return found
      if (this.close_ || this.refused) throw new Error(`socket closed (${JSON.stringify(this.close_ ?? this.refused)}) before ${what}; got ${JSON.stringify(this.frames).slice(0, 2000)}`)
      const left = deadline - Date.now()
      if (left <= 0) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(this.frames).slice(0, 2000)}`)
      await new Promise<void>(resolve => {
        const timer = setTimeout(resolve, left)
        this.waiters.push(() => {
          clearTimeout(timer)
          resolve()
        })
      })
    }
  }

  /** The next event (after the last one returned) matching `name`. */
  next(name?: string | ((e: SseEvent) => boolean), timeoutMs = 15_000): Promise<SseEvent> {
    const match = typeof name === 'function' ? name : (e: SseEvent) => name === undefined || e.event === name
    return this.until(
      () => {
        while (this.cursor < this.events.length) {
          const e = this.events[this.cursor++]!
          if (match(e)) return e
        }
        return undefined
      },
      typeof name === 'string' ? name : 'an event',
      timeoutMs,
    )
  }

  /** The next frame of a type (ack, error), after the last one returned. */
  nextFrame(type: string, timeoutMs = 15_000): Promise<any> {
    return this.until(
      () => {
        while (this.frameCursor < this.frames.length) {
          const f = this.frames[this.frameCursor++]!
          if (f.type === type) return f
        }
        return undefined
      },
      `a ${type} frame`,
      timeoutMs,
    )
  }

  /** The answer (ack or error) to the frame of this id. */
  answer(id: string | number, timeoutMs = 15_000): Promise<any> {
    return this.until(() => this.frames.find(f => (f.type === 'ack' || f.type === 'error') && f.id === id), `the answer to ${id}`, timeoutMs)
  }

  send(frame: unknown) {
    this.ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame))
  }

  /** Sends a frame with a fresh id and waits for its answer. */
  async ask(frame: Record<string, unknown>): Promise<any> {
    const id = `q${this.nextId++}`
    this.send({ ...frame, id })
    return this.answer(id)
  }

  /** Waits for the server's close: its code and reason. */
  async closed(timeoutMs = 15_000): Promise<{ code: number; reason: string }> {
    await Promise.race([this.done, new Promise((_, reject) => setTimeout(() => reject(new Error(`socket not closed; got ${JSON.stringify(this.frames).slice(0, 1000)}`)), timeoutMs).unref())])
    return this.close_!
  }

  names() {
    return this.events.map(e => e.event)
  }

  close() {
    this.ws.close()
  }

  /** Waits until the server closes the socket (as SseClient.ended_ waits for the stream's end). */
  async ended_(timeoutMs = 15_000) {
    await Promise.race([this.done, new Promise((_, reject) => setTimeout(() => reject(new Error('socket did not close')), timeoutMs).unref())])
  }
}

/** Opens a channel socket (the apikey header unless `key: null`); resolves once open or refused. */
export async function openSocket(base: string, options: SocketOptions = {}): Promise<WsClient> {
  const headers: Record<string, string> = { ...options.headers }
  if (options.key !== null) headers.apikey = options.key ?? KEYS.acme
  const url = `${base.replace(/^http/, 'ws')}${SOCKET}${options.query ?? ''}`
  const client = new WsClient(new WebSocket(url, options.protocols ?? [], { headers }))
  await client.opened.catch(() => {})
  return client
}

/** Opens a session on crew `demo` (or `crewId`) over a socket and waits for Initialized. */
export async function createSocketSession(base: string, body: Record<string, unknown> = {}, options: SocketOptions & { crewId?: string } = {}) {
  const socket = await openSocket(base, options)
  const ack = await socket.ask({ type: 'open', crewId: options.crewId ?? 'demo', ...body })
  if (ack.type !== 'ack') throw new Error(`open answered ${JSON.stringify(ack)}`)
  const init = await socket.next('Initialized')
  return { socket, sessionId: ack.result.sessionId as string, consumerId: ack.result.consumerId as string, init }
}
