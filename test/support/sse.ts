// A real SSE client for tests: fetch over a real socket, the SSE wire format parsed here (id,
// event, data, comments, multi-line data), events collected in order so tests can wait for one
// and assert on everything received before it.
import { KEYS } from './harness.js'

export interface SseEvent {
  id: string | undefined
  event: string
  data: any
}

export class SseClient {
  readonly events: SseEvent[] = []
  ended = false
  private waiters: (() => void)[] = []
  private cursor = 0
  readonly done: Promise<void>

  constructor(
    readonly status: number,
    readonly headers: Headers,
    body: ReadableStream<Uint8Array>,
    private readonly controller: AbortController,
  ) {
    this.done = this.read(body)
  }

  private async read(body: ReadableStream<Uint8Array>) {
    const decoder = new TextDecoder()
    let buffer = ''
    let current: { id?: string; event?: string; data: string[] } = { data: [] }
    try {
      for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true })
        let index: number
        while ((index = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, index).replace(/\r$/, '')
          buffer = buffer.slice(index + 1)
          if (line === '') {
            if (current.data.length || current.event) {
              const text = current.data.join('\n')
              let data: any = text
              try {
                data = JSON.parse(text)
              } catch {}
              this.events.push({ id: current.id, event: current.event ?? 'message', data })
              this.wake()
            }
            current = { data: [] }
            continue
          }
          if (line.startsWith(':')) continue
          const colon = line.indexOf(':')
          const field = colon < 0 ? line : line.slice(0, colon)
          const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '')
          if (field === 'id') current.id = value
          else if (field === 'event') current.event = value
          else if (field === 'data') current.data.push(value)
        }
      }
    } catch {
      // aborted by close()
    } finally {
      this.ended = true
      this.wake()
    }
  }

  private wake() {
    for (const w of this.waiters.splice(0)) w()
  }

  /**
   * Waits for the next event (after the last one returned) matching `name`; returns it. The
   * deadline is generous, as eventually()'s: a loaded 2-core machine is slow, and how fast is bench/'s.
   */
  async next(name?: string | ((e: SseEvent) => boolean), timeoutMs = 15_000): Promise<SseEvent> {
    const match = typeof name === 'function' ? name : (e: SseEvent) => name === undefined || e.event === name
    const deadline = Date.now() + timeoutMs
    while (true) {
      while (this.cursor < this.events.length) {
        const e = this.events[this.cursor++]!
        if (match(e)) return e
      }
      if (this.ended) throw new Error(`stream ended before ${typeof name === 'string' ? name : 'the expected event'}; got ${this.names().join(', ')}`)
      const left = deadline - Date.now()
      if (left <= 0) throw new Error(`timed out waiting for ${typeof name === 'string' ? name : 'an event'}; got ${this.names().join(', ')}`)
      await new Promise<void>(resolve => {
        const timer = setTimeout(resolve, left)
        this.waiters.push(() => {
          clearTimeout(timer)
          resolve()
        })
      })
    }
  }

  /** Waits until the server ends the stream. */
  async ended_(timeoutMs = 15_000) {
    await Promise.race([this.done, new Promise((_, reject) => setTimeout(() => reject(new Error('stream did not end')), timeoutMs).unref())])
  }

  names(filterHeartbeats = true) {
    return this.events.filter(e => !filterHeartbeats || e.event !== 'hearthbeat').map(e => e.event)
  }

  close() {
    this.controller.abort()
  }
}

export interface OpenOptions {
  key?: string | null
  body?: unknown
  headers?: Record<string, string>
}

/** Opens an SSE request; a non-stream answer comes back as { status, json }. */
export async function openSse(
  base: string,
  method: string,
  path: string,
  options: OpenOptions = {},
): Promise<{ status: number; json?: any; stream?: SseClient; headers: Headers }> {
  const controller = new AbortController()
  const headers: Record<string, string> = { accept: 'text/event-stream', ...options.headers }
  if (options.key !== null) headers.apikey = options.key ?? KEYS.acme
  let body: string | undefined
  if (options.body !== undefined) {
    body = JSON.stringify(options.body)
    headers['content-type'] = 'application/json'
  }
  const res = await fetch(base + path, { method, headers, body, signal: controller.signal })
  if (!(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    const text = await res.text()
    let json: any
    try {
      json = text ? JSON.parse(text) : undefined
    } catch {}
    return { status: res.status, json, headers: res.headers }
  }
  return { status: res.status, headers: res.headers, stream: new SseClient(res.status, res.headers, res.body!, controller) }
}

export const CHANNEL = '/assistants-channel/api/v1/channel/api/eventstream'
export const ADMIN = '/engine/api/administration/session'

/**
 * Creates a session on crew `demo` (or `crewId`) and waits for Initialized. With
 * CHANNEL_TRANSPORT=ws the session is opened over the channel's WebSocket instead (the same
 * body), and its stream is the socket: a suite written against SSE runs over both transports.
 */
export async function createSession(base: string, options: OpenOptions & { crewId?: string } = {}): Promise<{ stream: SseClient; sessionId: string; consumerId: string; init: SseEvent }> {
  if (process.env.CHANNEL_TRANSPORT === 'ws') {
    const { createSocketSession } = await import('./ws.js')
    const { socket, ...opened } = await createSocketSession(base, (options.body ?? {}) as Record<string, unknown>, { key: options.key, headers: options.headers, crewId: options.crewId })
    // The socket has what a suite reads of a stream (events, next, names, close), not an HTTP response's status or headers.
    return { stream: socket as unknown as SseClient, ...opened }
  }
  const opened = await openSse(base, 'POST', `${CHANNEL}/${options.crewId ?? 'demo'}`, { body: options.body ?? {}, ...options })
  if (!opened.stream) throw new Error(`session create answered ${opened.status}: ${JSON.stringify(opened.json)}`)
  const init = await opened.stream.next('Initialized')
  return { stream: opened.stream, sessionId: init.data.sessionId as string, consumerId: init.data.consumerId as string, init }
}
