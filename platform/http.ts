// The HTTP contract between the modules and the gateway: the route tables a module hands the
// gateway, the answers its handlers return, and how a domain error (platform/errors.ts) becomes
// an HTTP answer. Handlers never see uWebSockets.js; they get a plain request and return a
// result (or, for streams, drive a StreamSink). Route tables and HTTP adapters import this file;
// the modules' own logic imports platform/errors.ts and never learns a status code.
import { DomainError, type ErrorKind } from './errors.js'
import type { Principal, Role } from './principal.js'
import type { BodyOf, RequestSchemaId } from '../schemas/index.js'

export type { Principal, Role } from './principal.js'
export type Method = 'get' | 'post' | 'put' | 'patch' | 'del'

export interface RequestContext<Body = unknown> {
  method: string
  url: string
  params: Record<string, string>
  query: URLSearchParams
  /** Lower-cased header names. */
  headers: Record<string, string>
  body: Buffer
  principal: Principal
  requestId: string
  /** Parses the body as JSON; an empty body is `undefined`; malformed JSON is a 400. */
  json(): unknown
  /** The body, validated against the route's `requestSchema` before the handler runs (undefined without one). */
  input: Body
  /** Resolves when the client goes away (stream routes use it to clean up). */
  aborted: Promise<void>
}

export interface JsonResult {
  status: number
  body?: unknown
  headers?: Record<string, string>
}

/** A long-lived response (SSE). The handler writes frames; the gateway handles backpressure. */
export interface StreamSink {
  /** Returns false when the client buffer is over its limit (the caller should drop it). */
  write(chunk: string): boolean
  end(): void
  readonly closed: boolean
  onClose(listener: () => void): void
  /** Discards what is queued for a client that cannot keep up, writes `last` and ends. */
  abandon?(last: string): void
  /** Reports a fault in code writing to this stream (the gateway logs and counts it). */
  reportFault?(error: unknown): void
}

interface RouteBase {
  method: Method
  /** uWebSockets.js pattern, e.g. /dialer/v1/batches/:batchId */
  path: string
  summary: string
  tag: string
  /** Role required; `null` means no API key (health, signed uploads). */
  role: Role | null
  /**
   * The request body's JSON Schema (schemas/): the gateway validates the body against it before
   * the handler runs (400 VALIDATION_FAILED listing every problem) and hands the handler the
   * typed `ctx.input`; the OpenAPI document publishes it.
   */
  requestSchema?: RequestSchemaId
  /** An absent body stands for `{}` (and is validated as such); otherwise it is a 400. */
  bodyOptional?: boolean
  /**
   * The handler checks the body against `requestSchema` itself: a contact load of up to 1,000
   * contacts is validated off the event loop, with each problem's contact index.
   */
  bodyCheckedByHandler?: boolean
  responses?: Record<string, { description: string; schema?: string }>
  /** Headers this route requires beyond `apikey` (e.g. UserId), documented in OpenAPI. */
  requiredHeaders?: string[]
}

export interface JsonRoute<Body = unknown> extends RouteBase {
  kind?: 'json'
  /** Runs before the body is validated: checks that come first (a webhook's signature over the raw bytes, a required header). */
  preValidation?(ctx: RequestContext): void
  /**
   * Wraps validation and the handler: `next` validates the body and runs `handle`. An
   * idempotent write stores what it answers here, a 400 for an invalid body included.
   */
  around?(ctx: RequestContext, next: () => Promise<JsonResult>): Promise<JsonResult>
  handle(ctx: RequestContext<Body>): Promise<JsonResult>
}

/** Receives the body as a stream of chunks (uploads); nothing is buffered whole. */
export interface UploadRoute extends RouteBase {
  kind: 'upload'
  handle(ctx: Omit<RequestContext, 'body' | 'json'>, body: AsyncIterable<Buffer>): Promise<JsonResult>
}

export interface StreamRoute<Body = unknown> extends RouteBase {
  kind: 'stream'
  /** Runs before the body is validated (see JsonRoute). */
  preValidation?(ctx: RequestContext): void
  /** Called once the body is read and valid. Throwing (an ApiError or a DomainError) before the first write answers JSON. */
  open(ctx: RequestContext<Body>, start: (headers?: Record<string, string>) => StreamSink): Promise<void>
}

/**
 * One WebSocket as the gateway hands it to a module: text frames out, a close with a code. The
 * gateway owns the uWS socket (its limits, its pings, its faults); the module only its protocol.
 */
export interface SocketLink {
  /** Sends one text frame; false once more than the socket's buffer bound waits to go out. */
  send(text: string): boolean
  /** Runs `work`'s sends as one write. */
  batch(work: () => void): void
  /** Sends a close frame (the reason is cut to the 123 bytes a close frame holds); nothing more goes out. */
  close(code: number, reason: string): void
  readonly closed: boolean
  /** Reports a fault in code serving this socket (the gateway logs and counts it). */
  reportFault(error: unknown): void
}

/** What a module does with one upgraded socket; the gateway calls each inside its error boundary. */
export interface SocketHandler {
  opened(link: SocketLink): void
  /** A text frame within the size limit, valid UTF-8 (the gateway closes on anything else). */
  message(text: string): void
  /** The socket is gone (closed by either side); `code` as received or sent. */
  closed(code: number): void
}

/** What a socket may do beyond its account: a ticket names the crew or the session it is for. */
export interface SocketScope {
  crewId?: string
  sessionId?: string
}

export interface SocketContext extends Omit<RequestContext, 'body' | 'json' | 'input'> {
  /** Set when the upgrade was authenticated by a ticket rather than an API key. */
  scope?: SocketScope
  /** The query string as sent (without `?`), for a signature over the whole URL. */
  rawQuery: string
}

/**
 * A WebSocket endpoint (GET with Upgrade). The gateway answers the handshake: bad URL, no
 * credentials (401), missing role or an Origin not allowed (403) are HTTP answers, as is any
 * throw of `accept`; past it the module speaks over the socket.
 */
export interface SocketRoute extends Omit<RouteBase, 'method'> {
  kind: 'socket'
  method: 'get'
  /**
   * Authenticates an upgrade that carries no apikey header: a ticket in the query or offered as
   * a subprotocol (`protocols`, as offered). Null: 401. Never sees an API key.
   */
  authenticate?(request: { query: URLSearchParams; protocols: string[] }): Promise<{ principal: Principal; scope: SocketScope } | null>
  /** The subprotocol to answer with, among those offered (browsers fail a handshake that offered some and got none). */
  protocol?(offered: string[]): string | undefined
  /** Checks the upgrade's parameters; its handler, or a throw (answered as HTTP). */
  accept(ctx: SocketContext): SocketHandler | Promise<SocketHandler>
}

export type Route = JsonRoute | UploadRoute | StreamRoute | SocketRoute

/**
 * A JSON route whose handler reads a body of the type its `requestSchema` describes (the type
 * is derived from the schema itself: schemas/index.ts, BodyOf).
 */
export function jsonRoute<Id extends RequestSchemaId>(route: JsonRoute<BodyOf<Id>> & { requestSchema: Id }): JsonRoute {
  return route as unknown as JsonRoute
}

/** A stream route whose opener reads a body of its `requestSchema`'s type. */
export function streamRoute<Id extends RequestSchemaId>(route: StreamRoute<BodyOf<Id>> & { requestSchema: Id }): StreamRoute {
  return route as unknown as StreamRoute
}

/** What each module (dialer, engine, reports) exposes to the service that assembles them. */
export interface ServiceModule {
  readonly name: string
  readonly routes: Route[]
  /** Creates indexes, starts workers. */
  start(): Promise<void>
  /** Stops workers and timers; in-flight work finishes or is left for redelivery. */
  stop(): Promise<void>
}

/**
 * An error that already is an HTTP answer: what the gateway itself refuses (framing, limits,
 * auth) and what HTTP adapters decide (idempotency keys). Its body is { code, message, ...extra }.
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message)
  }

  body() {
    return { code: this.code, message: this.message, ...this.extra }
  }
}

/** The one table from a domain error's kind to its HTTP status. */
export const HTTP_STATUS: Readonly<Record<ErrorKind, number>> = {
  invalid: 400,
  unauthenticated: 401,
  forbidden: 403,
  not_found: 404,
  expired: 410,
  invalid_state: 409,
  unsupported: 415,
  limit_reached: 429,
  internal: 500,
  unavailable: 503,
  timed_out: 504,
}

/**
 * The HTTP answer of an error: an ApiError as it is, a domain error by its kind (Retry-After
 * when it says when to retry); undefined for anything else (a fault: 500 at the gateway).
 */
export function httpError(error: unknown): ApiError | undefined {
  if (error instanceof ApiError) return error
  if (!(error instanceof DomainError)) return undefined
  const headers = error.retryAfterSeconds === undefined ? undefined : { 'Retry-After': String(error.retryAfterSeconds) }
  return new ApiError(HTTP_STATUS[error.kind], error.code, error.message, error.extra, headers)
}
