// Work queues on NATS JetStream, for a scale-out deployment (NATS_URL set).
//
// One stream per queue (`SB_<NAME>`, subject `sb.queue.<name>`, retention work-queue, file
// storage) and one durable pull consumer (`workers`) shared by every process that consumes the
// queue. Delivery is at-least-once with explicit ack:
//   - a message is acked after its handler resolves (the work-queue stream then deletes it);
//   - a handler that throws is nak'ed with a short backoff (as the in-memory bus does), and
//     Delivery.attempt is JetStream's delivery count;
//   - a process that dies mid-message (kill -9) never acks: JetStream redelivers the message
//     to another worker after ack_wait. While a handler runs, the message is kept alive with
//     progress acks (`working`), so a slow handler is not redelivered behind its back;
//   - after maxDeliveries the message is acked and logged as dropped, like the in-memory bus.
// Handlers must therefore be idempotent (the dialer's chunk application is).
//
// Messages carry the wire protocol's version and are checked against their queue's schema when
// taken (platform/wire.ts): a message that is not JSON or does not match is acked and dropped
// (it would never match); one of a version this build does not read is handed back for a worker
// that does (a newer one, mid-upgrade) until its last delivery.
//
// Each consume() runs `concurrency` pull lanes; a lane fetches one message and only asks for
// the next once it has handled it, so a process never holds more than `concurrency` messages
// and nothing waits in a local buffer while its ack_wait runs out.
import { coalesceNatsWrites } from './nats-writes.js'
import { setTimeout as sleep } from 'node:timers/promises'
import { randomUUID } from 'node:crypto'
import { connect, nanos, type NatsConnection } from '@nats-io/transport-node'
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  JetStreamApiCodes,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream'
import type { Bus, ConsumeOptions, Delivery, QueueOptions, WorkQueue } from './types.js'
import type { Logger } from '../logger.js'
import { Wire, type WireMessage } from '../wire.js'

export interface NatsBusOptions {
  /** One URL or several (comma-separated string or array): seeds of the NATS cluster. */
  servers: string | string[]
  /** Client name shown by the server (monitoring). */
  name?: string
  /** How long JetStream waits for an ack before redelivering (a dead worker's message). */
  ackWaitMs?: number
  /** Replicas of each stream when it is created (3 on a NATS cluster). */
  replicas?: number
  streamPrefix?: string
  subjectPrefix?: string
  /** How long one pull request waits for a message (min 1000). */
  fetchExpiresMs?: number
  /** How long publish() keeps retrying (e.g. across a NATS restart) before it fails. */
  publishTimeoutMs?: number
  /** Encodes and checks the messages (default: this build's version, refusals logged, not counted). */
  wire?: Wire
}

const DEFAULT_MAX_DELIVERIES = 5
const CONSUMER = 'workers'

export function streamName(prefix: string, queue: string) {
  return `${prefix}_${queue.toUpperCase().replace(/[^A-Z0-9_-]/g, '_')}`
}

class NatsQueue<T> implements WorkQueue<T> {
  readonly stream: string
  readonly subject: string
  private streamReady?: Promise<void>
  private lastDepth = 0
  private depthRefreshedAt = 0

  constructor(
    readonly name: string,
    private readonly bus: NatsBus,
    private readonly logger: Logger,
    private readonly message: WireMessage,
  ) {
    this.stream = streamName(bus.options.streamPrefix, name)
    this.subject = `${bus.options.subjectPrefix}.${name}`
  }

  /** Creates the stream unless it exists (an existing one is used as it is: operators may tune it). */
  ensureStream(): Promise<void> {
    this.streamReady ??= (async () => {
      const jsm = this.bus.jsm
      try {
        await jsm.streams.info(this.stream)
        return
      } catch (error) {
        if (!isApiError(error, JetStreamApiCodes.StreamNotFound)) throw error
      }
      try {
        await jsm.streams.add({
          name: this.stream,
          subjects: [this.subject],
          retention: RetentionPolicy.Workqueue,
          storage: StorageType.File,
          num_replicas: this.bus.options.replicas,
          duplicate_window: nanos(2 * 60_000),
        })
        this.logger.info('nats stream created', { stream: this.stream, subject: this.subject })
      } catch (error) {
        await jsm.streams.info(this.stream) // created concurrently by another process: fine
      }
    })().catch(error => {
      this.streamReady = undefined
      throw error
    })
    return this.streamReady
  }

  /** The durable consumer every worker shares; its ack_wait and max_deliver follow the code. */
  private async ensureConsumer(maxDeliver: number) {
    await this.ensureStream()
    const jsm = this.bus.jsm
    const wanted = {
      durable_name: CONSUMER,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: nanos(this.bus.options.ackWaitMs),
      max_deliver: maxDeliver,
    }
    try {
      const info = await jsm.consumers.info(this.stream, CONSUMER)
      if (info.config.ack_wait !== wanted.ack_wait || info.config.max_deliver !== wanted.max_deliver) {
        await jsm.consumers.update(this.stream, CONSUMER, { ack_wait: wanted.ack_wait, max_deliver: wanted.max_deliver })
      }
    } catch (error) {
      if (!isApiError(error, JetStreamApiCodes.ConsumerNotFound)) throw error
      try {
        await jsm.consumers.add(this.stream, wanted)
      } catch {
        await jsm.consumers.info(this.stream, CONSUMER) // added concurrently by another worker
      }
    }
  }

  async publish(message: T) {
    const payload = this.bus.wire.encode(message as object)
    const msgID = randomUUID() // a retried publish is deduplicated by the stream
    const deadline = Date.now() + this.bus.options.publishTimeoutMs
    for (let attempt = 1; ; attempt++) {
      try {
        await this.ensureStream()
        await this.bus.js.publish(this.subject, payload, { msgID, expect: { streamName: this.stream } })
        return
      } catch (error) {
        if (this.bus.closed || Date.now() + 250 > deadline) throw error
        this.logger.warn('nats publish failed, retrying', { queue: this.name, attempt, error })
        await sleep(Math.min(1000, 100 * attempt))
      }
    }
  }

  /** The last known number of messages in the stream (queued or in flight); refreshed in the background. */
  depth() {
    const now = Date.now()
    if (!this.bus.closed && now - this.depthRefreshedAt > 1000) {
      this.depthRefreshedAt = now
      this.bus.jsm.streams.info(this.stream).then(
        info => (this.lastDepth = info.state.messages),
        () => {},
      )
    }
    return this.lastDepth
  }

  consume(handler: (delivery: Delivery<T>) => Promise<void>, options: ConsumeOptions) {
    const maxDeliveries = options.maxDeliveries ?? DEFAULT_MAX_DELIVERIES
    let stopped = false
    const fetches = new Set<ConsumerMessages>()
    let wake: (() => void)[] = []
    const pause = (ms: number) => new Promise<void>(resolve => {
      const timer = setTimeout(resolve, ms)
      wake.push(() => (clearTimeout(timer), resolve()))
    })

    const lane = async (id: number) => {
      let failures = 0
      while (!stopped && !this.bus.closed) {
        let msg: JsMsg | undefined
        try {
          await this.ensureConsumer(maxDeliveries)
          const consumer = await this.bus.js.consumers.get(this.stream, CONSUMER)
          const batch = await consumer.fetch({ max_messages: 1, expires: this.bus.options.fetchExpiresMs })
          fetches.add(batch)
          try {
            for await (const m of batch) msg = m
          } finally {
            fetches.delete(batch)
          }
          failures = 0
        } catch (error) {
          if (stopped || this.bus.closed) break
          failures++
          // Disconnected, server restarting, stream or consumer gone: back off and start over.
          this.logger[failures === 1 ? 'warn' : 'debug']('nats pull failed, retrying', { queue: this.name, lane: id, error })
          await pause(Math.min(2000, 100 * 2 ** Math.min(failures, 5)))
          continue
        }
        if (!msg) continue
        if (stopped) {
          safely(() => msg!.nak())
          break
        }
        await this.handle(msg, handler, maxDeliveries)
      }
    }

    const lanes = Array.from({ length: Math.max(1, options.concurrency) }, (_, i) => lane(i))
    return async () => {
      stopped = true
      for (const batch of fetches) safely(() => batch.stop())
      for (const resolve of wake.splice(0)) resolve()
      wake = []
      await Promise.all(lanes)
    }
  }

  private async handle(msg: JsMsg, handler: (delivery: Delivery<T>) => Promise<void>, maxDeliveries: number) {
    const attempt = msg.info.deliveryCount
    const decoded = this.bus.wire.decode<T>(this.message, msg.data, { queue: this.name, attempt })
    if (!decoded.ok) {
      if (decoded.reason === 'version' && attempt < maxDeliveries) safely(() => msg.nak(50 * 2 ** attempt))
      else await this.ack(msg)
      return
    }
    const data = decoded.message
    const progress = setInterval(() => safely(() => msg.working()), Math.max(250, Math.floor(this.bus.options.ackWaitMs / 3)))
    progress.unref()
    try {
      await handler({ data, attempt })
    } catch (error) {
      clearInterval(progress)
      if (attempt < maxDeliveries) {
        safely(() => msg.nak(50 * 2 ** attempt))
      } else {
        this.logger.error('work message dropped after max deliveries', { queue: this.name, error })
        await this.ack(msg)
      }
      return
    }
    clearInterval(progress)
    await this.ack(msg)
  }

  private async ack(msg: JsMsg) {
    try {
      // Confirmed ack: if it is lost (disconnect), the message comes back after ack_wait and
      // the idempotent handler runs once more.
      if (!(await msg.ackAck({ timeout: 5000 }))) this.logger.warn('nats ack not confirmed', { queue: this.name })
    } catch (error) {
      this.logger.warn('nats ack failed; the message will be redelivered', { queue: this.name, error })
    }
  }
}

function isApiError(error: unknown, code: number) {
  return error instanceof JetStreamApiError && error.code === code
}

function safely(fn: () => unknown) {
  try {
    fn()
  } catch {
    // the connection is closing or closed; JetStream redelivers what was not acked
  }
}

type ResolvedOptions = Required<Omit<NatsBusOptions, 'name' | 'servers' | 'wire'>>

export class NatsBus implements Bus {
  private readonly queues = new Map<string, NatsQueue<any>>()
  readonly options: ResolvedOptions
  readonly wire: Wire
  closed = false
  private linked = true

  private constructor(
    readonly connection: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    options: NatsBusOptions,
    private readonly logger: Logger,
  ) {
    this.options = {
      ackWaitMs: options.ackWaitMs ?? 30_000,
      replicas: options.replicas ?? 1,
      streamPrefix: options.streamPrefix ?? 'SB',
      subjectPrefix: options.subjectPrefix ?? 'sb.queue',
      fetchExpiresMs: Math.max(1000, options.fetchExpiresMs ?? 5000),
      publishTimeoutMs: options.publishTimeoutMs ?? 10_000,
    }
    this.wire = options.wire ?? new Wire({ logger })
    void this.watch()
  }

  /** Connects (and keeps reconnecting forever once connected); fails if JetStream is not enabled. */
  static async connect(options: NatsBusOptions, logger: Logger): Promise<NatsBus> {
    const servers = (Array.isArray(options.servers) ? options.servers : options.servers.split(','))
      .map(s => s.trim())
      .filter(Boolean)
    coalesceNatsWrites()
    const connection = await connect({
      servers,
      name: options.name ?? 'switchboard',
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      pingInterval: 10_000,
      // Every request (each JetStream publish, each gateway -> engine command) would otherwise
      // build two Error objects with stack traces up front, in case it fails: ~10 % of a
      // gateway's CPU per turn (bench/cluster profile). Our errors carry their own context.
      noAsyncTraces: true,
    })
    try {
      const jsm = await jetstreamManager(connection, { timeout: 5000 })
      const js = jetstream(connection, { timeout: 5000 })
      logger.info('nats connected', { server: connection.getServer() })
      return new NatsBus(connection, js, jsm, options, logger)
    } catch (error) {
      await connection.close()
      throw error
    }
  }

  /** False while the connection to NATS is down (the client is reconnecting). */
  get connected(): boolean {
    return this.linked && !this.connection.isClosed()
  }

  private async watch() {
    for await (const status of this.connection.status()) {
      if (status.type === 'disconnect') {
        this.linked = false
        this.logger.warn('nats disconnected', { server: status.server })
      } else if (status.type === 'reconnect') {
        this.linked = true
        this.logger.info('nats reconnected', { server: status.server })
      }
      else if (status.type === 'error') this.logger.warn('nats error', { error: status.error })
    }
  }

  queue<T>(name: string, options: QueueOptions = {}): WorkQueue<T> {
    let queue = this.queues.get(name)
    if (!queue) {
      queue = new NatsQueue<T>(name, this, this.logger.child({ bus: 'nats' }), options.message ?? 'queue.message')
      this.queues.set(name, queue)
    }
    return queue
  }

  async close() {
    if (this.closed) return
    this.closed = true
    if (this.connection.isClosed()) return
    try {
      await this.connection.drain()
    } catch {
      await this.connection.close()
    }
  }
}
