// The engine module: assistant sessions as XState actors behind a session transport, the SSE
// channel and live administration.
import { Unavailable } from '../platform/errors.js'
import type { ServiceModule } from '../platform/http.js'
import { Wire } from '../platform/wire.js'
import type { Platform } from '../platform/index.js'
import { SessionRecorder } from '../reports/index.js'
import { writesOffTheLoop } from '../platform/store/index.js'
import { loadCrews, type CrewCatalog } from './crews.js'
import { SessionHost } from './host/host.js'
import type { HostOptions } from './host/host-options.js'
import { ChannelHub } from './streams/hub.js'
import { OpenAiProvider } from './providers/openai.js'
import { ScriptedProvider } from './providers/scripted.js'
import type { AssistantProvider } from './providers/types.js'
import { adminRoutes } from './routes/admin.js'
import { supervisionRoutes } from './routes/supervision.js'
import { SessionDirectory } from './supervision/session-directory.js'
import { FEED_DEFAULTS, feedRoute } from './supervision/session-feed.js'
import { Presence, watchRoute } from './supervision/session-watch.js'
import { channelRoutes, listenPath } from './routes/channel.js'
import { channelSocketRoutes } from './routes/channel-socket.js'
import { SocketTickets } from '../gateway/socket-tickets.js'
import { RelayTokens } from '../gateway/relay-tokens.js'
import { conversationRelayRoutes } from './routes/conversation-relay.js'
import { InProcessTransport, type SessionTransport } from './transport.js'
import { EngineNode, NatsSessionTransport } from './cluster/nats-transport.js'
import { NodeDirectory, Ownership } from './cluster/ownership.js'
import type { EventLog } from './streams/event-log.js'
import { JetStreamEventLog } from './cluster/jetstream-event-log.js'
import { OrphanReaper } from './host/reaper.js'
import { SessionStore } from './persistence/session-store.js'
import { JetStreamJournal } from './cluster/jetstream-journal.js'
import { JournaledSessionStore } from './cluster/journaled-session-store.js'
import { MongoMirror, type MirrorStatus } from './cluster/mongo-mirror.js'
import type { NatsConnection } from '@nats-io/transport-node'

export { CrewConfigError, loadCrews, parseCrews } from './crews.js'
export type { SessionTransport } from './transport.js'

export interface EngineOptions {
  crews?: CrewCatalog
  providers?: Record<string, AssistantProvider>
  /**
   * Engine nodes over NATS (unset: everything in process). `node` hosts sessions for the
   * gateways and serves no routes; `gateway` serves the routes and reaches sessions on engine
   * nodes; `both` does both (ROLE=all with NATS_URL).
   */
  cluster?: { mode: 'node' | 'gateway' | 'both'; nc: NatsConnection; replicas?: number }
}

export interface Engine extends ServiceModule {
  /** The actors of this process (absent on a pure gateway). */
  readonly host: SessionHost | undefined
  readonly hub: ChannelHub
  readonly transport: SessionTransport
  /** This process as an engine node over NATS (ROLE=engine, or all with NATS_URL). */
  readonly node: EngineNode | undefined
  /** Engine nodes: how far MongoDB is behind the session journal (undefined: one process). */
  storeBehind?(): MirrorStatus
}

export function createEngine(platform: Platform, options: EngineOptions = {}): Engine {
  const { config } = platform
  const crews = options.crews ?? loadCrews(config.crewsFile)
  const cluster = options.cluster
  if (cluster) return createClusteredEngine(platform, crews, cluster, options)
  // A durable embedded store: a user message is acknowledged once its history entry is committed,
  // so a kill -9 cannot lose what a client was told was received (restored on its next command).
  const host = newHost(platform, crews, options, platform.store.kind === 'lmdb' ? { durableAcks: true } : {})
  const reaper = newReaper(platform, host)
  const transport: SessionTransport = new InProcessTransport(host)
  const hub = newHub(platform, transport)
  const tickets = newTickets(platform)
  const directory = new SessionDirectory(platform.store, platform.clock, crews)
  const presence = new Presence()
  return {
    name: 'engine',
    host,
    hub,
    transport,
    node: undefined,
    routes: [...channelRoutes(hub, transport), ...socketRoutes(platform, hub, transport, tickets), ...adminRoutes(transport), ...supervisionRoutes(directory, presence), ...supervisionStreams(platform, directory, transport, presence)],
    async start() {
      await directory.ensureIndexes()
      await tickets.init()
      await host.init()
      reaper.start()
    },
    async stop() {
      // Streams first (reconnect_required), then the actors, which stay persisted for a restore.
      hub.shutdown()
      await reaper.stop()
      await host.stop()
    },
  }
}

/** Tickets for the channel socket, signed with the secret every process shares. */
function newTickets(platform: Platform) {
  const { config } = platform
  return new SocketTickets(platform.store, config.dialer.uploadSigningSecret, platform.clock, config.channel.socket.ticketTtlMs)
}

/** The channel over a WebSocket, and its tickets; ConversationRelay, and its tokens. */
function socketRoutes(platform: Platform, hub: ChannelHub, transport: SessionTransport, tickets: SocketTickets) {
  const { config } = platform
  const { relay } = config.channel
  const maxJsonDepth = config.edge.maxJsonDepth
  return [
    ...channelSocketRoutes({ hub, transport, logger: platform.logger.child({ channel: 'socket' }), maxJsonDepth }, tickets),
    ...conversationRelayRoutes(
      { hub, transport, logger: platform.logger.child({ channel: 'conversation-relay' }), maxJsonDepth },
      {
        tokens: new RelayTokens(config.dialer.uploadSigningSecret, platform.clock, relay.tokenTtlMs),
        authTokenOf: accountId => relay.authTokens.byAccount[accountId] ?? relay.authTokens.all,
        publicBaseUrl: config.publicBaseUrl,
      },
    ),
  ]
}

/** The supervisors' lifecycle feed and watch streams. */
function supervisionStreams(platform: Platform, directory: SessionDirectory, transport: SessionTransport, presence: Presence) {
  const { feedLagMs, feedBatch } = platform.config.supervision
  return [
    feedRoute(directory, platform.clock, platform.overload, { ...FEED_DEFAULTS, lagMs: feedLagMs, batch: feedBatch }, presence),
    watchRoute(transport, presence, platform.overload),
  ]
}

/** The actor host of this process; clustered nodes add leases and publishing. */
function newHost(platform: Platform, crews: CrewCatalog, options: EngineOptions, cluster: Partial<HostOptions> = {}) {
  // Sessions and their report records write to the embedded store from a thread of their own (see platform/store/write-thread.ts).
  const store = platform.config.engine.writeThread ? writesOffTheLoop(platform.store) : platform.store
  return new SessionHost({
    platform,
    crews,
    store,
    recorder: new SessionRecorder(store, platform.clock),
    providers: { scripted: new ScriptedProvider(), openai: new OpenAiProvider(), ...options.providers },
    idleTimeoutMs: platform.config.engine.sessionIdleTimeoutMs,
    externalToolTimeoutMs: platform.config.engine.externalToolTimeoutMs,
    ...cluster,
  })
}

/** Closes sessions of dead nodes past their idle deadline; see engine/host/reaper.ts. */
function newReaper(platform: Platform, host: SessionHost, leases?: ConstructorParameters<typeof OrphanReaper>[0]['leases']) {
  const { store, clock, logger, config } = platform
  return new OrphanReaper({ host, store, clock, logger: logger.child({ engine: 'reaper' }), intervalMs: config.engine.reaperIntervalMs, leases })
}

function newHub(platform: Platform, transport: SessionTransport) {
  const { channel } = platform.config
  return new ChannelHub(
    transport,
    {
      heartbeatMs: channel.heartbeatMs,
      consumerRetentionMs: channel.consumerRetentionMs,
      maxConsumersPerSession: channel.maxConsumersPerSession,
      listenPath,
    },
    platform.metrics,
    platform.logger,
    platform.overload,
  )
}

function createClusteredEngine(platform: Platform, crews: CrewCatalog, cluster: NonNullable<EngineOptions['cluster']>, options: EngineOptions): Engine {
  const { config, logger } = platform
  const timing = { heartbeatMs: config.engine.heartbeatMs, renewMs: config.engine.leaseRenewMs }
  const hosting = cluster.mode !== 'gateway'
  const serving = cluster.mode !== 'node'
  // Every message this process sends or reads on NATS goes through it (docs/deploy.md, wire protocol).
  const wire = new Wire({ writes: config.nats.wireVersion, logger, metrics: platform.metrics })
  const node = hosting ? new EngineNode(cluster.nc, logger.child({ engine: 'node' }), wire) : undefined
  let ownership: Ownership | undefined
  let directory: NodeDirectory | undefined
  let reaper: OrphanReaper | undefined
  // The host asks the ownership for leases; both exist once start() opened the buckets.
  const leases = {
    token: (sessionId: string) => ownership?.token(sessionId),
    unloaded: (sessionId: string, why: 'finished' | 'dropped', accountId: string) => ownership?.unloaded(sessionId, why, accountId),
  }
  // The event log opens in start(); the host appends only once started.
  let log: JetStreamEventLog | undefined
  const events: EventLog = {
    durable: true,
    append: (sessionId, event) => ready(log).append(sessionId, event),
    read: (sessionId, after) => ready(log).read(sessionId, after),
    last: sessionId => ready(log).last(sessionId),
    takeOver: (sessionId, epoch) => ready(log).takeOver(sessionId, epoch),
    forget: () => {},
  }
  // The session journal opens in start(); MongoDB follows it (engine/cluster/journaled-session-store.ts).
  let journal: JetStreamJournal | undefined
  const mirror = new MongoMirror({
    store: new SessionStore(platform.store),
    logger: logger.child({ engine: 'mongo-mirror' }),
    metrics: platform.metrics,
    phaseTimeoutMs: config.engine.storeWriteTimeoutMs,
    windowMs: config.engine.storeWriteWindowMs,
  })
  const repository = new JournaledSessionStore({ journal: () => ready(journal), mongo: new SessionStore(platform.store), mirror, logger })
  const host = node ? newHost(platform, crews, options, { leases, events, durableAcks: true, repository, recordReadMs: 500 }) : undefined
  // The gateway side is wired lazily: the directory opens in start().
  let remote: NatsSessionTransport | undefined
  const transport: SessionTransport = {
    create: (request, listener) => ready(remote).create(request, listener),
    command: (target, command) => ready(remote).command(target, command),
    subscribe: (target, listener) => ready(remote).subscribe(target, listener),
    replay: (sessionId, after) => ready(remote).replay(sessionId, after),
    lastEvent: sessionId => ready(remote).lastEvent(sessionId),
    closeReason: target => ready(remote).closeReason(target),
  }
  const hub = newHub(platform, transport)
  const tickets = newTickets(platform)
  const sessions = new SessionDirectory(platform.store, platform.clock, crews)
  const presence = new Presence()
  return {
    name: 'engine',
    host,
    hub,
    transport,
    node,
    storeBehind: node ? () => repository.status() : undefined,
    routes: serving ? [...channelRoutes(hub, transport), ...socketRoutes(platform, hub, transport, tickets), ...adminRoutes(transport), ...supervisionRoutes(sessions, presence), ...supervisionStreams(platform, sessions, transport, presence)] : [],
    async start() {
      if (serving) await sessions.ensureIndexes()
      if (serving) await tickets.init()
      directory = await NodeDirectory.open(cluster.nc, timing, wire, cluster.replicas)
      log = await JetStreamEventLog.open(cluster.nc, {
        perSession: config.channel.replayBufferEvents,
        retentionMs: config.channel.eventRetentionMs,
        replicas: cluster.replicas ?? 1,
        logger,
        wire,
      })
      if (serving) {
        remote = new NatsSessionTransport(cluster.nc, directory, log, { timeoutMs: config.engine.requestTimeoutMs, logger, tombstones: new SessionStore(platform.store), wire })
        void remote.watchLink(() =>
          hub.resync().then(
            feeds => logger.info('reconnected to NATS: streams read back what they missed', { feeds }),
            error => logger.warn('reconnected to NATS: streams not read back', { error }),
          ),
        )
      }
      if (node && host) {
        journal = await JetStreamJournal.open(cluster.nc, { replicas: cluster.replicas ?? 1, retentionMs: config.engine.journalRetentionMs, logger, wire })
        await host.init()
        ownership = await Ownership.open(cluster.nc, { nodeId: node.nodeId, timing, replicas: cluster.replicas, load: () => host.liveCount(), logger, directory })
        node.attach(host, ownership)
        await node.start()
        const owners = ownership
        reaper = newReaper(platform, host, {
          claim: async sessionId => !('owner' in (await owners.claim(sessionId))),
          release: sessionId => owners.release(sessionId),
        })
        reaper.start()
        logger.info('engine node started', { node: node.nodeId })
      }
    },
    async stop() {
      hub.shutdown()
      await reaper?.stop() // a draining node restores no orphans
      if (node) {
        const sessions = await node.drain(config.engine.drainTimeoutMs)
        logger.info('engine node drained', { node: node.nodeId, sessions })
      }
      node?.stopIntake()
      await host?.stop()
      // What MongoDB has not taken yet stays in the journal, where the next owner reads it.
      await mirror.stop(2_000)
      if (ownership) await ownership.stop()
      else directory?.stop()
    },
  }
}

function ready<T>(value: T | undefined): T {
  if (!value) throw new Unavailable('ENGINE_UNAVAILABLE', 'The engine is not started yet', {}, { retryAfterSeconds: 1 })
  return value
}
