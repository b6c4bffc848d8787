// The composition root: picks the embedded or distributed implementation of each seam
// (store, bus), builds the modules on them and serves their routes from one gateway.
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { Gateway, MetricsListener } from './gateway/server.js'
import { AuthThrottle } from './gateway/auth-throttle.js'
import { KeyRegistry, parseBootstrapKeys } from './gateway/auth.js'
import { loadNativeUws } from './gateway/uws.js'
import type { ServiceModule } from './platform/http.js'
import { type Bus, LmdbBus, MemoryBus, NatsBus } from './platform/bus/index.js'
import { type Clock, systemClock } from './platform/clock.js'
import type { Config } from './platform/config.js'
import { createLogger, type Logger } from './platform/logger.js'
import { createMetrics, type Metrics } from './platform/metrics.js'
import { OverloadGuard } from './platform/overload.js'
import { applyV8Flags } from './platform/v8-flags.js'
import { Wire } from './platform/wire.js'
import { embeddedStorePath, LmdbStore, MongoStore, type Store } from './platform/store/index.js'
import type { Platform } from './platform/index.js'
import { NatsBlobStore } from './platform/blobs-nats.js'
import { buildOpenApi, schemas } from './schemas/index.js'
import { createDialer } from './dialer/index.js'
import { createReports } from './reports/index.js'
import { createEngine } from './engine/index.js'

const VERSION: string = JSON.parse(readFileSync(new URL('./package.json', import.meta.url.replace(/\/dist\/[^/]*$/, '/')), 'utf8')).version

export interface RunningService {
  port: number
  /** Where /metrics listens (METRICS_PORT); undefined with METRICS_PORT=off. */
  metricsPort?: number
  platform: Platform
  keys: KeyRegistry
  close(): Promise<void>
}

export interface ServiceOverrides {
  clock?: Clock
  logger?: Logger
}

/** MONGO_URL set: MongoDB; unset: the embedded database under DATA_DIR (the one `make keys` writes). */
async function openStore(config: Config, clock: Clock, logger: Logger): Promise<Store> {
  return config.mongoUrl ? MongoStore.connect(config.mongoUrl) : new LmdbStore({ path: embeddedStorePath(config.dataDir), clock, logger, sweepIntervalMs: config.storeSweepMs })
}

/**
 * NATS_URL set: work queues on JetStream, shared by every process; unset: durable queues in the
 * embedded database (a load acknowledged before a restart completes after it), or in memory
 * when the store is not the embedded one (MongoDB without NATS: one process).
 */
async function openBus(config: Config, logger: Logger, store: Store, metrics: Metrics): Promise<Bus> {
  if (!config.natsUrl) return store instanceof LmdbStore ? new LmdbBus(store, logger) : new MemoryBus(logger)
  return NatsBus.connect(
    {
      servers: config.natsUrl,
      name: `switchboard-${config.role}-${process.pid}`,
      replicas: config.nats.streamReplicas,
      ackWaitMs: config.nats.ackWaitMs,
      wire: new Wire({ writes: config.nats.wireVersion, logger, metrics }),
    },
    logger,
  )
}

/** Idempotency may live on its own server; it must never block start-up or requests. */
function openIdempotencyStore(config: Config, main: Store): Store {
  if (!config.idempotencyMongoUrl || config.idempotencyMongoUrl === config.mongoUrl) return main
  return MongoStore.lazy(config.idempotencyMongoUrl, { serverSelectionTimeoutMS: 1000 })
}

export async function startService(config: Config, overrides: ServiceOverrides = {}): Promise<RunningService> {
  applyV8Flags()
  const uws = loadNativeUws()
  const clock = overrides.clock ?? systemClock
  const logger = overrides.logger ?? createLogger(config.logLevel, { service: 'switchboard', role: config.role })
  const metrics = createMetrics({ defaultMetrics: true })
  const store = await openStore(config, clock, logger)
  const idempotencyStore = openIdempotencyStore(config, store)
  const bus = await openBus(config, logger, store, metrics)
  const overload = new OverloadGuard(config.overload, metrics, logger)
  overload.start()
  const platform: Platform = { config, store, bus, clock, logger, metrics, overload }

  const keys = new KeyRegistry(parseBootstrapKeys(config.apiKeys), store, config.edge.keyCache, metrics.apiKeyCacheEntries)
  await keys.init()

  // Roles: `worker` runs the dialer's background workers and serves only /healthz and /metrics;
  // `engine` hosts assistant sessions for the gateways (over NATS) behind /healthz and /metrics;
  // `gateway` serves the routes and leaves the dialer's queues to workers and the sessions to
  // engine nodes; `all` does everything in one process (with NATS_URL it is also an engine node).
  const dialerWorkers = config.role === 'all' || config.role === 'worker'
  const servesRoutes = config.role !== 'worker' && config.role !== 'engine'
  // The assistant provider reaches sessions through the engine's transport (created below).
  // Uploads: with NATS in JetStream's object store (every process reads it), else under DATA_DIR.
  const blobs = bus instanceof NatsBus ? new NatsBlobStore(bus.connection, { replicas: config.nats.streamReplicas }) : undefined
  const dialer = createDialer(platform, { idempotencyStore, blobs, workers: dialerWorkers, sessionTransport: () => engine?.transport })
  const cluster =
    bus instanceof NatsBus && config.role !== 'worker'
      ? { mode: config.role === 'engine' ? ('node' as const) : config.role === 'gateway' ? ('gateway' as const) : ('both' as const), nc: bus.connection, replicas: config.nats.streamReplicas }
      : undefined
  const engine = config.role === 'worker' ? undefined : createEngine(platform, { cluster })
  const modules: ServiceModule[] = config.role === 'worker' ? [dialer] : config.role === 'engine' ? [engine!] : [dialer, createReports(platform), engine!]
  for (const module of modules) await module.start()

  const routes = servesRoutes ? modules.flatMap(m => m.routes) : []
  const openapi = buildOpenApi(routes, schemas.all, VERSION)
  // 503 while NATS is unreachable: a load balancer then routes around this process.
  const health = async () => {
    const nats = bus instanceof NatsBus ? (bus.connected ? 'connected' : 'disconnected') : undefined
    // An engine node whose MongoDB writes fail still serves every live turn (the journal is on
    // JetStream): degraded, but not a process a load balancer should route around (200).
    const behind = engine?.storeBehind?.()
    const storeFailing = behind !== undefined && behind.failingSince !== null
    return {
      status: nats === 'disconnected' ? 503 : 200,
      body: {
        status: nats === 'disconnected' || storeFailing ? 'degraded' : 'ok',
        version: VERSION,
        role: config.role,
        store: store.kind,
        bus: bus instanceof NatsBus ? 'nats' : bus instanceof LmdbBus ? 'embedded' : 'memory',
        ...(nats ? { nats } : {}),
        modules: modules.map(m => m.name),
        dialerWorkers,
        ...(engine?.node ? { engineNode: engine.node.nodeId } : {}),
        // Session writes the journal holds and MongoDB does not yet (retried until it takes them).
        ...(behind ? { storeWrites: { behind: behind.behind, failingForMs: behind.failingSince === null ? 0 : Date.now() - behind.failingSince, ...(behind.lastError ? { lastError: behind.lastError } : {}) } } : {}),
        // Live sessions whose state is no longer saved (their store writes kept failing).
        ...(engine?.host ? { sessionsNotPersisted: engine.host.sessionsNotPersisted } : {}),
      },
    }
  }
  const gateway = new Gateway({
    uws,
    routes,
    keys,
    metrics,
    logger,
    maxBodyBytes: config.maxBodyBytes,
    maxUploadBytes: config.maxUploadBytes,
    streamBufferBytes: config.channel.consumerBufferBytes,
    maxJsonDepth: config.edge.maxJsonDepth,
    authThrottle: new AuthThrottle({
      limit: config.edge.authFailureLimit,
      windowMs: config.edge.authFailureWindowMs,
      maxAddresses: config.edge.authFailureTrackedAddresses,
    }),
    trustedProxies: new Set(config.edge.trustedProxies),
    maxUrlBytes: config.edge.maxUrlBytes,
    maxHeaderBytes: config.edge.maxHeaderBytes,
    sockets: {
      ...config.channel.socket,
      // uWS pings a socket idle for half its timeout: the SSE heartbeat's period, in its 4 s steps.
      idleTimeoutSeconds: Math.max(8, 4 * Math.ceil((2 * config.channel.heartbeatMs) / 4000)),
      bufferBytes: config.channel.consumerBufferBytes,
    },
    consoleDir: fileURLToPath(new URL(import.meta.url.includes('/dist/') ? '../console/dist' : './console/dist', import.meta.url)),
    publicDocuments: {
      '/healthz': health,
      ...(servesRoutes ? { '/openapi.json': async () => ({ status: 200, body: openapi }) } : {}),
    },
  })
  const port = await gateway.listen(config.port, config.host)
  dialer.listening(port)
  const metricsListener = config.edge.metricsPort === null ? undefined : new MetricsListener(uws, metrics, health, logger)
  let metricsPort: number | undefined
  try {
    metricsPort = await metricsListener?.listen(config.edge.metricsPort!, config.edge.metricsHost)
  } catch (error) {
    gateway.close()
    for (const module of [...modules].reverse()) await module.stop()
    await bus.close()
    await store.close()
    throw error
  }
  logger.info('listening', { port, metricsPort, store: store.kind, role: config.role })

  return {
    port,
    metricsPort,
    platform,
    keys,
    async close() {
      gateway.close()
      metricsListener?.close()
      for (const module of [...modules].reverse()) await module.stop()
      // Sockets the channel did not end itself (a handshake's, or one never opened on a session).
      gateway.closeSockets()
      overload.stop()
      await bus.close()
      if (idempotencyStore !== store) await idempotencyStore.close()
      await store.close()
    },
  }
}
