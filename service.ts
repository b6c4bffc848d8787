// The composition root: picks the embedded or distributed implementation of each seam
// (store, bus), builds the modules on them and serves their routes from one gateway.
import { readFileSync } from 'node:fs'
import { Gateway } from './gateway/server.js'
import { KeyRegistry, parseBootstrapKeys } from './gateway/auth.js'
import { loadNativeUws } from './gateway/uws.js'
import { OverloadGuard } from './gateway/overload.js'
import type { ServiceModule } from './gateway/routes.js'
import { type Bus, MemoryBus, NatsBus } from './platform/bus/index.js'
import { type Clock, systemClock } from './platform/clock.js'
import type { Config } from './platform/config.js'
import { createLogger, type Logger } from './platform/logger.js'
import { createMetrics } from './platform/metrics.js'
import { MemoryStore, MongoStore, type Store } from './platform/store/index.js'
import type { Platform } from './platform/index.js'
import { buildOpenApi, schemas } from './schemas/index.js'
import { createDialer } from './dialer/index.js'
import { createReports } from './reports/index.js'
import { createEngine } from './engine/index.js'

const VERSION: string = JSON.parse(readFileSync(new URL('./package.json', import.meta.url.replace(/\/dist\/[^/]*$/, '/')), 'utf8')).version

export interface RunningService {
  port: number
  platform: Platform
  keys: KeyRegistry
  close(): Promise<void>
}

export interface ServiceOverrides {
  clock?: Clock
  logger?: Logger
}

async function openStore(config: Config, clock: Clock): Promise<Store> {
  return config.mongoUrl ? MongoStore.connect(config.mongoUrl) : new MemoryStore(clock)
}

/** NATS_URL set: work queues on JetStream, shared by every process; unset: in-process. */
async function openBus(config: Config, logger: Logger): Promise<Bus> {
  if (!config.natsUrl) return new MemoryBus(logger)
  return NatsBus.connect(
    { servers: config.natsUrl, name: `switchboard-${config.role}-${process.pid}`, replicas: config.nats.streamReplicas, ackWaitMs: config.nats.ackWaitMs },
    logger,
  )
}

/** Idempotency may live on its own server; it must never block start-up or requests. */
function openIdempotencyStore(config: Config, main: Store): Store {
  if (!config.idempotencyMongoUrl || config.idempotencyMongoUrl === config.mongoUrl) return main
  return MongoStore.lazy(config.idempotencyMongoUrl, { serverSelectionTimeoutMS: 1000 })
}

export async function startService(config: Config, overrides: ServiceOverrides = {}): Promise<RunningService> {
  const uws = loadNativeUws()
  const clock = overrides.clock ?? systemClock
  const logger = overrides.logger ?? createLogger(config.logLevel, { service: 'switchboard', role: config.role })
  const metrics = createMetrics({ defaultMetrics: true })
  const store = await openStore(config, clock)
  const idempotencyStore = openIdempotencyStore(config, store)
  const bus = await openBus(config, logger)
  const overload = new OverloadGuard(config.overload, metrics, logger)
  overload.start()
  const platform: Platform = { config, store, bus, clock, logger, metrics, overload }

  const keys = new KeyRegistry(parseBootstrapKeys(config.apiKeys), store)
  await keys.init()

  // Roles: `worker` runs the dialer's background workers and serves only /healthz and /metrics;
  // `engine` hosts assistant sessions for the gateways (over NATS) behind /healthz and /metrics;
  // `gateway` serves the routes and leaves the dialer's queues to workers and the sessions to
  // engine nodes; `all` does everything in one process (with NATS_URL it is also an engine node).
  const dialerWorkers = config.role === 'all' || config.role === 'worker'
  const servesRoutes = config.role !== 'worker' && config.role !== 'engine'
  // The assistant provider reaches sessions through the engine's transport (created below).
  const dialer = createDialer(platform, { idempotencyStore, workers: dialerWorkers, sessionTransport: () => engine?.transport })
  const cluster =
    bus instanceof NatsBus && config.role !== 'worker'
      ? { mode: config.role === 'engine' ? ('node' as const) : config.role === 'gateway' ? ('gateway' as const) : ('both' as const), nc: bus.connection, replicas: config.nats.streamReplicas }
      : undefined
  const engine = config.role === 'worker' ? undefined : createEngine(platform, { cluster })
  const modules: ServiceModule[] = config.role === 'worker' ? [dialer] : config.role === 'engine' ? [engine!] : [dialer, createReports(platform), engine!]
  for (const module of modules) await module.start()

  const routes = servesRoutes ? modules.flatMap(m => m.routes) : []
  const openapi = buildOpenApi(routes, schemas.all, VERSION)
  const gateway = new Gateway({
    uws,
    routes,
    keys,
    metrics,
    logger,
    maxBodyBytes: config.maxBodyBytes,
    maxUploadBytes: config.maxUploadBytes,
    streamBufferBytes: config.channel.consumerBufferBytes,
    publicDocuments: {
      // 503 while NATS is unreachable: a load balancer then routes around this process.
      '/healthz': async () => {
        const nats = bus instanceof NatsBus ? (bus.connected ? 'connected' : 'disconnected') : undefined
        return {
          status: nats === 'disconnected' ? 503 : 200,
          body: {
            status: nats === 'disconnected' ? 'degraded' : 'ok',
            version: VERSION,
            role: config.role,
            store: store.kind,
            bus: bus instanceof NatsBus ? 'nats' : 'memory',
            ...(nats ? { nats } : {}),
            modules: modules.map(m => m.name),
            dialerWorkers,
            ...(engine?.node ? { engineNode: engine.node.nodeId } : {}),
            // Sessions whose write-behind was given up on (they go on, unpersisted): see the log.
            ...(engine?.host ? { sessions: { live: engine.host.liveCount(), unpersisted: engine.host.writeBehind.unpersistedSessions() } } : {}),
          },
        }
      },
      ...(servesRoutes ? { '/openapi.json': async () => ({ status: 200, body: openapi }) } : {}),
    },
  })
  const port = await gateway.listen(config.port, config.host)
  logger.info('listening', { port, store: store.kind, role: config.role })

  return {
    port,
    platform,
    keys,
    async close() {
      gateway.close()
      for (const module of [...modules].reverse()) await module.stop()
      overload.stop()
      await bus.close()
      if (idempotencyStore !== store) await idempotencyStore.close()
      await store.close()
    },
  }
}
