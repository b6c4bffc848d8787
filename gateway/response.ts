// A thin, safe wrapper over one uWebSockets.js response: every write is corked, nothing is
// written after the client went away, and streams honour backpressure.
import { STATUS_CODES } from 'node:http'
import type { HttpResponse } from './uws.js'
import type { StreamSink } from '../platform/http.js'

export const statusLine = (status: number) => `${status} ${STATUS_CODES[status] ?? 'Unknown'}`

export class Reply {
  aborted = false
  finished = false
  private readonly abortListeners: (() => void)[] = []
  private aborts: Promise<void> | null = null

  /** `onFault` hears what went wrong in a callback uWS calls (logged and counted by the gateway). */
  constructor(readonly res: HttpResponse, readonly onFault: (error: unknown) => void = () => {}) {
    res.onAborted(() => {
      this.aborted = true
      for (const listener of this.abortListeners.splice(0)) {
        // One listener's fault must not skip the others (nor surface in uWS's native callback).
        try {
          listener()
        } catch (error) {
          this.onFault(error)
        }
      }
    })
  }

  /** Resolves when the client goes away; made when first asked for (few requests ever ask). */
  get abortedPromise(): Promise<void> {
    return (this.aborts ??= new Promise(resolve => this.onAbort(resolve)))
  }

  onAbort(listener: () => void) {
    if (this.aborted) listener()
    else this.abortListeners.push(listener)
  }

  /** Writes the whole response; `closeConnection` when the connection cannot carry another request. */
  send(status: number, body: string | Buffer | undefined, headers: Record<string, string>, closeConnection = false) {
    if (this.aborted || this.finished) return
    this.finished = true
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status))
      for (const [name, value] of Object.entries(headers)) this.res.writeHeader(name, value)
      if (body === undefined) this.res.endWithoutBody(0, closeConnection)
      else this.res.end(body, closeConnection)
    })
  }

  /** Serializes first (a value that cannot be serialized throws before anything is written). */
  json(status: number, body: unknown, headers: Record<string, string> = {}) {
    const noBody = body === undefined || status === 204
    this.send(status, noBody ? undefined : JSON.stringify(body), noBody ? headers : { 'Content-Type': 'application/json', ...headers })
  }

  /** An already serialized JSON error body. */
  error(status: number, text: string, headers: Record<string, string>, closeConnection = false) {
    this.send(status, text, { 'Content-Type': 'application/json', ...headers }, closeConnection)
  }

  /** Answers the handshake with 101 and hands the connection to uWS's WebSocket; false when the client went away. */
  upgrade<T>(userData: T, key: string, protocol: string, extensions: string, context: unknown): boolean {
    if (this.aborted || this.finished) return false
    this.finished = true
    this.res.cork(() => this.res.upgrade(userData, key, protocol, extensions, context as never))
    return true
  }

  /** Drops the connection (a stream that broke after its head was sent cannot answer JSON). */
  close() {
    if (this.aborted) return
    this.finished = true
    this.res.close()
  }

  /** Switches the response into a long-lived stream with a bounded outgoing buffer. */
  stream(headers: Record<string, string>, maxBufferedBytes: number): StreamSink {
    return new ResponseStream(this, headers, maxBufferedBytes)
  }
}

class ResponseStream implements StreamSink {
  private queue: string[] = []
  private queuedBytes = 0
  private backpressured = false
  private ended = false
  private readonly closeListeners: (() => void)[] = []

  /**
   * Status and headers not written yet. They go out with the first frame, in the same send: uWS
   * ends a chunked head (Transfer-Encoding, the blank line) only with the first bytes of body,
   * so a head sent alone before it would be one more syscall per stream that the client could
   * not parse anyway (every stream's first frame follows at once: `Initialized`, an attach notice).
   */
  private head: Record<string, string> | null

  constructor(private readonly reply: Reply, headers: Record<string, string>, private readonly maxBufferedBytes: number) {
    this.head = headers
    reply.finished = true
    reply.onAbort(() => this.fireClose())
    if (reply.aborted) return
    reply.res.onWritable(() => {
      // Runs in uWS's native callback: a throw there would be an uncaught exception.
      try {
        return this.drain()
      } catch (error) {
        this.fail(error)
        return true
      }
    })
  }

  get closed() {
    return this.ended || this.reply.aborted
  }

  /** Inside a cork: the status and headers, once. */
  private writeHead() {
    if (!this.head) return
    this.reply.res.writeStatus(statusLine(200))
    for (const [name, value] of Object.entries(this.head)) this.reply.res.writeHeader(name, value)
    this.head = null
  }

  reportFault(error: unknown) {
    this.reply.onFault(error)
  }

  onClose(listener: () => void) {
    if (this.closed) listener()
    else this.closeListeners.push(listener)
  }

  write(chunk: string): boolean {
    if (this.closed) return false
    if (this.backpressured) {
      this.queue.push(chunk)
      this.queuedBytes += Buffer.byteLength(chunk)
      return this.queuedBytes <= this.maxBufferedBytes
    }
    try {
      this.reply.res.cork(() => {
        this.writeHead()
        this.backpressured = !this.reply.res.write(chunk)
      })
    } catch (error) {
      this.fail(error)
      return false
    }
    return true
  }

  /** A write the socket refused: the stream is over for this client (it resumes with Last-Event-ID). */
  private fail(error: unknown) {
    this.reply.onFault(error)
    if (this.closed) return
    this.ended = true
    this.queue = []
    this.queuedBytes = 0
    try {
      this.reply.close()
    } catch {
      // already gone
    }
    this.fireClose()
  }

  private drain(): boolean {
    if (this.closed) return true
    this.backpressured = false
    this.reply.res.cork(() => {
      while (this.queue.length > 0 && !this.backpressured) {
        const chunk = this.queue.shift()!
        this.queuedBytes -= Buffer.byteLength(chunk)
        this.backpressured = !this.reply.res.write(chunk)
      }
    })
    return true
  }

  end() {
    if (this.closed) return
    this.ended = true
    // uWebSockets.js keeps what it cannot send yet, so queued frames still reach the client.
    try {
      this.reply.res.cork(() => {
        this.writeHead()
        for (const chunk of this.queue.splice(0)) this.reply.res.write(chunk)
        this.reply.res.end()
      })
    } catch (error) {
      this.reply.onFault(error)
    }
    this.fireClose()
  }

  abandon(last: string) {
    if (this.closed) return
    this.queue = []
    this.queuedBytes = 0
    this.ended = true
    try {
      this.reply.res.cork(() => {
        this.writeHead()
        this.reply.res.write(last)
        this.reply.res.end()
      })
    } catch (error) {
      this.reply.onFault(error)
    }
    this.fireClose()
  }

  private fireClose() {
    for (const listener of this.closeListeners.splice(0)) {
      try {
        listener()
      } catch (error) {
        this.reply.onFault(error)
      }
    }
  }
}
