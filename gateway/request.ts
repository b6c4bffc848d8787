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

/** Streams the body with backpressure: uWS is paused while the consumer lags behind. */
export async function* streamBody(res: HttpResponse, head: RequestHead, limit: number): AsyncGenerator<Buffer> {
  if (!hasBody(head)) return
  const queue: Buffer[] = []
  let done = false
  let error: Error | undefined
  let wake: (() => void) | undefined
  let size = 0
  let paused = false
  res.onData((chunk, isLast) => {
    size += chunk.byteLength
    if (size > limit) {
      error = bodyTooLarge(limit)
    } else {
      queue.push(Buffer.from(chunk.slice(0)))
      if (queue.length >= 16 && !paused) {
        paused = true
        res.pause()
      }
    }
    if (isLast) done = true
    wake?.()
  })
  while (true) {
    if (error) throw error
    const next = queue.shift()
    if (next) {
      if (paused && queue.length < 4) {
        paused = false
        res.resume()
      }
      yield next
      continue
    }
    if (done) return
    await new Promise<void>(resolve => (wake = resolve))
    wake = undefined
  }
}
