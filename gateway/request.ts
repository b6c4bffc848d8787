// Reading a request off uWebSockets.js: everything on `req` must be copied synchronously
// (it is stack-allocated), body chunks must be copied before onData returns, and bodies are
// capped so a client cannot make us buffer without bound.
import type { HttpRequest, HttpResponse } from './uws.js'
import { ApiError } from './errors.js'

export interface RequestHead {
  method: string
  url: string
  query: URLSearchParams
  headers: Record<string, string>
  params: Record<string, string>
}

export function paramNames(pattern: string): string[] {
  return pattern
    .split('/')
    .filter(segment => segment.startsWith(':'))
    .map(segment => segment.slice(1))
}

export function readHead(req: HttpRequest, names: string[]): RequestHead {
  const headers: Record<string, string> = {}
  req.forEach((key, value) => {
    headers[key] = value
  })
  const params: Record<string, string> = {}
  names.forEach((name, index) => {
    params[name] = decodeURIComponent(req.getParameter(index))
  })
  return {
    method: req.getMethod(),
    url: req.getUrl(),
    query: new URLSearchParams(req.getQuery() ?? ''),
    headers,
    params,
  }
}

const hasBody = (head: RequestHead) =>
  head.headers['transfer-encoding'] !== undefined || Number(head.headers['content-length'] ?? 0) > 0

export const bodyTooLarge = (limit: number) =>
  new ApiError(413, 'PAYLOAD_TOO_LARGE', `Request body exceeds the limit of ${limit} bytes`)

/** Buffers the whole body up to `limit` bytes; rejects with 413 beyond it. */
export function readBody(res: HttpResponse, head: RequestHead, limit: number): Promise<Buffer> {
  if (!hasBody(head)) return Promise.resolve(Buffer.alloc(0))
  const declared = Number(head.headers['content-length'] ?? 0)
  if (declared > limit) return Promise.reject(bodyTooLarge(limit))
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    let failed = false
    res.onData((chunk, isLast) => {
      if (failed) return
      size += chunk.byteLength
      if (size > limit) {
        failed = true
        reject(bodyTooLarge(limit))
        return
      }
      chunks.push(Buffer.from(chunk.slice(0)))
      if (isLast) resolve(Buffer.concat(chunks, size))
    })
  })
}

/**
 * Streams the body with backpressure: uWS is paused while the consumer lags behind. Created
 * synchronously in the request handler (uWS drops data that arrives before onData is set).
 */
export class BodyStream implements AsyncIterable<Buffer> {
  private readonly queue: Buffer[] = []
  private done: boolean
  private error: Error | undefined
  private wake: (() => void) | undefined
  private size = 0
  private paused = false

  constructor(private readonly res: HttpResponse, head: RequestHead, limit: number) {
    this.done = !hasBody(head)
    if (this.done) return
    res.onData((chunk, isLast) => {
      this.size += chunk.byteLength
      if (this.size > limit) {
        this.error = bodyTooLarge(limit)
      } else {
        this.queue.push(Buffer.from(chunk.slice(0)))
        if (this.queue.length >= 16 && !this.paused) {
          this.paused = true
          res.pause()
        }
      }
      if (isLast) this.done = true
      this.wake?.()
    })
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Buffer> {
    while (true) {
      if (this.error) throw this.error
      const next = this.queue.shift()
      if (next) {
        if (this.paused && this.queue.length < 4) {
          this.paused = false
          this.res.resume()
        }
        yield next
        continue
      }
      if (this.done) return
      await new Promise<void>(resolve => (this.wake = resolve))
      this.wake = undefined
    }
  }
}
