// A thin, safe wrapper over one uWebSockets.js response: every write is corked, nothing is
// written after the client went away, and streams honour backpressure.
import { STATUS_CODES } from 'node:http'
import type { HttpResponse } from './uws.js'
import type { StreamSink } from './routes.js'

export const statusLine = (status: number) => `${status} ${STATUS_CODES[status] ?? 'Unknown'}`

export class Reply {
  aborted = false
  finished = false
  private readonly abortListeners: (() => void)[] = []
  readonly abortedPromise: Promise<void>

  constructor(readonly res: HttpResponse) {
    this.abortedPromise = new Promise(resolve => this.abortListeners.push(resolve))
    res.onAborted(() => {
      this.aborted = true
      for (const listener of this.abortListeners.splice(0)) listener()
    })
  }

  onAbort(listener: () => void) {
    if (this.aborted) listener()
    else this.abortListeners.push(listener)
  }

  send(status: number, body: string | Buffer | undefined, headers: Record<string, string>) {
    if (this.aborted || this.finished) return
    this.finished = true
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status))
      for (const [name, value] of Object.entries(headers)) this.res.writeHeader(name, value)
      if (body === undefined) this.res.endWithoutBody(0)
      else this.res.end(body)
    })
  }

  json(status: number, body: unknown, headers: Record<string, string> = {}) {
    const noBody = body === undefined || status === 204
    this.send(status, noBody ? undefined : JSON.stringify(body), noBody ? headers : { 'Content-Type': 'application/json', ...headers })
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

  constructor(private readonly reply: Reply, headers: Record<string, string>, private readonly maxBufferedBytes: number) {
    reply.finished = true
    reply.onAbort(() => this.fireClose())
    if (reply.aborted) return
    reply.res.cork(() => {
      reply.res.writeStatus(statusLine(200))
      for (const [name, value] of Object.entries(headers)) reply.res.writeHeader(name, value)
      // Send the headers now so the client sees the stream open before the first event.
      reply.res.write('')
    })
    reply.res.onWritable(() => this.drain())
  }

  get closed() {
    return this.ended || this.reply.aborted
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
    this.reply.res.cork(() => {
      this.backpressured = !this.reply.res.write(chunk)
    })
    return true
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
    this.reply.res.cork(() => {
      for (const chunk of this.queue.splice(0)) this.reply.res.write(chunk)
      this.reply.res.end()
    })
    this.fireClose()
  }

  abandon(last: string) {
    if (this.closed) return
    this.queue = []
    this.queuedBytes = 0
    this.ended = true
    this.reply.res.cork(() => {
      this.reply.res.write(last)
      this.reply.res.end()
    })
    this.fireClose()
  }

  private fireClose() {
    for (const listener of this.closeListeners.splice(0)) listener()
  }
}
