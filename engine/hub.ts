// The gateway side of the channel: consumers and their SSE streams. One feed per session fans
// every published event out to every consumer. Each consumer numbers its own frames (ids from
// 1) and keeps the last SSE_REPLAY_BUFFER_EVENTS of them, so a `listen` with Last-Event-ID and
// its consumerId resumes where the client stopped. A consumer that falls behind is dropped
// with `reconnect_required` and never slows the session or the other consumers.
import { randomUUID } from 'node:crypto'
import { ApiError } from '../gateway/errors.js'
import type { StreamSink } from '../gateway/routes.js'
import { eventBody, ReplayRing, SseStream } from '../gateway/sse.js'
import type { Logger } from '../platform/logger.js'
import type { Metrics } from '../platform/metrics.js'
import type { CreateSessionRequest, SessionTransport, Subscription, TransportEvent } from './transport.js'

export interface HubOptions {
  heartbeatMs: number
  replayBufferEvents: number
  /** How long a consumer without an open stream is kept for resumption. */
  consumerRetentionMs: number
  maxConsumersPerSession: number
  listenPath: (sessionId: string, consumerId: string) => string
}

class Consumer {
  nextId = 1
  readonly ring: ReplayRing
  stream: SseStream | null = null
  retention: NodeJS.Timeout | null = null
  constructor(readonly id: string, replay: number) {
    this.ring = new ReplayRing(replay)
  }
}

class Feed {
  readonly consumers = new Map<string, Consumer>()
  subscription: Subscription | null = null
  closed = false
  constructor(readonly sessionId: string, readonly accountId: string) {}
}

export class ChannelHub {
  private readonly feeds = new Map<string, Feed>()
  private readonly subscribing = new Map<string, Promise<Feed>>()
  private readonly heartbeatBody: string
  private shuttingDown = false

  constructor(
    private readonly transport: SessionTransport,
    private readonly options: HubOptions,
    private readonly metrics: Metrics,
    private readonly logger: Logger,
  ) {
    this.heartbeatBody = eventBody('hearthbeat', { minutes: options.heartbeatMs / 60_000 })
  }

  /** POST eventstream/{crewId}: creates the session, then opens the creator's stream. */
  async create(
    request: Omit<CreateSessionRequest, 'sessionId' | 'consumerId'>,
    start: (headers?: Record<string, string>) => StreamSink,
  ) {
    this.refuseWhileStopping()
    const sessionId = randomUUID()
    const consumerId = randomUUID()
    const feed = new Feed(sessionId, request.accountId)
    const consumer = this.addConsumer(feed, consumerId)
    // Initialized is id 1; whatever the session says while starting is queued behind it.
    this.push(feed, consumer, eventBody('Initialized', { sessionId, consumerId }))
    feed.subscription = await this.transport.create({ ...request, sessionId, consumerId }, event => this.deliver(feed, event))
    this.feeds.set(sessionId, feed)
    const sink = start({ 'X-Session-Id': sessionId, 'X-Consumer-Id': consumerId })
    this.attach(feed, consumer, sink, 0)
    if (feed.closed) this.endStream(consumer)
  }

  /** POST eventstream/{sessionId}/listen: a new consumer, or the resumption of one. */
  async listen(
    target: { sessionId: string; accountId: string },
    resume: { consumerId?: string; lastEventId?: number },
    start: (headers?: Record<string, string>) => StreamSink,
  ) {
    this.refuseWhileStopping()
    const feed = await this.feedFor(target)
    const { lastEventId } = resume
    let consumer = resume.consumerId ? feed.consumers.get(resume.consumerId) : undefined
    if (consumer && lastEventId !== undefined && lastEventId >= consumer.nextId) {
      throw new ApiError(400, 'INVALID_LAST_EVENT_ID', `Last-Event-ID ${lastEventId} was never sent to consumer ${consumer.id} (last id ${consumer.nextId - 1})`)
    }
    const fresh = !consumer
    if (!consumer) {
      if (feed.consumers.size >= this.options.maxConsumersPerSession && !this.evictDetached(feed)) {
        throw new ApiError(429, 'CONSUMER_LIMIT_REACHED', `Session ${feed.sessionId} already has ${this.options.maxConsumersPerSession} consumers`)
      }
      consumer = this.addConsumer(feed, resume.consumerId ?? randomUUID())
      // A consumer this node no longer knows keeps counting from where its client stopped.
      if (lastEventId !== undefined) consumer.nextId = lastEventId + 1
    }
    await this.transport.command(target, { type: 'consumer.attach', consumerId: consumer.id })
    if (consumer.stream) this.endStream(consumer) // the same consumer reconnected: the new stream takes over
    const sink = start({ 'X-Session-Id': feed.sessionId, 'X-Consumer-Id': consumer.id })
    const after = lastEventId ?? consumer.nextId - 1
    if (fresh && lastEventId !== undefined) {
      this.attach(feed, consumer, sink, after, { reason: 'unknown_consumer', lastEventId })
    } else {
      this.attach(feed, consumer, sink, after)
    }
    const attached = { sessionId: feed.sessionId, consumerId: consumer.id, ...(lastEventId !== undefined ? { resumed: true, lastEventId } : {}) }
    this.push(feed, consumer, eventBody('session.consumer.attached', attached))
    if (feed.closed) this.endStream(consumer)
  }

  /** One feed per session on this node, subscribed through the transport. */
  private async feedFor(target: { sessionId: string; accountId: string }): Promise<Feed> {
    const existing = this.feeds.get(target.sessionId)
    if (existing) {
      if (existing.accountId !== target.accountId || existing.closed) throw new ApiError(404, 'SESSION_NOT_FOUND', `Session ${target.sessionId} not found`)
      return existing
    }
    let pending = this.subscribing.get(target.sessionId)
    if (!pending) {
      pending = (async () => {
        const feed = new Feed(target.sessionId, target.accountId)
        feed.subscription = await this.transport.subscribe(target, event => this.deliver(feed, event))
        this.feeds.set(target.sessionId, feed)
        return feed
      })().finally(() => this.subscribing.delete(target.sessionId))
      this.subscribing.set(target.sessionId, pending)
    }
    const feed = await pending
    if (feed.accountId !== target.accountId) throw new ApiError(404, 'SESSION_NOT_FOUND', `Session ${target.sessionId} not found`)
    return feed
  }

  private addConsumer(feed: Feed, id: string): Consumer {
    const consumer = new Consumer(id, this.options.replayBufferEvents)
    feed.consumers.set(id, consumer)
    return consumer
  }

  private evictDetached(feed: Feed): boolean {
    for (const consumer of feed.consumers.values()) {
      if (!consumer.stream) {
        this.forget(feed, consumer)
        return true
      }
    }
    return false
  }

  private forget(feed: Feed, consumer: Consumer) {
    if (consumer.retention) clearTimeout(consumer.retention)
    feed.consumers.delete(consumer.id)
    if (feed.consumers.size === 0 && !feed.closed) {
      feed.subscription?.unsubscribe()
      this.feeds.delete(feed.sessionId)
    }
  }

  /** Opens `sink` for `consumer`: replays what it missed after `after`, then it is live. */
  private attach(feed: Feed, consumer: Consumer, sink: StreamSink, after: number, forcedGap?: { reason: string; lastEventId: number }) {
    if (consumer.retention) {
      clearTimeout(consumer.retention)
      consumer.retention = null
    }
    const stream = new SseStream(sink, {
      heartbeatMs: this.options.heartbeatMs,
      heartbeatBody: this.heartbeatBody,
      nextId: () => consumer.nextId++,
      onDropped: () => this.dropSlow(feed, consumer),
    })
    consumer.stream = stream
    this.metrics.sseStreamsOpen.inc()
    sink.onClose(() => {
      this.metrics.sseStreamsOpen.dec()
      if (stream.closedByClient) this.metrics.sseClientDisconnects.inc()
      if (consumer.stream !== stream) return
      consumer.stream = null
      if (feed.closed) return
      consumer.retention = setTimeout(() => this.forget(feed, consumer), this.options.consumerRetentionMs)
      consumer.retention.unref()
    })
    const { entries, gap } = consumer.ring.since(after)
    if (forcedGap) {
      stream.send(consumer.nextId++, eventBody('stream.gap', { sessionId: feed.sessionId, consumerId: consumer.id, ...forcedGap }))
    } else if (gap) {
      // The frames after Last-Event-ID up to `evictedUpTo` are gone: say so once, with an id in that range.
      stream.send(gap.evictedUpTo, eventBody('stream.gap', { sessionId: feed.sessionId, consumerId: consumer.id, reason: 'replay_buffer_exceeded', lastEventId: after, resumedAfter: gap.evictedUpTo }))
    }
    for (const entry of entries) {
      if (!stream.send(entry.id, entry.body)) return this.dropSlow(feed, consumer)
    }
  }

  private push(feed: Feed, consumer: Consumer, body: string) {
    const id = consumer.nextId++
    consumer.ring.push(id, body)
    if (consumer.stream && !consumer.stream.send(id, body)) this.dropSlow(feed, consumer)
  }

  private deliver(feed: Feed, event: TransportEvent) {
    if (event.kind === 'closed') {
      feed.closed = true
      for (const consumer of feed.consumers.values()) {
        if (consumer.retention) clearTimeout(consumer.retention)
        this.endStream(consumer)
      }
      feed.subscription?.unsubscribe()
      if (this.feeds.get(feed.sessionId) === feed) this.feeds.delete(feed.sessionId)
      return
    }
    // Serialised once; each consumer only prefixes its own id.
    const body = eventBody(event.name, event.data)
    for (const consumer of feed.consumers.values()) this.push(feed, consumer, body)
  }

  private reconnectBody(feed: Feed, consumer: Consumer, reason: 'slow_consumer' | 'shutdown') {
    return eventBody('reconnect_required', {
      sessionId: feed.sessionId,
      consumerId: consumer.id,
      reason,
      listen: { method: 'POST', path: this.options.listenPath(feed.sessionId, consumer.id) },
    })
  }

  private dropSlow(feed: Feed, consumer: Consumer) {
    const stream = consumer.stream
    if (!stream || stream.closed) return
    this.metrics.sseSlowConsumersDropped.inc()
    this.logger.warn('slow SSE consumer dropped', { sessionId: feed.sessionId, consumerId: consumer.id })
    stream.drop({ id: consumer.nextId++, body: this.reconnectBody(feed, consumer, 'slow_consumer') })
  }

  private endStream(consumer: Consumer) {
    consumer.stream?.end()
    consumer.stream = null
  }

  private refuseWhileStopping() {
    if (this.shuttingDown) throw new ApiError(503, 'SHUTTING_DOWN', 'The service is shutting down; retry shortly', {}, { 'Retry-After': '1' })
  }

  /** Service shutdown: every open stream is told to reconnect (to another node), then ended. */
  shutdown() {
    this.shuttingDown = true
    for (const feed of this.feeds.values()) {
      for (const consumer of feed.consumers.values()) {
        if (consumer.retention) clearTimeout(consumer.retention)
        const stream = consumer.stream
        if (stream && !stream.closed) stream.end({ id: consumer.nextId++, body: this.reconnectBody(feed, consumer, 'shutdown') })
        consumer.stream = null
      }
      feed.subscription?.unsubscribe()
    }
    this.feeds.clear()
  }

  /** Open streams on this node (tests, bench). */
  openStreams(): number {
    let n = 0
    for (const feed of this.feeds.values()) for (const c of feed.consumers.values()) if (c.stream && !c.stream.closed) n++
    return n
  }
}
