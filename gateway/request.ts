// Reading a request off uWebSockets.js: everything on `req` must be copied synchronously
// (it is stack-allocated), body chunks must be copied before onData returns, and bodies are
// capped so a client cannot make us buffer without bound.
import type { HttpRequest, HttpResponse } from './uws.js'
import { ApiError } from '../platform/http.js'
import { Invalid } from '../platform/errors.js'

export interface RequestHead {
  method: string
  url: string
  readonly query: URLSearchParams
  /** The query string as sent (without `?`): what a signature over the URL covers. */
  rawQuery: string
  headers: Record<string, string>
  params: Record<string, string>
  /**
   * The client's address (the peer, or the forwarded client when the peer is a trusted proxy).
   * Read when first asked for: uWS asks the kernel (getpeername) each time, ~6 µs, and most
   * requests never need it. Empty when asked after the client went away.
   */
  readonly remoteAddress: string
  /** Set when the head cannot be served (bad percent-encoding, ambiguous framing): answered before auth. */
  problem?: ApiError
  /** The connection cannot be trusted to carry another request (ambiguous body framing). */
  closeConnection?: boolean
}

export function paramNames(pattern: string): string[] {
  return pattern
    .split('/')
    .filter(segment => segment.startsWith(':'))
    .map(segment => segment.slice(1))
}

export const invalidUrlEncoding = (where: string) =>
  new ApiError(400, 'INVALID_URL_ENCODING', `The request ${where} contains a malformed percent-encoding (e.g. %E0%A4%A or %zz)`)

/** decodeURIComponent without the throw: undefined when the text is not valid percent-encoded UTF-8. */
export function tryDecode(text: string): string | undefined {
  if (!text.includes('%')) return text
  try {
    return decodeURIComponent(text)
  } catch {
    return undefined
  }
}

const decoder = new TextDecoder()

/**
 * Copies everything the request needs off uWS's stack-allocated `req` (and the peer address off
 * `res`). Never throws on client input: what cannot be served is reported in `problem`.
 */
export interface HeadLimits {
  trustedProxies: ReadonlySet<string>
  /** Path plus query, in bytes as sent (still percent-encoded). */
  maxUrlBytes: number
  /** Sum of header names and values. */
  maxHeaderBytes: number
}

export const DEFAULT_HEAD_LIMITS: HeadLimits = { trustedProxies: new Set(), maxUrlBytes: 8 * 1024, maxHeaderBytes: 16 * 1024 }

export function readHead(req: HttpRequest, res: HttpResponse, names: string[], limits: HeadLimits = DEFAULT_HEAD_LIMITS): RequestHead {
  const headers: Record<string, string> = {}
  let problem: ApiError | undefined
  let closeConnection = false
  let headerBytes = 0
  req.forEach((key, value) => {
    headerBytes += key.length + value.length
    const previous = headers[key]
    // uWS frames the body by the first Content-Length; a second, different one is a smuggling
    // attempt or a broken client (RFC 9112 6.3): refuse it and close the connection.
    if (key === 'content-length' && previous !== undefined && previous !== value) {
      problem = new ApiError(400, 'INVALID_HEADER', 'Conflicting Content-Length headers')
      closeConnection = true
      return
    }
    if (previous === undefined) headers[key] = value
  })
  const url = req.getUrl()
  const rawQuery = req.getQuery() ?? ''
  // uWS takes any head that arrives in one read (up to its 512 KiB buffer); ours are smaller.
  if (url.length + rawQuery.length > limits.maxUrlBytes) {
    problem ??= new ApiError(414, 'URI_TOO_LONG', `The request URL exceeds ${limits.maxUrlBytes} bytes`)
  }
  if (headerBytes > limits.maxHeaderBytes) {
    problem ??= new ApiError(431, 'HEADERS_TOO_LARGE', `The request headers exceed ${limits.maxHeaderBytes} bytes`)
  }
  const params: Record<string, string> = {}
  names.forEach((name, index) => {
    const raw = req.getParameter(index)
    const decoded = tryDecode(raw)
    if (decoded === undefined) problem ??= invalidUrlEncoding('path')
    params[name] = decoded ?? raw
  })
  if (!problem && tryDecode(url) === undefined) problem = invalidUrlEncoding('path')
  // URLSearchParams silently turns a bad escape into U+FFFD; a client that sent one gets told.
  if (!problem && tryDecode(rawQuery.replace(/\+/g, ' ')) === undefined) problem = invalidUrlEncoding('query string')
  let remoteAddress: string | undefined
  let query: URLSearchParams | undefined
  return {
    method: req.getMethod(),
    url,
    rawQuery,
    // Parsed when first read: most requests (a message, a listen) have no query string.
    get query() {
      return (query ??= new URLSearchParams(rawQuery))
    },
    headers,
    params,
    get remoteAddress() {
      return (remoteAddress ??= clientAddress(res, headers, limits.trustedProxies))
    },
    ...(problem ? { problem, closeConnection } : {}),
  }
}

/** The peer's address; behind a trusted proxy, the nearest X-Forwarded-For hop that is not one. */
function clientAddress(res: HttpResponse, headers: Record<string, string>, trustedProxies: ReadonlySet<string>): string {
  let peer: string
  try {
    peer = decoder.decode(res.getRemoteAddressAsText())
  } catch {
    return '' // the response is gone (aborted): uWS refuses any call on it
  }
  if (!trustedProxies.has(peer) || !headers['x-forwarded-for']) return peer
  const hops = headers['x-forwarded-for'].split(',').map(h => h.trim()).filter(Boolean)
  for (let i = hops.length - 1; i >= 0; i--) if (!trustedProxies.has(hops[i]!)) return hops[i]!.slice(0, 64)
  return peer
}

const hasBody = (head: RequestHead) =>
  head.headers['transfer-encoding'] !== undefined || Number(head.headers['content-length'] ?? 0) > 0

export const bodyTooLarge = (limit: number) =>
  new ApiError(413, 'PAYLOAD_TOO_LARGE', `Request body exceeds the limit of ${limit} bytes`, { maxBytes: limit })

/**
 * Buffers the whole body up to `limit` bytes; rejects with 413 beyond it. A body over the limit
 * is refused as soon as it crosses it (nothing more is kept) but its rest is still read and
 * dropped, up to `drainBytes` more and `drainMs`, before the 413 goes out: an answer sent while
 * the client still sends makes uWS close the connection under it, and the client sees a reset
 * instead of the answer. Past either bound (or a body declared beyond it) the 413 goes out at
 * once and the connection is closed.
 */
export function readBody(res: HttpResponse, head: RequestHead, limit: number, drainBytes = limit, drainMs = 2000): Promise<Buffer> {
  if (!hasBody(head)) return Promise.resolve(Buffer.alloc(0))
  const declared = Number(head.headers['content-length'] ?? 0)
  if (declared > limit + drainBytes) {
    head.closeConnection = true
    return Promise.reject(bodyTooLarge(limit))
  }
  return new Promise((resolve, reject) => {
    // Sized: one buffer of its length, each chunk copied into it (no second copy to join them).
    let whole = declared > 0 && declared <= limit ? Buffer.allocUnsafe(declared) : undefined
    const chunks: Buffer[] = []
    let size = 0
    let over = false
    let settled = false
    let timer: NodeJS.Timeout | undefined
    const fail = (error: unknown) => {
      settled = true
      chunks.length = 0
      whole = undefined
      clearTimeout(timer)
      reject(error)
    }
    const refuse = () => {
      over = true
      chunks.length = 0
      whole = undefined
      timer = setTimeout(() => {
        head.closeConnection = true
        if (!settled) fail(bodyTooLarge(limit))
      }, drainMs)
    }
    if (declared > limit) refuse()
    res.onData((chunk, isLast) => {
      if (settled) return
      // A throw here would surface in uWS's native callback as an uncaught exception.
      try {
        size += chunk.byteLength
        if (!over && size > limit) refuse()
        if (over) {
          if (isLast) return fail(bodyTooLarge(limit))
          if (size > limit + drainBytes) {
            head.closeConnection = true
            fail(bodyTooLarge(limit))
          }
          return
        }
        // Copied now: uWS reuses the chunk's memory once this returns.
        if (whole) {
          whole.set(new Uint8Array(chunk), size - chunk.byteLength)
          if (isLast) resolve(size === whole.length ? whole : whole.subarray(0, size))
          return
        }
        const copy = Buffer.from(chunk.slice(0))
        if (isLast && chunks.length === 0) return resolve(copy)
        chunks.push(copy)
        if (isLast) resolve(Buffer.concat(chunks, size))
      } catch (error) {
        fail(error)
      }
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
      // A throw here would surface in uWS's native callback as an uncaught exception.
      try {
        this.size += chunk.byteLength
        if (this.size > limit) {
          this.error = bodyTooLarge(limit)
        } else if (!this.error) {
          this.queue.push(Buffer.from(chunk.slice(0)))
          if (this.queue.length >= 16 && !this.paused) {
            this.paused = true
            res.pause()
          }
        }
      } catch (error) {
        this.error = error as Error
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

  /**
   * Reads and drops what is left of the body, up to `maxBytes` more and `ms`: an answer sent
   * while the client still sends makes uWS close the connection under it (the client then sees
   * a reset, not the answer). Past either bound the answer goes out anyway.
   */
  async drain(maxBytes: number, ms: number): Promise<void> {
    const until = Date.now() + ms
    const start = this.size
    const timer = setTimeout(() => this.wake?.(), ms)
    try {
      while (!this.done && !this.error && this.size - start <= maxBytes && Date.now() < until) {
        this.queue.length = 0
        if (this.paused) {
          this.paused = false
          this.res.resume()
        }
        await new Promise<void>(resolve => (this.wake = resolve))
        this.wake = undefined
      }
    } finally {
      clearTimeout(timer)
    }
  }
}

const OPEN_BRACE = 0x7b
const OPEN_BRACKET = 0x5b
const CLOSE_BRACE = 0x7d
const CLOSE_BRACKET = 0x5d
const QUOTE = 0x22
const BACKSLASH = 0x5c
const COMMA = 0x2c
const COLON = 0x3a

/** What a JSON body may hold before it is parsed: its nesting, and the route's bounds (schemas/body-bounds.ts). */
export interface JsonShapeLimits {
  maxDepth: number
  /** Keys plus array elements. */
  maxValues?: number
  /** Bytes of the longest string, key or value, quotes included. */
  maxStringBytes?: number
}

/**
 * Which bound of `limits` the JSON text breaks, or undefined. One linear pass over the bytes (no
 * recursion), so it is safe on any input, and it stops at the first bound broken: JSON.parse and
 * everything after it (schema validation, serialization, persistence) recurse and overflow the
 * stack on deep enough values, and cost in proportion to the values and string lengths they
 * meet. Values are counted by their separators: an object of k keys has k colons and k - 1
 * commas, an array of n elements n - 1 commas, so a body of v values has at most 2 v. Brackets
 * and separators inside strings do not count; UTF-8 continuation bytes never equal these ASCII bytes.
 */
export function jsonShapeBreaks(bytes: Buffer, limits: JsonShapeLimits): 'depth' | 'values' | 'string' | undefined {
  const maxSeparators = 2 * (limits.maxValues ?? Infinity)
  const maxString = limits.maxStringBytes ?? Infinity
  let depth = 0
  let separators = 0
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i]
    if (byte === QUOTE) {
      // Skip the string natively (memchr): its end is the next quote not escaped by an odd run of backslashes.
      let end = bytes.indexOf(QUOTE, i + 1)
      while (end !== -1) {
        let slashes = 0
        while (bytes[end - 1 - slashes] === BACKSLASH) slashes++
        if (slashes % 2 === 0) break
        end = bytes.indexOf(QUOTE, end + 1)
      }
      if (end === -1) return undefined // unterminated: JSON.parse reports it
      if (end - i + 1 > maxString) return 'string'
      i = end
    } else if (byte === COMMA || byte === COLON) {
      if (++separators > maxSeparators) return 'values'
    } else if (byte === OPEN_BRACE || byte === OPEN_BRACKET) {
      if (++depth > limits.maxDepth) return 'depth'
    } else if (byte === CLOSE_BRACE || byte === CLOSE_BRACKET) depth--
  }
  return undefined
}

/** True when the JSON text nests objects/arrays deeper than `max` (jsonShapeBreaks, depth alone). */
export function jsonDeeperThan(bytes: Buffer, max: number): boolean {
  return jsonShapeBreaks(bytes, { maxDepth: max }) === 'depth'
}

export const jsonTooDeep = (max: number) =>
  new Invalid('JSON_TOO_DEEP', `The request body nests objects and arrays deeper than ${max} levels`, { maxDepth: max })

const tooManyValues = (max: number) =>
  new ApiError(413, 'PAYLOAD_TOO_LARGE', `The request body holds more keys and elements than this route takes (at most ${max})`, { maxValues: max })

const stringTooLong = (max: number) =>
  new ApiError(413, 'PAYLOAD_TOO_LARGE', `The request body holds a string longer than this route takes (at most ${max} bytes)`, { maxStringBytes: max })

/**
 * Parses a JSON body: empty is undefined; too deep, malformed or unparseable is Invalid (a 400);
 * more values or a longer string than the route takes is a 413, before parsing.
 */
export function parseJsonBody(body: Buffer, limits: number | JsonShapeLimits): unknown {
  if (body.length === 0) return undefined
  const shape = typeof limits === 'number' ? { maxDepth: limits } : limits
  const broken = jsonShapeBreaks(body, shape)
  if (broken === 'depth') throw jsonTooDeep(shape.maxDepth)
  if (broken === 'values') throw tooManyValues(shape.maxValues!)
  if (broken === 'string') throw stringTooLong(shape.maxStringBytes!)
  try {
    return JSON.parse(body.toString('utf8'))
  } catch {
    throw new Invalid('INVALID_JSON', 'The request body is not valid JSON')
  }
}
