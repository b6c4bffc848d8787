// Service configuration, read once from the environment and validated at start so that a
// typo fails loudly before any port is opened.
import { availableParallelism } from 'node:os'
import { WIRE_VERSIONS, type WireVersion } from '../schemas/wire.js'

export type ProcessRole = 'all' | 'gateway' | 'engine' | 'worker'

/**
 * The session write thread takes work off the loop but costs CPU of its own (messages between
 * the threads, a second heap): on a machine with no core to spare the loop is less busy, but the
 * process spends more CPU per message and the reply tail is no better. It pays where a core is
 * free for it (docs/storage.md, "Writes off the event loop").
 */
const WRITE_THREAD_MIN_CORES = 4

export interface Config {
  role: ProcessRole
  port: number
  host: string
  /** Public root for absolute URLs (signed upload URLs); unset: the listener's own origin (listenerOrigin). */
  publicBaseUrl?: string
  mongoUrl?: string
  /** Idempotency records may live in a separate MongoDB; defaults to mongoUrl. */
  idempotencyMongoUrl?: string
  /** NATS server URL(s), comma-separated; set = work queues on JetStream (scale-out). */
  natsUrl?: string
  nats: {
    /** Replicas of a work-queue stream when this process creates it (3 on a NATS cluster). */
    streamReplicas: number
    /** How long JetStream waits for a worker's ack before redelivering its message. */
    ackWaitMs: number
    /**
     * The wire protocol version this process writes on NATS (platform/wire.ts): the newest this
     * build speaks, or the previous one while processes that cannot read the newest still run
     * (docs/deploy.md, wire protocol). It reads both either way, and answers a request in the
     * request's own version.
     */
    wireVersion: WireVersion
  }
  /** Embedded mode keeps uploads here. */
  dataDir: string
  /** How often the embedded store expires what its TTL indexes say is past (0: never; tests sweep themselves). */
  storeSweepMs: number
  apiKeys: string
  maxBodyBytes: number
  maxUploadBytes: number
  /** The public edge's own limits and hygiene (docs/operations.md, "Edge limits and hygiene"). */
  edge: {
    /** JSON bodies nesting objects/arrays deeper than this answer 400 JSON_TOO_DEEP, before parsing. */
    maxJsonDepth: number
    /** Longer URLs (path + query) answer 414; larger header sets answer 431 (when uWS parsed the head). */
    maxUrlBytes: number
    maxHeaderBytes: number
    /** /metrics (and a copy of /healthz) listen here, not on the API port; null = no metrics listener. */
    metricsPort: number | null
    metricsHost: string
    /** Unknown keys one address may present per window before it is answered 429; 0 = no limit. */
    authFailureLimit: number
    authFailureWindowMs: number
    /** Addresses whose failures are remembered at most (LRU). */
    authFailureTrackedAddresses: number
    /** Peers (reverse proxies) whose X-Forwarded-For names the client address. */
    trustedProxies: string[]
    keyCache: { max: number; ttlMs: number; negativeTtlMs: number }
    /** uncaughtException: the process keeps serving until this many within the window (main.ts). */
    uncaughtExceptionLimit: number
    uncaughtExceptionWindowMs: number
  }
  dialer: {
    maxActiveContacts: number
    chunkSize: number
    uploadSigningSecret: string
    workerConcurrency: number
    /** Worker threads that validate large contact loads off the event loop; 0 = inline. */
    validationThreads: number
    /** Apply contact-load chunks in a thread beside the embedded store (DIALER_APPLY_THREAD). */
    applyThread: boolean
    /** Selection-cycle period of the dialing scheduler in worker processes; 0 = no timer. */
    cycleMs: number
    /** Attempts in flight at once per batch (a batch's rules.maxInFlight may lower it). */
    maxInFlightPerBatch: number
    /** Attempts in flight at once per account, over all its batches. */
    maxInFlightPerAccount: number
    /** Attempts started per account in any 60 s (sliding window), over all its batches; 0 = no limit. */
    maxAttemptsPerMinutePerAccount: number
    /** The simulated provider: outcome mix ("answered=30,no_answer=40,..."), latency, RNG seed. */
    simulated: { outcomes: string; latencyMs: number; seed: number }
    /** A contact claimed longer ago than this is presumed lost with its scheduler and dialed again. */
    claimTimeoutMs: number
    /** A scheduler without a beat for this long died: the contacts it claimed are dialed again. */
    schedulerDeadAfterMs: number
    /** Provider per batch channel (DIALER_PROVIDERS "phone=simulated,email=webhook"); rules.provider overrides. */
    providers: Record<'phone' | 'email' | 'whatsapp', 'simulated' | 'webhook' | 'assistant'>
    /** The webhook provider (dialer/providers/webhook.ts). */
    webhook: {
      url?: string
      secret: string
      /** Root of the callback URLs given to the receiver; unset: PUBLIC_BASE_URL, else this process. */
      callbackBaseUrl?: string
      timeoutMs: number
      maxTries: number
      backoffMs: number
      outcomeTimeoutMs: number
      pollMs: number
    }
    /** The assistant provider: crew of batches without rules.crewId. */
    assistant: { crewId: string }
    /** Idempotency records: a 4xx body larger than this is not kept (the key is released); new keys per account per 24 h. */
    idempotency: { maxStoredResponseBytes: number; maxKeysPerAccount: number }
    /** Upload URLs and uploaded files not yet imported that an account may hold at once. */
    maxOpenUploadsPerAccount: number
    /** How often worker processes remove upload files nobody can import any more. */
    uploadSweepMs: number
  }
  channel: {
    heartbeatMs: number
    replayBufferEvents: number
    /** In one process: bytes of serialised events kept per session for replay (the ring is also bounded by count and age). */
    replayBufferBytes: number
    consumerBufferBytes: number
    /** How long a consumer without an open stream is kept for Last-Event-ID resumption. */
    consumerRetentionMs: number
    /** Over NATS: how long a session's events stay in the JetStream log for replay. */
    eventRetentionMs: number
    maxConsumersPerSession: number
    /** The channel over WebSocket (engine/streams/channel-socket.ts). */
    socket: {
      /** Browser origins (scheme://host[:port], lower case) that may open a socket; `*`: any. A handshake without Origin (a server) is not checked. */
      allowedOrigins: string[]
      /** A client frame larger than this closes the socket (1009). */
      maxFrameBytes: number
      /** How long a ticket (POST .../socket/tickets) may wait for its one use. */
      ticketTtlMs: number
    }
    /** The ConversationRelay endpoint (engine/streams/conversation-relay.ts). */
    relay: {
      /** The longest (and default) life of a relay token (POST .../conversation-relay/tokens); reusable until then. */
      tokenTtlMs: number
      /** The platform's signing secret (Twilio auth token): one for every account, and per account. Unset: no signature check. */
      authTokens: { all?: string; byAccount: Record<string, string> }
    }
  }
  engine: {
    /** A session without activity for this long is closed as abandoned. */
    sessionIdleTimeoutMs: number
    /** Deadline of an external tool call that sets no timeoutMs of its own. */
    externalToolTimeoutMs: number
    /** Engine nodes over NATS: node heartbeat period (a node is dead after 3 missed beats). */
    heartbeatMs: number
    /** Engine nodes over NATS: session lease renewal period (a lease lapses after 3 missed renewals). */
    leaseRenewMs: number
    /** Gateways over NATS: how long a command waits for the engine node's answer. */
    requestTimeoutMs: number
    /** Graceful stop of an engine node: longest wait for the replies in progress before hand-over. */
    drainTimeoutMs: number
    /** How often a session host closes orphans: sessions live in the store, on no node, past their idle deadline. */
    reaperIntervalMs: number
    /** Attempts of a write the store refuses before a session is marked not persisted (its next change tries again). */
    persistMaxFailures: number
    /**
     * Session writes to the embedded store run in a thread of their own, off the loop
     * (ENGINE_WRITE_THREAD; default on with 4 or more cores, see WRITE_THREAD_MIN_CORES).
     */
    writeThread: boolean
    /** Consumer ids a session remembers (over every gateway); past it the least recently used is forgotten. */
    maxConsumerIdsPerSession: number
    /** A session quiet this long lets its actor go (woken from its checkpoint by its next command); 0 = never. */
    hibernateAfterMs: number
    /**
     * A live session's checkpoint (its state as of a history seq, what a restore starts from) is
     * written every this many history entries, and when it hibernates, is handed over or stops.
     */
    checkpointEntries: number
    /** How long a live session's report record (counts, last message) may lag its history; 0: written with every batch. */
    recordFlushMs: number
    /** How long the sessions' write-behind gathers changes into one commit (0: the next macrotask). */
    writeWindowMs: number
    /**
     * Engine nodes: how long the session journal on JetStream keeps a record. Longer than a
     * session stays quiet (its idle timeout) plus the longest MongoDB outage to ride out.
     */
    journalRetentionMs: number
    /** Engine nodes: how long a batch of MongoDB writes behind the journal may take before it is tried again (and the store shown as behind). */
    storeWriteTimeoutMs: number
    /** Cluster: how long MongoDB writes behind the journal gather before a batch goes out. */
    storeWriteWindowMs: number
  }
  /** The supervisors' lifecycle feed (engine/supervision/session-feed.ts). */
  supervision: {
    /** How long after the time it carries a session record's write may land (write-behind, clocks of other nodes). */
    feedLagMs: number
    /** Records a feed reads per tick and cursor at most. */
    feedBatch: number
  }
  /** Overload control (platform/overload.ts): past these, new work is refused with 503 and Retry-After. */
  overload: {
    loopDelayMs: number
    /** Percent of a 250 ms window the event loop may be busy (two windows in a row) before new work is refused; 0 = off. */
    loopBusyPercent: number
    maxStreams: number
    /**
     * One account's share of the process's streams (platform/stream-shares.ts): this percent of
     * maxStreams, never fewer than the floor. Work-conserving: only once accountStreamsShortPercent
     * of the limit is held is an account at or past its share refused (429 ACCOUNT_STREAM_LIMIT).
     */
    accountStreamsPercent: number
    accountStreamsFloor: number
    accountStreamsShortPercent: number
    /** Supervisors' feeds and watch streams on this process (they poll the store); the same account share applies. */
    maxSupervisionStreams: number
    maxTurnsInFlight: number
    retryAfterSeconds: number
  }
  /**
   * How long each kind of data is kept, in days after the date it expires by (README
   * "Retention"); 0 keeps it forever. Enforced by TTL indexes (MongoDB's monitor, the embedded
   * store's sweep), so a change applies to the data already stored at the next start.
   */
  retention: {
    /** Session records (report rows, last message), after the session started. */
    sessionRecordsDays: number
    /** Pre-aggregated report blocks (counts only), after the block's start: never shorter than the records. */
    reportBlocksDays: number
    /** Dialing attempts (address, outcome, detail), after the attempt started. */
    attemptsDays: number
    /** Batch audit log entries, after they were written. */
    batchLogsDays: number
    /** A completed, archived or deleted batch with its contacts and import errors, after it finished. */
    finishedBatchesDays: number
  }
  crewsFile: string
  reportsFile: string
  logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent'
}

export class ConfigError extends Error {
  override name = 'ConfigError'
}

/**
 * http://host:port of a listener, from where it listens (never from a request's headers, which
 * the client writes). A wildcard address names no host a client can use: loopback stands in.
 */
export function listenerOrigin(host: string, port: number): string {
  const named = host === '0.0.0.0' || host === '::' || host === '' ? '127.0.0.1' : host
  return `http://${named.includes(':') ? `[${named}]` : named}:${port}`
}

type Env = Record<string, string | undefined>

function int(env: Env, name: string, fallback: number, min = 0): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be a whole number, got "${raw}"`)
  const value = Number(raw)
  if (value < min) throw new ConfigError(`${name} must be at least ${min}, got ${value}`)
  return value
}

function percent(env: Env, name: string, fallback: number, min = 1): number {
  const value = int(env, name, fallback, min)
  if (value > 100) throw new ConfigError(`${name} must be at most 100, got ${value}`)
  return value
}

function url(env: Env, name: string, schemes: string[]): string | undefined {
  const raw = env[name]
  if (raw === undefined || raw === '') return undefined
  let parsed: URL
  try {
    parsed = new URL(raw)
  } catch {
    throw new ConfigError(`${name} is not a valid URL`)
  }
  if (!schemes.includes(parsed.protocol.replace(/:$/, ''))) {
    throw new ConfigError(`${name} must use one of ${schemes.join(', ')}; got ${parsed.protocol}`)
  }
  return raw
}

/** A list of browser origins, `*` alone for any; each checked as scheme://host[:port] and kept in lower case. */
function origins(env: Env, name: string): string[] {
  const list = (env[name] ?? '').split(',').map(o => o.trim().replace(/\/$/, '').toLowerCase()).filter(Boolean)
  for (const origin of list) {
    if (origin === '*') continue
    let parsed: URL
    try {
      parsed = new URL(origin)
    } catch {
      throw new ConfigError(`${name}: "${origin}" is not an origin (scheme://host[:port])`)
    }
    if (parsed.origin.toLowerCase() !== origin) throw new ConfigError(`${name}: "${origin}" is not an origin (scheme://host[:port], no path)`)
  }
  return list
}

function oneOf<T extends string>(env: Env, name: string, values: readonly T[], fallback: T): T {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (!values.includes(raw as T)) {
    throw new ConfigError(`${name} must be one of ${values.join(', ')}; got "${raw}"`)
  }
  return raw as T
}

export function loadConfig(env: Env = process.env): Config {
  const port = int(env, 'PORT', 8080)
  if (port > 65535) throw new ConfigError(`PORT must be at most 65535, got ${port}`)
  const host = env.HOST || '0.0.0.0'
  const mongoUrl = url(env, 'MONGO_URL', ['mongodb', 'mongodb+srv'])
  const signingSecret = env.UPLOAD_SIGNING_SECRET || ''
  const role = oneOf(env, 'ROLE', ['all', 'gateway', 'engine', 'worker'] as const, 'all')
  // Several seed URLs of a NATS cluster may be listed, comma-separated.
  const natsUrls = (env.NATS_URL ?? '').split(',').map(u => u.trim()).filter(Boolean)
  const natsUrl = natsUrls.map(u => url({ NATS_URL: u }, 'NATS_URL', ['nats', 'tls', 'ws', 'wss'])).join(',') || undefined
  if ((role === 'gateway' || role === 'worker') && (!natsUrl || !mongoUrl)) {
    throw new ConfigError(`ROLE=${role} needs NATS_URL and MONGO_URL: gateways and workers share work through NATS and state through MongoDB`)
  }
  if (role === 'engine' && (!natsUrl || !mongoUrl)) {
    throw new ConfigError('ROLE=engine needs NATS_URL and MONGO_URL: engine nodes take commands over NATS and keep sessions in MongoDB')
  }
  if ((mongoUrl || env.NATS_URL) && signingSecret.length > 0 && signingSecret.length < 32) {
    throw new ConfigError('UPLOAD_SIGNING_SECRET must be at least 32 characters')
  }
  return {
    role,
    port,
    host,
    publicBaseUrl: env.PUBLIC_BASE_URL ? env.PUBLIC_BASE_URL.replace(/\/$/, '') : undefined,
    mongoUrl,
    idempotencyMongoUrl: url(env, 'IDEMPOTENCY_MONGO_URL', ['mongodb', 'mongodb+srv']) ?? mongoUrl,
    natsUrl,
    nats: {
      streamReplicas: int(env, 'NATS_STREAM_REPLICAS', 1, 1),
      ackWaitMs: int(env, 'NATS_ACK_WAIT_MS', 30_000, 1000),
      wireVersion: Number(oneOf(env, 'NATS_WIRE_VERSION', WIRE_VERSIONS.map(String), String(WIRE_VERSIONS[WIRE_VERSIONS.length - 1]))) as WireVersion,
    },
    dataDir: env.DATA_DIR || '.data',
    storeSweepMs: int(env, 'STORE_TTL_SWEEP_MS', 1000, 0),
    apiKeys: env.API_KEYS ?? '',
    maxBodyBytes: int(env, 'MAX_BODY_BYTES', 5 * 1024 * 1024, 1024),
    maxUploadBytes: int(env, 'MAX_UPLOAD_BYTES', 1024 * 1024 * 1024, 1024),
    edge: {
      maxJsonDepth: int(env, 'MAX_JSON_DEPTH', 64, 1),
      maxUrlBytes: int(env, 'MAX_URL_BYTES', 8 * 1024, 256),
      maxHeaderBytes: int(env, 'MAX_HEADER_BYTES', 16 * 1024, 1024),
      metricsPort: metricsPort(env, port),
      metricsHost: env.METRICS_HOST || '127.0.0.1',
      authFailureLimit: int(env, 'AUTH_FAILURE_LIMIT', 20, 0),
      authFailureWindowMs: int(env, 'AUTH_FAILURE_WINDOW_MS', 60_000, 1000),
      authFailureTrackedAddresses: int(env, 'AUTH_FAILURE_TRACKED_ADDRESSES', 10_000, 1),
      trustedProxies: (env.TRUSTED_PROXIES ?? '').split(',').map(a => a.trim()).filter(Boolean),
      keyCache: {
        max: int(env, 'KEY_CACHE_MAX', 10_000, 1),
        ttlMs: int(env, 'KEY_CACHE_TTL_MS', 10_000, 0),
        negativeTtlMs: int(env, 'KEY_CACHE_NEGATIVE_TTL_MS', 2_000, 0),
      },
      uncaughtExceptionLimit: int(env, 'UNCAUGHT_EXCEPTION_LIMIT', 10, 1),
      uncaughtExceptionWindowMs: int(env, 'UNCAUGHT_EXCEPTION_WINDOW_MS', 60_000, 1000),
    },
    dialer: {
      maxActiveContacts: int(env, 'DIALER_MAX_ACTIVE_CONTACTS', 1_000_000, 1),
      chunkSize: int(env, 'DIALER_CHUNK_SIZE', 250, 1),
      // A random secret per process is fine for one embedded node; a cluster must share one.
      uploadSigningSecret: signingSecret || randomSecret(),
      workerConcurrency: int(env, 'DIALER_WORKER_CONCURRENCY', 4, 1),
      validationThreads: int(env, 'DIALER_VALIDATION_THREADS', 1, 0),
      applyThread: int(env, 'DIALER_APPLY_THREAD', 1, 0) === 1,
      cycleMs: int(env, 'DIALER_CYCLE_MS', 1000, 0),
      maxInFlightPerBatch: int(env, 'DIALER_MAX_IN_FLIGHT_PER_BATCH', 50, 1),
      maxInFlightPerAccount: int(env, 'DIALER_MAX_IN_FLIGHT_PER_ACCOUNT', 200, 1),
      maxAttemptsPerMinutePerAccount: int(env, 'DIALER_MAX_ATTEMPTS_PER_MINUTE_PER_ACCOUNT', 0, 0),
      simulated: {
        outcomes: env.DIALER_SIM_OUTCOMES || 'answered=35,no_answer=30,busy=15,voicemail=15,failed=5',
        latencyMs: int(env, 'DIALER_SIM_LATENCY_MS', 2000, 0),
        seed: int(env, 'DIALER_SIM_SEED', 1, 0),
      },
      claimTimeoutMs: int(env, 'DIALER_CLAIM_TIMEOUT_MS', 60 * 60_000, 1000),
      schedulerDeadAfterMs: int(env, 'DIALER_SCHEDULER_DEAD_AFTER_MS', 60_000, 1000),
      providers: dialerProviders(env),
      webhook: {
        url: url(env, 'DIALER_WEBHOOK_URL', ['http', 'https']),
        secret: webhookSecret(env),
        callbackBaseUrl: url(env, 'DIALER_WEBHOOK_CALLBACK_URL', ['http', 'https'])?.replace(/\/$/, ''),
        timeoutMs: int(env, 'DIALER_WEBHOOK_TIMEOUT_MS', 5000, 10),
        maxTries: int(env, 'DIALER_WEBHOOK_MAX_TRIES', 5, 1),
        backoffMs: int(env, 'DIALER_WEBHOOK_BACKOFF_MS', 500, 0),
        outcomeTimeoutMs: int(env, 'DIALER_WEBHOOK_OUTCOME_TIMEOUT_MS', 15 * 60_000, 10),
        pollMs: int(env, 'DIALER_WEBHOOK_POLL_MS', 1000, 10),
      },
      assistant: { crewId: env.DIALER_ASSISTANT_CREW || 'demo' },
      idempotency: {
        maxStoredResponseBytes: int(env, 'IDEMPOTENCY_MAX_STORED_RESPONSE_BYTES', 16 * 1024, 256),
        maxKeysPerAccount: int(env, 'IDEMPOTENCY_MAX_KEYS_PER_ACCOUNT', 100_000, 1),
      },
      maxOpenUploadsPerAccount: int(env, 'DIALER_MAX_OPEN_UPLOADS_PER_ACCOUNT', 20, 1),
      uploadSweepMs: int(env, 'DIALER_UPLOAD_SWEEP_MS', 10 * 60_000, 10),
    },
    channel: {
      heartbeatMs: int(env, 'SSE_HEARTBEAT_MS', 30_000, 10),
      replayBufferEvents: int(env, 'SSE_REPLAY_BUFFER_EVENTS', 1000, 1),
      replayBufferBytes: int(env, 'SSE_REPLAY_BUFFER_BYTES', 32 * 1024, 1024),
      consumerBufferBytes: int(env, 'SSE_CONSUMER_BUFFER_BYTES', 1024 * 1024, 1024),
      consumerRetentionMs: int(env, 'SSE_CONSUMER_RETENTION_MS', 5 * 60_000, 0),
      eventRetentionMs: int(env, 'SSE_EVENT_RETENTION_MS', 60 * 60_000, 1000),
      maxConsumersPerSession: int(env, 'SSE_MAX_CONSUMERS_PER_SESSION', 16, 1),
      socket: {
        allowedOrigins: origins(env, 'CHANNEL_SOCKET_ALLOWED_ORIGINS'),
        maxFrameBytes: int(env, 'CHANNEL_SOCKET_MAX_FRAME_BYTES', 128 * 1024, 1024),
        ticketTtlMs: int(env, 'CHANNEL_SOCKET_TICKET_TTL_MS', 30_000, 1000),
      },
      relay: {
        tokenTtlMs: int(env, 'CONVERSATION_RELAY_TOKEN_TTL_MS', 24 * 60 * 60_000, 1000),
        authTokens: relayAuthTokens(env),
      },
    },
    engine: {
      sessionIdleTimeoutMs: int(env, 'SESSION_IDLE_TIMEOUT_MS', 30 * 60_000, 100),
      externalToolTimeoutMs: int(env, 'EXTERNAL_TOOL_TIMEOUT_MS', 120_000, 10),
      heartbeatMs: int(env, 'ENGINE_HEARTBEAT_MS', 1000, 50),
      leaseRenewMs: int(env, 'ENGINE_LEASE_RENEW_MS', 2000, 50),
      requestTimeoutMs: int(env, 'ENGINE_REQUEST_TIMEOUT_MS', 15_000, 100),
      drainTimeoutMs: int(env, 'ENGINE_DRAIN_TIMEOUT_MS', 10_000, 0),
      reaperIntervalMs: int(env, 'ENGINE_REAPER_INTERVAL_MS', 60_000, 10),
      persistMaxFailures: int(env, 'ENGINE_PERSIST_MAX_FAILURES', 8, 1),
      writeThread: int(env, 'ENGINE_WRITE_THREAD', availableParallelism() >= WRITE_THREAD_MIN_CORES ? 1 : 0, 0) === 1,
      maxConsumerIdsPerSession: int(env, 'ENGINE_MAX_CONSUMER_IDS_PER_SESSION', 64, 1),
      hibernateAfterMs: int(env, 'ENGINE_HIBERNATE_AFTER_MS', 10_000, 0),
      checkpointEntries: int(env, 'ENGINE_CHECKPOINT_ENTRIES', 60, 1),
      recordFlushMs: int(env, 'ENGINE_RECORD_FLUSH_MS', 5_000, 0),
      writeWindowMs: int(env, 'ENGINE_WRITE_WINDOW_MS', 2, 0),
      journalRetentionMs: int(env, 'ENGINE_JOURNAL_RETENTION_MS', 24 * 3_600_000, 60_000),
      storeWriteTimeoutMs: int(env, 'ENGINE_STORE_WRITE_TIMEOUT_MS', 5_000, 100),
      storeWriteWindowMs: int(env, 'ENGINE_STORE_WRITE_WINDOW_MS', 50, 1),
    },
    supervision: {
      feedLagMs: int(env, 'SUPERVISION_FEED_LAG_MS', 2000, 0),
      feedBatch: int(env, 'SUPERVISION_FEED_BATCH', 1000, 1),
    },
    overload: {
      loopDelayMs: int(env, 'OVERLOAD_LOOP_DELAY_MS', 200, 0),
      loopBusyPercent: int(env, 'OVERLOAD_LOOP_BUSY_PERCENT', 0, 0),
      maxStreams: int(env, 'OVERLOAD_MAX_STREAMS', 20_000, 0),
      accountStreamsPercent: percent(env, 'OVERLOAD_ACCOUNT_STREAMS_PERCENT', 25),
      accountStreamsFloor: int(env, 'OVERLOAD_ACCOUNT_STREAMS_FLOOR', 100, 1),
      accountStreamsShortPercent: percent(env, 'OVERLOAD_ACCOUNT_STREAMS_SHORT_PERCENT', 90, 0),
      maxSupervisionStreams: int(env, 'OVERLOAD_MAX_SUPERVISION_STREAMS', 1000, 0),
      maxTurnsInFlight: int(env, 'ENGINE_MAX_TURNS_IN_FLIGHT', 2000, 0),
      retryAfterSeconds: int(env, 'OVERLOAD_RETRY_AFTER_S', 1, 1),
    },
    retention: retention(env),
    crewsFile: env.CREWS_FILE || 'config/crews.json',
    reportsFile: env.REPORTS_FILE || 'config/reports.json',
    logLevel: oneOf(env, 'LOG_LEVEL', ['debug', 'info', 'warn', 'error', 'silent'] as const, 'info'),
  }
}

/**
 * METRICS_PORT: a port, or "off". Unset: 9464 (the Prometheus exporter convention), except when
 * PORT is 0 (tests, benchmarks: any free port), where the metrics port is any free port too.
 */
function metricsPort(env: Env, apiPort: number): number | null {
  const raw = env.METRICS_PORT
  if (raw === 'off') return null
  if (raw === undefined || raw === '') return apiPort === 0 ? 0 : 9464
  const value = int(env, 'METRICS_PORT', 9464)
  if (value > 65535) throw new ConfigError(`METRICS_PORT must be at most 65535 or "off", got ${value}`)
  if (value !== 0 && value === apiPort) throw new ConfigError('METRICS_PORT must differ from PORT: metrics are not served on the API port')
  return value
}

/** The longest TTL mongod accepts (expireAfterSeconds is a 32-bit integer): about 68 years. */
const MAX_RETENTION_DAYS = Math.floor(2_147_483_647 / 86_400)

function retentionDays(env: Env, name: string, fallback: number): number {
  const days = int(env, name, fallback, 0)
  if (days > MAX_RETENTION_DAYS) throw new ConfigError(`${name} must be at most ${MAX_RETENTION_DAYS} days (or 0: kept forever), got ${days}`)
  return days
}

/**
 * The defaults: session records 400 days (a month compared with the same month a year before,
 * transcripts no longer), report blocks three years (counts only, no person in them), attempts
 * 90 days (disputes and pacing), the batch log a year (audit), finished batches and their
 * contacts 90 days after they finish.
 */
function retention(env: Env): Config['retention'] {
  const config = {
    sessionRecordsDays: retentionDays(env, 'SESSION_RECORD_RETENTION_DAYS', 400),
    reportBlocksDays: retentionDays(env, 'REPORT_BLOCK_RETENTION_DAYS', 1095),
    attemptsDays: retentionDays(env, 'ATTEMPT_RETENTION_DAYS', 90),
    batchLogsDays: retentionDays(env, 'BATCH_LOG_RETENTION_DAYS', 365),
    finishedBatchesDays: retentionDays(env, 'FINISHED_BATCH_RETENTION_DAYS', 90),
  }
  // Reports read the records where a range does not fall on the blocks' 15-minute grid, and
  // sessions-detail counts its pages from the blocks: blocks shorter than the records would
  // leave ranges that are half answered.
  const forever = (days: number) => (days === 0 ? Infinity : days)
  if (forever(config.reportBlocksDays) < forever(config.sessionRecordsDays)) {
    throw new ConfigError(
      `REPORT_BLOCK_RETENTION_DAYS (${config.reportBlocksDays || 'forever'}) must be at least SESSION_RECORD_RETENTION_DAYS (${config.sessionRecordsDays || 'forever'}): the blocks aggregate the records`,
    )
  }
  return config
}

/** DIALER_PROVIDERS: "channel=provider,..." over the defaults (all simulated); checked at start. */
function dialerProviders(env: Env): Config['dialer']['providers'] {
  const providers: Config['dialer']['providers'] = { phone: 'simulated', email: 'simulated', whatsapp: 'simulated' }
  for (const part of (env.DIALER_PROVIDERS ?? '').split(',').map(p => p.trim()).filter(Boolean)) {
    const [channel, name] = part.split('=').map(s => s.trim())
    if (!channel || !(channel in providers)) throw new ConfigError(`DIALER_PROVIDERS: unknown channel "${channel}" (phone, email, whatsapp)`)
    if (name !== 'simulated' && name !== 'webhook' && name !== 'assistant') throw new ConfigError(`DIALER_PROVIDERS: unknown provider "${name}" for ${channel} (simulated, webhook, assistant)`)
    if (name === 'assistant' && channel === 'email') throw new ConfigError('DIALER_PROVIDERS: the assistant provider dials phone and whatsapp only')
    providers[channel as keyof typeof providers] = name
  }
  if (Object.values(providers).includes('webhook') && (!env.DIALER_WEBHOOK_URL || !env.DIALER_WEBHOOK_SECRET)) {
    throw new ConfigError('DIALER_PROVIDERS uses webhook: DIALER_WEBHOOK_URL and DIALER_WEBHOOK_SECRET must be set')
  }
  return providers
}

/**
 * CONVERSATION_RELAY_AUTH_TOKEN: comma-separated; `account=secret` for one account, a bare
 * `secret` for every account without one of its own.
 */
function relayAuthTokens(env: Env): Config['channel']['relay']['authTokens'] {
  const tokens: Config['channel']['relay']['authTokens'] = { byAccount: {} }
  for (const part of (env.CONVERSATION_RELAY_AUTH_TOKEN ?? '').split(',').map(p => p.trim()).filter(Boolean)) {
    const eq = part.indexOf('=')
    if (eq < 0) {
      if (tokens.all !== undefined) throw new ConfigError('CONVERSATION_RELAY_AUTH_TOKEN: more than one secret for every account')
      tokens.all = part
      continue
    }
    const account = part.slice(0, eq).trim()
    const secret = part.slice(eq + 1).trim()
    if (!account || !secret) throw new ConfigError(`CONVERSATION_RELAY_AUTH_TOKEN: "${account}=…" needs an account and a secret`)
    tokens.byAccount[account] = secret
  }
  return tokens
}

const MIN_WEBHOOK_SECRET_BYTES = 32

/**
 * DIALER_WEBHOOK_SECRET: unset (no webhook; callbacks are refused) or at least 32 bytes. It is
 * the HMAC key of attempts and of the callbacks that set outcomes: a short one can be guessed
 * offline from a single captured request.
 */
function webhookSecret(env: Env): string {
  const secret = env.DIALER_WEBHOOK_SECRET ?? ''
  const bytes = Buffer.byteLength(secret, 'utf8')
  if (secret !== '' && bytes < MIN_WEBHOOK_SECRET_BYTES) {
    throw new ConfigError(`DIALER_WEBHOOK_SECRET must be at least ${MIN_WEBHOOK_SECRET_BYTES} bytes (got ${bytes}); generate one with: openssl rand -hex 32`)
  }
  return secret
}

function randomSecret(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url')
}
