// One prom-client registry per service instance (tests run several in one process, so the
// global default registry is never used).
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

export interface Metrics {
  registry: Registry
  httpRequests: Counter<'route' | 'method' | 'status'>
  httpDuration: Histogram<'route' | 'method'>
  /** Error answers by status and error code (FAULT: a throw contained where no answer could carry it). */
  httpErrors: Counter<'status' | 'code'>
  /** uncaughtException / unhandledRejection reaching the process (see main.ts). */
  processErrors: Counter<'kind'>
  apiKeyCacheEntries: Gauge<'kind'>
  queueDepth: Gauge<'queue'>
  operationsInFlight: Gauge<'kind'>
  chunksProcessed: Counter<'outcome'>
  /** Chunks applied by the thread beside the embedded store (off the event loop). */
  chunksAppliedOffLoop: Counter
  sseStreamsOpen: Gauge
  sseClientDisconnects: Counter
  sseSlowConsumersDropped: Counter
  /** The channel over WebSocket: sockets holding a consumer, and those the client closed. */
  channelSocketsOpen: Gauge
  channelSocketClientCloses: Counter
  sessionsLive: Gauge<'crew'>
  /** Failed write-behind attempts of live sessions (each retry counts). */
  sessionPersistenceFailures: Counter
  /** Live sessions whose write-behind gave up: not saved until a later write succeeds. */
  sessionsPersistenceStopped: Gauge
  sessionsHibernated: Gauge
  /** Cluster: session writes acknowledged by the journal (JetStream) and not yet in MongoDB. */
  storeWritesBehind: Gauge
  /** Cluster: 1 while MongoDB refuses or does not answer the writes behind the journal. */
  storeBehind: Gauge
  overloadRefused: Counter<'reason'>
  /** Stream places taken on this process (platform/stream-shares.ts), by kind: channel, supervision. */
  streamPlacesHeld: Gauge<'kind'>
  /** Streams refused 429 ACCOUNT_STREAM_LIMIT: places were short and the account held its share, by kind. */
  accountStreamsRefused: Counter<'kind'>
  eventLoopDelayP99: Gauge
  messagePace: Gauge
  /** NATS messages refused at this process's edge (platform/wire.ts), by message and reason. */
  wireRefused: Counter<'message' | 'reason'>
}

export function createMetrics(options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry()
  if (options.defaultMetrics) collectDefaultMetrics({ register: registry })
  const registers = [registry]
  return {
    registry,
    httpRequests: new Counter({
      name: 'switchboard_http_requests_total',
      help: 'HTTP requests by route template, method and status code',
      labelNames: ['route', 'method', 'status'],
      registers,
    }),
    httpDuration: new Histogram({
      name: 'switchboard_http_request_duration_seconds',
      help: 'HTTP request latency by route template (until the response is complete or the stream opens)',
      labelNames: ['route', 'method'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    }),
    httpErrors: new Counter({
      name: 'switchboard_http_errors_total',
      help: 'Error answers by status and error code; code FAULT counts throws contained where no answer could carry them',
      labelNames: ['status', 'code'],
      registers,
    }),
    processErrors: new Counter({
      name: 'switchboard_process_errors_total',
      help: 'Errors that reached the process: uncaught_exception, unhandled_rejection',
      labelNames: ['kind'],
      registers,
    }),
    apiKeyCacheEntries: new Gauge({
      name: 'switchboard_api_key_cache_entries',
      help: 'API-key lookups cached by this process: known keys and (briefly) unknown ones',
      labelNames: ['kind'],
      registers,
    }),
    queueDepth: new Gauge({
      name: 'switchboard_queue_depth',
      help: 'Messages waiting in a work queue',
      labelNames: ['queue'],
      registers,
    }),
    operationsInFlight: new Gauge({
      name: 'switchboard_operations_in_flight',
      help: 'Dialer operations not yet finished, by kind',
      labelNames: ['kind'],
      registers,
    }),
    chunksProcessed: new Counter({
      name: 'switchboard_dialer_chunks_processed_total',
      help: 'Contact-load chunks processed by workers',
      labelNames: ['outcome'],
      registers,
    }),
    chunksAppliedOffLoop: new Counter({
      name: 'switchboard_dialer_chunks_applied_off_loop_total',
      help: 'Contact-load chunks applied by the thread beside the embedded store instead of on the event loop',
      registers,
    }),
    sseStreamsOpen: new Gauge({ name: 'switchboard_sse_streams_open', help: 'Open SSE streams', registers }),
    sseClientDisconnects: new Counter({
      name: 'switchboard_sse_client_disconnects_total',
      help: 'SSE streams closed by the client side',
      registers,
    }),
    sseSlowConsumersDropped: new Counter({
      name: 'switchboard_sse_slow_consumers_dropped_total',
      help: 'Channel consumers (SSE or WebSocket) dropped because their buffer overflowed',
      registers,
    }),
    channelSocketsOpen: new Gauge({ name: 'switchboard_channel_sockets_open', help: 'Open channel WebSockets holding a consumer', registers }),
    channelSocketClientCloses: new Counter({
      name: 'switchboard_channel_socket_client_closes_total',
      help: 'Channel WebSockets closed by the client side',
      registers,
    }),
    sessionsLive: new Gauge({
      name: 'switchboard_sessions_live',
      help: 'Live assistant sessions hosted by this process, by crew',
      labelNames: ['crew'],
      registers,
    }),
    sessionPersistenceFailures: new Counter({
      name: 'switchboard_session_persistence_failures_total',
      help: 'Failed write-behind attempts of live sessions (history, snapshot); each retry counts',
      registers,
    }),
    sessionsPersistenceStopped: new Gauge({
      name: 'switchboard_sessions_persistence_stopped',
      help: 'Live sessions whose write-behind gave up after repeated failures (tried again on their next change)',
      registers,
    }),
    storeWritesBehind: new Gauge({
      name: 'switchboard_store_writes_behind',
      help: 'Session writes stored in the JetStream journal and not yet in MongoDB (engine nodes)',
      registers,
    }),
    storeBehind: new Gauge({
      name: 'switchboard_store_behind',
      help: '1 while MongoDB fails the session writes behind the journal (they are retried); 0 otherwise',
      registers,
    }),
    overloadRefused: new Counter({
      name: 'switchboard_overload_refused_total',
      help: 'New sessions, streams and messages refused with 503 because the process is past what it can serve, by reason (loop_delay, loop_busy, streams, supervision_streams, turns)',
      labelNames: ['reason'],
      registers,
    }),
    streamPlacesHeld: new Gauge({
      name: 'switchboard_stream_places_held',
      help: 'Stream places taken on this process (open streams and those being opened), by kind: channel (OVERLOAD_MAX_STREAMS), supervision (feeds and watches, OVERLOAD_MAX_SUPERVISION_STREAMS)',
      labelNames: ['kind'],
      registers,
    }),
    accountStreamsRefused: new Counter({
      name: 'switchboard_account_streams_refused_total',
      help: "New streams refused with 429 ACCOUNT_STREAM_LIMIT because places were short and the account held its share or more, by kind (channel, supervision)",
      labelNames: ['kind'],
      registers,
    }),
    eventLoopDelayP99: new Gauge({
      name: 'switchboard_event_loop_delay_p99_seconds',
      help: 'p99 event-loop delay over the last 250 ms window (what the overload guard watches)',
      registers,
    }),
    messagePace: new Gauge({
      name: 'switchboard_overload_message_pace',
      help: 'User messages per second this process lets in while its event loop is past OVERLOAD_LOOP_BUSY_PERCENT; -1 = not paced',
      registers,
    }),
    wireRefused: new Counter({
      name: 'switchboard_wire_refused_total',
      help: 'NATS messages refused at the edge of this process (docs/deploy.md, wire protocol), by message and reason: json (not JSON), version (a protocol version this build does not read), schema (not what its version says)',
      labelNames: ['message', 'reason'],
      registers,
    }),
    sessionsHibernated: new Gauge({
      name: 'switchboard_sessions_hibernated',
      help: 'Live sessions whose actor is let go while they are quiet (woken from their snapshot by their next command)',
      registers,
    }),
  }
}
