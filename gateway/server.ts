// The HTTP edge: registers every module's route table on one uWebSockets.js app, and does the
// cross-cutting work once: auth and roles, body limits, the error envelope, metrics, request
// ids. Handlers stay tiny and never touch uWS objects.
//
// The error boundary lives here: every uWS callback (request handler, body chunks, writable,
// abort) is guarded, every request's promise ends in `fail`, and `fail` itself cannot throw. A
// throw inside a uWS handler is otherwise an uncaught exception (the process exits by default),
// and returning from a handler before onAborted is attached makes uWS abort the process.
import { randomUUID } from 'node:crypto'
import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket, UwsModule } from './uws.js'
import { serializeErrorBody } from './errors.js'
import type { KeyRegistry } from './auth.js'
import type { AuthThrottle } from './auth-throttle.js'
import { BodyStream, DEFAULT_HEAD_LIMITS, paramNames, parseJsonBody, readBody, readHead, type HeadLimits, type RequestHead } from './request.js'
import { Reply } from './response.js'
import { mountConsole } from './static.js'
import { bodyLimitsOf, validatedInput, type BodyLimits } from './validation.js'
import { ApiError, httpError, type JsonResult, type RequestContext, type Route, type SocketLink, type SocketRoute, type StreamSink } from '../platform/http.js'
import { offeredProtocols, originAllowed, SOCKET_CLOSE, socketBehavior, type SocketData, type SocketLimits } from './websocket.js'
import type { Principal } from '../platform/principal.js'
import type { SocketContext } from '../platform/http.js'
import type { Logger } from '../platform/logger.js'
import type { Metrics } from '../platform/metrics.js'
import { settledWithin } from '../platform/timing.js'

export interface GatewayOptions {
  uws: UwsModule
  routes: Route[]
  keys: KeyRegistry
  metrics: Metrics
  logger: Logger
  maxBodyBytes: number
  maxUploadBytes: number
  /** JSON bodies nesting objects/arrays deeper than this are refused before parsing (400 JSON_TOO_DEEP). */
  maxJsonDepth: number
  streamBufferBytes: number
  /** Repeated unknown keys from one address: 429 with Retry-After. */
  authThrottle: AuthThrottle
  /** Peers whose X-Forwarded-For names the client (reverse proxies in front of the gateway). */
  trustedProxies?: ReadonlySet<string>
  /** URL and header size limits answered by us (414, 431) for heads the uWS parser accepted. */
  maxUrlBytes?: number
  maxHeaderBytes?: number
  /** Extra unauthenticated JSON documents, e.g. /healthz and /openapi.json. */
  publicDocuments: Record<string, () => Promise<{ status: number; body: unknown }>>
  /** Built operator console to serve at /console/ (gateway/static.ts). */
  consoleDir?: string
  /** WebSocket routes: their limits, and the browser origins that may open one (`*`: any). */
  sockets?: SocketLimits & { allowedOrigins: readonly string[] }
}

const DEFAULT_SOCKETS: NonNullable<GatewayOptions['sockets']> = { maxFrameBytes: 64 * 1024, idleTimeoutSeconds: 60, bufferBytes: 1024 * 1024, allowedOrigins: [] }

const ANONYMOUS: Principal = { keyId: 'anonymous', keyName: 'anonymous', accountId: '', roles: new Set() }
const UNMATCHED = '(unmatched)'
/** A client's X-Request-Id is echoed and logged only when it is short and plain. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/
const NO_BYTES = Buffer.alloc(0)
const NO_BODY: Promise<Buffer> = Promise.resolve(NO_BYTES)

/** One request on its way through the gateway: what fail/finish need to answer and account. */
interface Exchange {
  reply: Reply
  head?: RequestHead
  requestId: string
  route: string
  started: bigint
  sink?: StreamSink
}

const STANDARD_METHODS = new Set(['get', 'head', 'post', 'put', 'patch', 'delete', 'options', 'del'])

const clip = (text: string, max = 256) => (text.length > max ? `${text.slice(0, max)}…` : text)

/** How long an error answer waits for the rest of a request body still arriving (see register). */
const EARLY_ANSWER_DRAIN_MS = 2000

export class Gateway {
  private readonly app: TemplatedApp
  private listenSocket: us_listen_socket | null = null
  private readonly openStreams = new Set<StreamSink>()
  private readonly openSockets = new Set<SocketLink>()
  private readonly headLimits: HeadLimits

  constructor(private readonly options: GatewayOptions) {
    this.app = options.uws.App()
    this.headLimits = {
      trustedProxies: options.trustedProxies ?? DEFAULT_HEAD_LIMITS.trustedProxies,
      maxUrlBytes: options.maxUrlBytes ?? DEFAULT_HEAD_LIMITS.maxUrlBytes,
      maxHeaderBytes: options.maxHeaderBytes ?? DEFAULT_HEAD_LIMITS.maxHeaderBytes,
    }
    for (const route of options.routes) this.register(route)
    for (const [path, produce] of Object.entries(options.publicDocuments)) this.registerDocument(path, produce)
    if (options.consoleDir) mountConsole(this.app, options.consoleDir)
    this.app.any('/*', (res, req) =>
      this.accept(res, req, [], UNMATCHED, async x => {
        const head = x.head!
        if (head.problem) throw head.problem
        throw new ApiError(404, 'NOT_FOUND', `No route for ${head.method.toUpperCase()} ${clip(head.url)}`)
      }),
    )
  }

  listen(port: number, host: string): Promise<number> {
    return listenApp(this.options.uws, this.app, port, host).then(({ socket, port }) => {
      this.listenSocket = socket
      return port
    })
  }

  /** Stops accepting connections; open streams are the session layer's to close first. */
  close() {
    if (this.listenSocket) this.options.uws.us_listen_socket_close(this.listenSocket)
    this.listenSocket = null
  }

  /** Closes the sockets the modules left open (those not yet holding a stream) with 1012: connect again. */
  closeSockets() {
    for (const link of [...this.openSockets]) link.close(SOCKET_CLOSE.serviceRestart, 'service stopping: connect again')
  }

  private registerDocument(path: string, produce: () => Promise<{ status: number; body: unknown }>) {
    this.app.get(path, (res, req) =>
      this.accept(res, req, [], path, async x => {
        if (x.head!.problem) throw x.head!.problem
        const { status, body } = await produce()
        x.reply.json(status, body, { 'X-Request-Id': x.requestId })
        return status
      }),
    )
  }

  private register(route: Route) {
    if (route.kind === 'socket') return this.registerSocket(route)
    const names = paramNames(route.path)
    const limits = bodyLimitsOf(route, this.options)
    this.app[route.method](route.path, (res, req) =>
      this.accept(res, req, names, route.path, x => {
        const head = x.head!
        // The body must be claimed before the first await: uWS drops data nobody listens for.
        // A head refused for its framing gets no body read (its connection is closed).
        const body: Promise<Buffer> | BodyStream = head.closeConnection
          ? NO_BODY
          : route.kind === 'upload'
            ? new BodyStream(res, head, this.options.maxUploadBytes)
            : readBody(res, head, limits.bytes, this.options.maxBodyBytes)
        if (body instanceof Promise) body.catch(() => {}) // a 401 may answer before the body is read
        if (body === NO_BODY) return this.serve(route, x, body, limits)
        return this.serve(route, x, body, limits).catch(async error => {
          // An answer sent while the client still sends its body makes uWS close the connection
          // under it, and the client sees a reset instead of our answer: read the rest first,
          // within bounds (a JSON body is capped by maxBodyBytes already).
          if (body instanceof BodyStream) await body.drain(this.options.maxBodyBytes, EARLY_ANSWER_DRAIN_MS)
          else await settledWithin(body, EARLY_ANSWER_DRAIN_MS)
          throw error
        })
      }),
    )
  }

  /**
   * The guarded entry of every uWS handler: the Reply (onAborted) first, then the head, then
   * `serve`, whose outcome (or throw, synchronous or not) always ends in an answer and a count.
   */
  private accept(res: HttpResponse, req: HttpRequest, names: string[], route: string, serve: (x: Exchange) => Promise<number>) {
    const x: Exchange = { reply: undefined as unknown as Reply, requestId: '', route, started: process.hrtime.bigint() }
    x.reply = new Reply(res, this.faultOf(x))
    let outcome: Promise<number>
    try {
      x.head = readHead(req, res, names, this.headLimits)
      const claimed = x.head.headers['x-request-id']
      x.requestId = claimed && REQUEST_ID.test(claimed) ? claimed : randomUUID()
      outcome = serve(x)
    } catch (error) {
      if (!x.requestId) x.requestId = randomUUID()
      outcome = Promise.reject(error)
    }
    outcome
      .catch(error => this.fail(x, error))
      .then(status => this.finish(x, status))
      .catch(error => this.fault(x, error))
  }

  private registerSocket(route: SocketRoute) {
    const names = paramNames(route.path)
    const limits = this.options.sockets ?? DEFAULT_SOCKETS
    const fault = (error: unknown) => {
      try {
        this.options.logger.error('socket fault', { route: route.path, error })
        this.options.metrics.httpErrors.inc({ status: '500', code: 'FAULT' })
      } catch {
        // nothing left to tell
      }
    }
    this.app.ws<SocketData>(route.path, {
      ...socketBehavior(limits, fault, this.openSockets),
      upgrade: (res, req, context) => this.accept(res, req, names, route.path, x => this.upgrade(route, x, context)),
    })
    // uWS hands a GET without Upgrade on to the HTTP routes: told what this endpoint is.
    this.app.get(route.path, (res, req) =>
      this.accept(res, req, names, route.path, async x => {
        if (x.head!.problem) throw x.head!.problem
        throw new ApiError(426, 'UPGRADE_REQUIRED', 'This endpoint is a WebSocket: send GET with Upgrade: websocket', {}, { Upgrade: 'websocket' })
      }),
    )
  }

  /** The handshake of a socket route: answered as any request until the 101. */
  private async upgrade(route: SocketRoute, x: Exchange, context: unknown): Promise<number> {
    const { head, reply, requestId } = x as Required<Pick<Exchange, 'head'>> & Exchange
    if (head.problem) throw head.problem
    const key = head.headers['sec-websocket-key']
    if (!key) throw new ApiError(400, 'INVALID_HANDSHAKE', 'A WebSocket handshake needs Sec-WebSocket-Key')
    const allowed = (this.options.sockets ?? DEFAULT_SOCKETS).allowedOrigins
    if (!originAllowed(head.headers['origin'], allowed)) {
      throw new ApiError(403, 'ORIGIN_NOT_ALLOWED', `Origin ${head.headers['origin']!.slice(0, 200)} may not open this socket (CHANNEL_SOCKET_ALLOWED_ORIGINS)`)
    }
    const offered = offeredProtocols(head.headers['sec-websocket-protocol'])
    // An API key in its header (servers); otherwise the route's own credential (a ticket), never a key in the URL.
    let principal: Principal
    let scope: SocketContext['scope']
    if (head.headers['apikey'] !== undefined || !route.authenticate) principal = await this.authorize(route, head)
    else {
      const grant = await route.authenticate({ query: head.query, protocols: offered })
      if (!grant) {
        if (head.remoteAddress) this.options.authThrottle.recordFailure(head.remoteAddress)
        throw new ApiError(401, 'UNAUTHORIZED', 'An apikey header, or a valid unused ticket (query `ticket` or subprotocol `ticket.<ticket>`), is required')
      }
      if (route.role !== null && !grant.principal.roles.has(route.role)) throw new ApiError(403, 'FORBIDDEN', `This credential does not have the "${route.role}" role`)
      principal = grant.principal
      scope = grant.scope
    }
    const handler = await route.accept({
      method: head.method,
      url: head.url,
      params: head.params,
      query: head.query,
      rawQuery: head.rawQuery,
      headers: head.headers,
      principal,
      requestId,
      aborted: reply.abortedPromise,
      scope,
    })
    const protocol = route.protocol?.(offered) ?? ''
    if (!reply.upgrade<SocketData>({ handler }, key, protocol, head.headers['sec-websocket-extensions'] ?? '', context)) return 499
    return 101
  }

  private async serve(route: Exclude<Route, SocketRoute>, x: Exchange, body: Promise<Buffer> | BodyStream, limits: BodyLimits): Promise<number> {
    const { head, reply, requestId } = x as Required<Pick<Exchange, 'head'>> & Exchange
    if (head.problem) throw head.problem
    // A key verified lately, while no address is held back for failures: no digest, nothing awaited (gateway/auth.ts).
    const known = route.role === null || this.options.authThrottle.active ? undefined : this.options.keys.verified(head.headers['apikey'])
    const principal = known && known.roles.has(route.role!) ? known : await this.authorize(route, head)
    // Built whole (no spread: it would read the query getter and parse every query string).
    const context = (bytes: Buffer): RequestContext => ({
      method: head.method,
      url: head.url,
      params: head.params,
      get query() {
        return head.query
      },
      headers: head.headers,
      principal,
      requestId,
      get aborted() {
        return reply.abortedPromise
      },
      body: bytes,
      json: () => parseJsonBody(bytes, limits.json),
      input: undefined,
    })
    if (route.kind === 'upload') return this.respond(reply, await route.handle(context(NO_BYTES), body as BodyStream), requestId)
    const ctx = context(await (body as Promise<Buffer>))
    route.preValidation?.(ctx)
    if (route.kind === 'stream') {
      ctx.input = validatedInput(route, ctx)
      await route.open(ctx, headers => this.openStream(x, headers))
      return 200
    }
    const run = () => {
      ctx.input = validatedInput(route, ctx)
      return route.handle(ctx)
    }
    return this.respond(reply, await (route.around ? route.around(ctx, run) : run()), requestId)
  }

  /**
   * The exchange's response turned into a stream. Made here, not in `serve`: what a stream keeps
   * (its close listener, the reply's fault handler) must not hold the request's scope, its head
   * and body, for the hours a stream may stay open.
   */
  private openStream(x: Exchange, headers: Record<string, string> | undefined): StreamSink {
    const sink = x.reply.stream(
      { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', 'X-Request-Id': x.requestId, ...headers },
      this.options.streamBufferBytes,
    )
    x.sink = sink
    this.openStreams.add(sink)
    sink.onClose(() => this.openStreams.delete(sink))
    return sink
  }

  private faultOf(x: Exchange) {
    return (error: unknown) => this.fault(x, error)
  }

  private respond(reply: Reply, result: JsonResult, requestId: string): number {
    reply.json(result.status, result.body, { 'X-Request-Id': requestId, ...result.headers })
    return result.status
  }

  private async authorize(route: Route, head: RequestHead): Promise<Principal> {
    if (route.role === null) return ANONYMOUS
    const { authThrottle } = this.options
    // No address failed lately (the usual case): this one's need not be read.
    const retryAfter = authThrottle.active ? authThrottle.retryAfterSeconds(head.remoteAddress) : 0
    if (retryAfter > 0) {
      throw new ApiError(
        429,
        'TOO_MANY_AUTH_FAILURES',
        'Too many requests with an unknown apikey from this address; retry later',
        { retryAfterSeconds: retryAfter },
        { 'Retry-After': String(retryAfter) },
      )
    }
    const presented = head.headers['apikey']
    const principal = await this.options.keys.authenticate(presented)
    if (!principal) {
      // An address reads empty once the client went away: it learns nothing, nothing to count.
      if (presented && head.remoteAddress) authThrottle.recordFailure(head.remoteAddress)
      throw new ApiError(401, 'UNAUTHORIZED', 'A valid apikey header is required')
    }
    if (!principal.roles.has(route.role)) {
      throw new ApiError(403, 'FORBIDDEN', `This API key does not have the "${route.role}" role`)
    }
    return principal
  }

  /**
   * Turns any throw into the answer: an ApiError or a domain error is the client's (its status
   * and body, echo bounded; platform/http.ts maps the kinds), anything else is ours (500
   * INTERNAL). Logged once, counted once. Never throws.
   */
  private fail(x: Exchange, error: unknown): number {
    const known = httpError(error)
    const status = known ? known.status : 500
    const code = known ? known.code : 'INTERNAL'
    try {
      const fields = { requestId: x.requestId, route: x.route, method: x.head?.method, status, code }
      if (known) this.options.logger.info('request rejected', { ...fields, message: known.message, client: x.head?.remoteAddress })
      else this.options.logger.error('request failed', { ...fields, error })
      this.options.metrics.httpErrors.inc({ status: String(status), code })
    } catch {
      // logging or counting must not stop the answer
    }
    const { reply } = x
    if (reply.aborted) return status
    try {
      if (reply.finished) {
        // The stream's head is out: no JSON answer is possible any more; end it (or drop the socket).
        if (x.sink) x.sink.end()
        else reply.close()
        return status
      }
      const body = known ? known.body() : { code, message: 'Unexpected server error', requestId: x.requestId }
      reply.error(status, serializeErrorBody(body), { 'X-Request-Id': x.requestId, ...(known ? known.headers : {}) }, x.head?.closeConnection)
    } catch (secondary) {
      this.fault(x, secondary)
    }
    return status
  }

  /** The request metrics of each route, method and status, resolved once (prom-client hashes labels on every call otherwise). */
  private readonly counted = new Map<string, { requests: { inc(): void }; duration: { observe(value: number): void } }>()

  private finish(x: Exchange, status: number) {
    // Any token is a method to uWS: others share one label, so a client cannot grow the series.
    const method = STANDARD_METHODS.has(x.head?.method ?? '') ? x.head!.method : 'other'
    const key = `${x.route} ${method} ${status}`
    let metrics = this.counted.get(key)
    if (!metrics) {
      const labels = { route: x.route, method }
      metrics = { requests: this.options.metrics.httpRequests.labels({ ...labels, status: String(status) }), duration: this.options.metrics.httpDuration.labels(labels) }
      this.counted.set(key, metrics)
    }
    metrics.requests.inc()
    metrics.duration.observe(Number(process.hrtime.bigint() - x.started) / 1e9)
    // What may still hold the exchange (an open stream, uWS's callbacks of a keep-alive
    // connection until its next request) needs only fault()'s fields, not the request's head.
    x.head = undefined
  }

  /** A throw where no answer can carry it (uWS callbacks, a stream's writer): logged, counted, contained. */
  private fault(x: Exchange, error: unknown) {
    try {
      this.options.logger.error('request fault', { requestId: x.requestId, route: x.route, error })
      this.options.metrics.httpErrors.inc({ status: '500', code: 'FAULT' })
    } catch {
      // nothing left to tell
    }
  }
}

/** Listens an app; the port actually bound (port 0 picks a free one). */
function listenApp(uws: UwsModule, app: TemplatedApp, port: number, host: string): Promise<{ socket: us_listen_socket; port: number }> {
  return new Promise((resolve, reject) => {
    app.listen(host, port, socket => {
      if (!socket) return reject(new Error(`Could not listen on ${host}:${port}`))
      resolve({ socket, port: uws.us_socket_local_port(socket as any) })
    })
  })
}

/**
 * Prometheus metrics (and a copy of /healthz for probes) on their own listener, by default on
 * loopback: the API port is public and /metrics names routes, queue depths and volumes.
 */
export class MetricsListener {
  private readonly app: TemplatedApp
  private listenSocket: us_listen_socket | null = null

  constructor(private readonly uws: UwsModule, metrics: Metrics, health: () => Promise<{ status: number; body: unknown }>, logger: Logger) {
    this.app = uws.App()
    const guarded = (produce: (reply: Reply) => Promise<void>) => (res: HttpResponse, _req: HttpRequest) => {
      const reply = new Reply(res, error => logger.error('metrics listener fault', { error }))
      const fail = (error: unknown) => {
        logger.error('metrics listener failed', { error })
        reply.error(500, serializeErrorBody({ code: 'INTERNAL', message: 'Unexpected server error' }), {})
      }
      try {
        produce(reply).catch(fail)
      } catch (error) {
        fail(error)
      }
    }
    this.app.get(
      '/metrics',
      guarded(async reply => reply.send(200, await metrics.registry.metrics(), { 'Content-Type': metrics.registry.contentType })),
    )
    this.app.get(
      '/healthz',
      guarded(async reply => {
        const { status, body } = await health()
        reply.json(status, body)
      }),
    )
    this.app.any(
      '/*',
      guarded(async reply => reply.error(404, serializeErrorBody({ code: 'NOT_FOUND', message: 'This listener serves /metrics and /healthz' }), {})),
    )
  }

  async listen(port: number, host: string): Promise<number> {
    const { socket, port: bound } = await listenApp(this.uws, this.app, port, host)
    this.listenSocket = socket
    return bound
  }

  close() {
    if (this.listenSocket) this.uws.us_listen_socket_close(this.listenSocket)
    this.listenSocket = null
  }
}

