// The HTTP edge: registers every module's route table on one uWebSockets.js app, and does the
// cross-cutting work once: auth and roles, body limits, the error envelope, metrics, request
// ids. Handlers stay tiny and never touch uWS objects.
import { randomUUID } from 'node:crypto'
import type { TemplatedApp, us_listen_socket, UwsModule } from './uws.js'
import { ApiError } from './errors.js'
import { type KeyRegistry, type Principal } from './auth.js'
import { BodyStream, paramNames, readBody, readHead, type RequestHead } from './request.js'
import { Reply } from './response.js'
import { mountConsole } from './static.js'
import type { JsonResult, RequestContext, Route, StreamSink } from './routes.js'
import type { Logger } from '../platform/logger.js'
import type { Metrics } from '../platform/metrics.js'

export interface GatewayOptions {
  uws: UwsModule
  routes: Route[]
  keys: KeyRegistry
  metrics: Metrics
  logger: Logger
  maxBodyBytes: number
  maxUploadBytes: number
  streamBufferBytes: number
  /** Extra unauthenticated JSON documents, e.g. /healthz and /openapi.json. */
  publicDocuments: Record<string, () => Promise<{ status: number; body: unknown }>>
  /** Built operator console to serve at /console/ (gateway/static.ts). */
  consoleDir?: string
}

const ANONYMOUS: Principal = { keyId: 'anonymous', keyName: 'anonymous', accountId: '', roles: new Set() }

export class Gateway {
  private readonly app: TemplatedApp
  private listenSocket: us_listen_socket | null = null
  private readonly openStreams = new Set<StreamSink>()

  constructor(private readonly options: GatewayOptions) {
    this.app = options.uws.App()
    for (const route of options.routes) this.register(route)
    for (const [path, produce] of Object.entries(options.publicDocuments)) this.registerDocument(path, produce)
    this.app.get('/metrics', (res, _req) => {
      const reply = new Reply(res)
      options.metrics.registry.metrics().then(
        text => reply.send(200, text, { 'Content-Type': options.metrics.registry.contentType }),
        error => reply.json(500, { code: 'INTERNAL', message: String(error) }),
      )
    })
    if (options.consoleDir) mountConsole(this.app, options.consoleDir)
    this.app.any('/*', (res, req) => {
      const reply = new Reply(res)
      reply.json(404, { code: 'NOT_FOUND', message: `No route for ${req.getMethod().toUpperCase()} ${req.getUrl()}` })
    })
  }

  listen(port: number, host: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.app.listen(host, port, socket => {
        if (!socket) return reject(new Error(`Could not listen on ${host}:${port}`))
        this.listenSocket = socket
        resolve(this.options.uws.us_socket_local_port(socket as any))
      })
    })
  }

  /** Stops accepting connections; open streams are the session layer's to close first. */
  close() {
    if (this.listenSocket) this.options.uws.us_listen_socket_close(this.listenSocket)
    this.listenSocket = null
  }

  private registerDocument(path: string, produce: () => Promise<{ status: number; body: unknown }>) {
    this.app.get(path, (res, _req) => {
      const reply = new Reply(res)
      produce().then(
        ({ status, body }) => reply.json(status, body),
        error => reply.json(500, { code: 'INTERNAL', message: (error as Error).message }),
      )
    })
  }

  private register(route: Route) {
    const names = paramNames(route.path)
    const { metrics } = this.options
    this.app[route.method](route.path, (res, req) => {
      const started = process.hrtime.bigint()
      const head = readHead(req, names)
      const reply = new Reply(res)
      const requestId = head.headers['x-request-id'] || randomUUID()
      const finish = (status: number) => {
        const labels = { route: route.path, method: head.method }
        metrics.httpRequests.inc({ ...labels, status: String(status) })
        metrics.httpDuration.observe(labels, Number(process.hrtime.bigint() - started) / 1e9)
      }
      // The body must be claimed before the first await: uWS drops data nobody listens for.
      const body: Promise<Buffer> | BodyStream =
        route.kind === 'upload' ? new BodyStream(res, head, this.options.maxUploadBytes) : readBody(res, head, this.options.maxBodyBytes)
      if (body instanceof Promise) body.catch(() => {}) // a 401 may answer before the body is read
      this.serve(route, head, body, reply, requestId).then(
        status => finish(status),
        error => finish(this.fail(reply, error, requestId, route)),
      )
    })
  }

  private async serve(route: Route, head: RequestHead, body: Promise<Buffer> | BodyStream, reply: Reply, requestId: string): Promise<number> {
    const principal = await this.authorize(route, head)
    const base = {
      method: head.method,
      url: head.url,
      params: head.params,
      query: head.query,
      headers: head.headers,
      principal,
      requestId,
      aborted: reply.abortedPromise,
    }
    if (route.kind === 'upload') return this.respond(reply, await route.handle(base, body as BodyStream), requestId)
    const bytes = await (body as Promise<Buffer>)
    const ctx: RequestContext = { ...base, body: bytes, json: () => parseJson(bytes) }
    if (route.kind === 'stream') {
      let sink: StreamSink | undefined
      await route.open(ctx, headers => {
        sink = reply.stream(
          { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', 'X-Request-Id': requestId, ...headers },
          this.options.streamBufferBytes,
        )
        this.openStreams.add(sink)
        sink.onClose(() => this.openStreams.delete(sink!))
        return sink
      })
      return 200
    }
    return this.respond(reply, await route.handle(ctx), requestId)
  }

  private respond(reply: Reply, result: JsonResult, requestId: string): number {
    reply.json(result.status, result.body, { 'X-Request-Id': requestId, ...result.headers })
    return result.status
  }

  private async authorize(route: Route, head: RequestHead): Promise<Principal> {
    if (route.role === null) return ANONYMOUS
    const principal = await this.options.keys.authenticate(head.headers['apikey'])
    if (!principal) throw new ApiError(401, 'UNAUTHORIZED', 'A valid apikey header is required')
    if (!principal.roles.has(route.role)) {
      throw new ApiError(403, 'FORBIDDEN', `This API key does not have the "${route.role}" role`)
    }
    return principal
  }

  private fail(reply: Reply, error: unknown, requestId: string, route: Route): number {
    if (error instanceof ApiError) {
      reply.json(error.status, error.body(), { 'X-Request-Id': requestId, ...error.headers })
      return error.status
    }
    this.options.logger.error('request failed', { route: route.path, requestId, error })
    reply.json(500, { code: 'INTERNAL', message: 'Unexpected server error', requestId }, { 'X-Request-Id': requestId })
    return 500
  }
}

function parseJson(body: Buffer): unknown {
  if (body.length === 0) return undefined
  try {
    return JSON.parse(body.toString('utf8'))
  } catch {
    throw new ApiError(400, 'INVALID_JSON', 'The request body is not valid JSON')
  }
}
