// The gateway side of the channel: consumers and their SSE streams. One feed per session fans
// every event out to every consumer of that session on this gateway. The SSE id of an event is
// its seq in the session's event log (engine/streams/event-log.ts), the same on every gateway, so a
// `listen` with Last-Event-ID resumes through any gateway: what the client missed is read back
// from the log, then it is live. Frames of one consumer only (`session.consumer.attached`,
// heartbeats, `reconnect_required`, `stream.gap`) carry the id of the last event it was sent.
// A consumer that falls behind is dropped with `reconnect_required` and never slows the session
// or the other consumers. A consumer's frames go to a ConsumerStream: an SSE response
// (gateway/sse.ts) or a WebSocket (gateway/ws-channel.ts); the hub does not know which.
import { randomUUID } from 'node:crypto'
import { Invalid, LimitReached, sessionNotFound, ShuttingDown, Unavailable } from '../../platform/errors.js'
import type { StreamSink } from '../../platform/http.js'
import { eventBody, HeartbeatWheel, SseStream } from '../../gateway/sse.js'
import type { Logger } from '../../platform/logger.js'
import type { Metrics } from '../../platform/metrics.js'
import { OverloadGuard } from '../../platform/overload.js'
import type { StreamPlace } from '../../platform/stream-shares.js'
import { bodyOf, isNewer } from './event-log.js'
import type { CreateSessionRequest, SessionTarget, SessionTransport, Subscription, TransportEvent } from '../transport.js'

/** Why the hub ends a consumer's stream (a WebSocket says it in its close code; SSE just ends). */
export type StreamEnd =
  | { why: 'session_closed'; reason: string }
  | { why: 'shutdown' }
  | { why: 'slow_consumer' }
  /** The same consumer reconnected: the newer stream takes over. */
  | { why: 'replaced' }

/** A frame of one consumer only (`reconnect_required`), with the id it carries. */
export interface LastFrame {
  id: number
  body: string
}

/** Where one consumer's frames go: an SSE response or a WebSocket. */
export interface ConsumerStream {
  /** Which metrics count it. */
  readonly transport: 'sse' | 'socket'
  readonly closed: boolean
  /** The client went away on its own (not ended by us). */
  readonly closedByClient: boolean
  /** Id of the last frame handed to the socket (what a dropped client surely had a chance to get). */
  readonly lastWrittenId: number
  /** Queues one event frame (`body`: its SSE lines); false when the stream is already closed. */
  send(id: number, body: string): boolean
  /** Sends what is queued, then `last` if any, and ends the stream. */
  end(last?: LastFrame, why?: StreamEnd): void
  /** Discards what is queued (the client reads it back after reconnecting), sends `last`, ends. */
  drop(last: LastFrame): void
  onClose(listener: () => void): void
}

/** What the hub gives a stream it opens: the id of its frames of its own, and how to report it too slow. */
export interface StreamHooks {
  currentId: () => number
  onDropped: () => void
}

/** Opens a consumer's stream once its session and consumer ids are known. */
export type StreamOpener = (ids: { sessionId: string; consumerId: string }, hooks: StreamHooks) => ConsumerStream

export interface HubOptions {
  heartbeatMs: number
  /** How long a consumer without an open stream is kept (its id keeps counting toward the limit). */
  consumerRetentionMs: number
  maxConsumersPerSession: number
  listenPath: (sessionId: string, consumerId: string) => string
}

/**
 * Feeds checking their log at once after a reconnect. bench/resync, 1,000 feeds that all missed
 * a reply: every reply delivered 5.0–5.8 s after the heal at 16, 2.9–3.9 s at 32, 2.4–2.5 s at 64.
 */
const RESYNC_CONCURRENCY = 32

class Consumer {
  /** Seq of the last event written (or due) to this consumer's stream. */
  position = 0
  stream: ConsumerStream | null = null
  /** Events held while the consumer catches up from the log, or before its stream opens. */
  held: { seq: number; body: string }[] | null = null
  retention: NodeJS.Timeout | null = null
  /**
   * Listens of this consumer waiting for the session's attach: it has no stream yet but holds
   * its place, so it is neither evicted as detached nor let go by its retention meanwhile.
   */
  attaching = 0
  constructor(readonly id: string) {}
}

class Feed {
  readonly consumers = new Map<string, Consumer>()
  subscription: Subscription | null = null
  closed = false
  /** How the session closed (its `closed` entry), once it has. */
  closeReason = ''
  /** The last event applied; events arrive in this order or are read back from the log. */
  position = { seq: 0, epoch: 0 }
  /** Events received while the feed's position is unknown or while a gap is being filled. */
  queue: TransportEvent[] | null = []
  /** The link came back again while the log was being read: check once more when that read ends. */
  recheck = false
  constructor(readonly sessionId: string, readonly accountId: string) {}
  get target(): SessionTarget {
    return { sessionId: this.sessionId, accountId: this.accountId }
  }
}

export class ChannelHub {
  private readonly feeds = new Map<string, Feed>()
  private readonly subscribing = new Map<string, Promise<Feed>>()
  private readonly heartbeats: HeartbeatWheel
  private shuttingDown = false

  constructor(
    private readonly transport: SessionTransport,
    private readonly options: HubOptions,
    private readonly metrics: Metrics,
    private readonly logger: Logger,
    private readonly overload: OverloadGuard = OverloadGuard.off(),
  ) {
    this.heartbeats = new HeartbeatWheel(options.heartbeatMs, eventBody('hearthbeat', { minutes: options.heartbeatMs / 60_000 }))
  }

  /** SSE streams on a gateway response: `start` sends the response's head. */
  sse(start: (headers?: Record<string, string>) => StreamSink): StreamOpener {
    return ({ sessionId, consumerId }, hooks) =>
      new SseStream(start({ 'X-Session-Id': sessionId, 'X-Consumer-Id': consumerId }), { heartbeats: this.heartbeats, ...hooks })
  }

  /** Creates the session, then opens the creator's stream. */
  async create(request: Omit<CreateSessionRequest, 'sessionId' | 'consumerId'>, open: StreamOpener) {
    this.refuseWhileStopping()
    const place = this.overload.admitStream('session', request.accountId)
    try {
      const sessionId = randomUUID()
      const consumerId = randomUUID()
      const feed = new Feed(sessionId, request.accountId)
      feed.queue = null // a new session: its first event is seq 1
      const consumer = this.addConsumer(feed, consumerId)
      consumer.held = [] // Initialized (seq 1) and what follows wait for the stream
      feed.subscription = await this.transport.create({ ...request, sessionId, consumerId }, event => this.deliver(feed, event))
      this.feeds.set(sessionId, feed)
      this.attach(feed, consumer, open, place)
      this.release(feed, consumer)
      if (feed.closed) this.endStream(feed, consumer)
    } finally {
      if (!place.opened) place.release()
    }
  }

  /** A new consumer of a session, or the resumption of one (any gateway). */
  async listen(target: SessionTarget, resume: { consumerId?: string; lastEventId?: number }, open: StreamOpener) {
    this.refuseWhileStopping()
    // Its place is taken now, while it waits for the feed and the attach: listens racing for
    // the last places must not all pass before any of them opened.
    const place = this.overload.admitStream('stream', target.accountId)
    try {
      await this.open(target, resume, open, place)
    } finally {
      if (!place.opened) place.release()
    }
  }

  /** A listen admitted with its `place`, which its stream holds once open. */
  private async open(
    target: SessionTarget,
    resume: { consumerId?: string; lastEventId?: number },
    open: StreamOpener,
    place: StreamPlace,
  ) {
    const feed = await this.feedFor(target)
    let consumer = resume.consumerId ? feed.consumers.get(resume.consumerId) : undefined
    // Without Last-Event-ID, a known consumer resumes after what it was last sent, a new one is live.
    const after = resume.lastEventId ?? consumer?.position ?? feed.position.seq
    if (after > feed.position.seq) {
      throw new Invalid('INVALID_LAST_EVENT_ID', `Last-Event-ID ${after} was never sent (the session's last event is ${feed.position.seq})`)
    }
    const added = !consumer
    if (!consumer) {
      if (feed.consumers.size >= this.options.maxConsumersPerSession && !this.evictDetached(feed)) {
        throw new LimitReached('CONSUMER_LIMIT_REACHED', `Session ${feed.sessionId} already has ${this.options.maxConsumersPerSession} consumers`)
      }
      consumer = this.addConsumer(feed, resume.consumerId ?? randomUUID())
    }
    consumer.attaching++
    if (consumer.retention) {
      clearTimeout(consumer.retention)
      consumer.retention = null
    }
    try {
      await this.transport.command(target, { type: 'consumer.attach', consumerId: consumer.id })
    } catch (error) {
      consumer.attaching--
      // Refused (session gone, engine unreachable): the place is given back, or kept for a while
      // as any detached consumer's is.
      if (!consumer.stream && !consumer.attaching && feed.consumers.get(consumer.id) === consumer) {
        if (added) this.forget(feed, consumer)
        else this.retain(feed, consumer)
      }
      throw error
    }
    consumer.attaching--
    // Let go meanwhile (the gateway stopping): no stream for a consumer the feed no longer has.
    this.refuseWhileStopping()
    if (feed.consumers.get(consumer.id) !== consumer) {
      throw new Unavailable('CONSUMER_DETACHED', `Consumer ${consumer.id} was let go while it attached; listen again`, {}, { retryAfterSeconds: 1 })
    }
    if (consumer.stream) this.endStream(feed, consumer, { why: 'replaced' }) // the same consumer reconnected: the new stream takes over
    consumer.position = after
    consumer.held = []
    const stream = this.attach(feed, consumer, open, place)
    const attached = { sessionId: feed.sessionId, consumerId: consumer.id, ...(resume.lastEventId !== undefined ? { resumed: true, lastEventId: after } : {}) }
    stream.send(after, eventBody('session.consumer.attached', attached))
    if (after < feed.position.seq) await this.catchUp(feed, consumer, stream, after)
    this.release(feed, consumer)
    if (feed.closed) this.endStream(feed, consumer)
  }

  /** Sends `consumer` what it missed after `after` from the session's log (live events wait in `held`). */
  private async catchUp(feed: Feed, consumer: Consumer, stream: ConsumerStream, after: number) {
    let missed: TransportEvent[]
    try {
      missed = await this.transport.replay(feed.sessionId, after)
    } catch (error) {
      this.logger.warn('event log not readable', { sessionId: feed.sessionId, error })
      missed = []
    }
    if (consumer.stream !== stream) return
    const first = missed.find(event => event.seq > after)?.seq ?? (consumer.held?.[0]?.seq ?? feed.position.seq + 1)
    if (first > after + 1) {
      // Events after Last-Event-ID up to first-1 are no longer kept: said once, with an id in that range.
      const resumedAfter = first - 1
      stream.send(resumedAfter, eventBody('stream.gap', { sessionId: feed.sessionId, consumerId: consumer.id, reason: 'replay_buffer_exceeded', lastEventId: after, resumedAfter }))
      consumer.position = resumedAfter
    }
    for (const event of missed) {
      if (event.kind !== 'event' || event.seq <= consumer.position || event.seq > feed.position.seq) continue
      consumer.position = event.seq
      if (!stream.send(event.seq, bodyOf(event))) return this.dropSlow(feed, consumer)
    }
  }

  /** One feed per session on this gateway, subscribed through the transport. */
  private async feedFor(target: SessionTarget): Promise<Feed> {
    const existing = this.feeds.get(target.sessionId)
    if (existing) {
      if (existing.accountId !== target.accountId || existing.closed) throw sessionNotFound(target.sessionId)
      return existing
    }
    let pending = this.subscribing.get(target.sessionId)
    if (!pending) {
      pending = (async () => {
        const feed = new Feed(target.sessionId, target.accountId)
        const subscription = await this.transport.subscribe(target, event => this.deliver(feed, event))
        feed.subscription = subscription
        // Events received before the position was known: those after it still apply.
        const early = feed.queue ?? []
        feed.queue = null
        feed.position = subscription.position
        for (const event of early) this.deliver(feed, event)
        this.feeds.set(target.sessionId, feed)
        return feed
      })().finally(() => this.subscribing.delete(target.sessionId))
      this.subscribing.set(target.sessionId, pending)
    }
    const feed = await pending
    if (feed.accountId !== target.accountId) throw sessionNotFound(target.sessionId)
    return feed
  }

  private addConsumer(feed: Feed, id: string): Consumer {
    const consumer = new Consumer(id)
    feed.consumers.set(id, consumer)
    return consumer
  }

  private evictDetached(feed: Feed): boolean {
    for (const consumer of feed.consumers.values()) {
      if (!consumer.stream && !consumer.attaching) {
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

  /** Opens `consumer`'s stream (frames are sent by the caller); it holds `place` until it closes. */
  private attach(feed: Feed, consumer: Consumer, open: StreamOpener, place: StreamPlace): ConsumerStream {
    if (consumer.retention) {
      clearTimeout(consumer.retention)
      consumer.retention = null
    }
    const stream = open(
      { sessionId: feed.sessionId, consumerId: consumer.id },
      { currentId: () => consumer.position, onDropped: () => this.dropSlow(feed, consumer) },
    )
    consumer.stream = stream
    const gauge = stream.transport === 'sse' ? this.metrics.sseStreamsOpen : this.metrics.channelSocketsOpen
    gauge.inc()
    place.opened = true
    stream.onClose(() => {
      gauge.dec()
      place.release()
      if (stream.closedByClient) (stream.transport === 'sse' ? this.metrics.sseClientDisconnects : this.metrics.channelSocketClientCloses).inc()
      if (consumer.stream !== stream) return
      consumer.stream = null
      if (feed.closed || consumer.attaching) return
      this.retain(feed, consumer)
    })
    return stream
  }

  /** A consumer without a stream keeps its place (and its position) for a while, then is forgotten. */
  private retain(feed: Feed, consumer: Consumer) {
    if (consumer.retention) clearTimeout(consumer.retention)
    consumer.retention = setTimeout(() => {
      consumer.retention = null
      if (!consumer.stream && !consumer.attaching) this.forget(feed, consumer)
    }, this.options.consumerRetentionMs)
    consumer.retention.unref()
  }

  /** Sends what was held for the consumer (newer than its position); from now on it is live. */
  private release(feed: Feed, consumer: Consumer) {
    const held = consumer.held ?? []
    consumer.held = null
    for (const { seq, body } of held) this.write(feed, consumer, seq, body)
  }

  private write(feed: Feed, consumer: Consumer, seq: number, body: string) {
    if (seq <= consumer.position) return
    if (consumer.held) {
      consumer.held.push({ seq, body })
      return
    }
    consumer.position = seq
    if (consumer.stream && !consumer.stream.send(seq, body)) this.dropSlow(feed, consumer)
  }

  private deliver(feed: Feed, event: TransportEvent) {
    if (feed.queue) {
      feed.queue.push(event)
      return
    }
    if (!isNewer(event, feed.position)) return // already applied, or from an owner that lost the session
    if (event.seq > feed.position.seq + 1) {
      // Events are missing (this gateway was cut off from NATS for a while): read them back.
      feed.queue = [event]
      void this.repair(feed)
      return
    }
    this.apply(feed, event)
  }

  private apply(feed: Feed, event: TransportEvent) {
    feed.position = { seq: event.seq, epoch: event.epoch }
    if (event.kind === 'owner') return // a new owner's mark: no frame
    if (event.kind === 'closed') {
      feed.closed = true
      feed.closeReason = event.reason
      for (const consumer of feed.consumers.values()) {
        if (consumer.retention) clearTimeout(consumer.retention)
        if (!consumer.held) this.endStream(feed, consumer) // a consumer still catching up ends when done
      }
      feed.subscription?.unsubscribe()
      if (this.feeds.get(feed.sessionId) === feed) this.feeds.delete(feed.sessionId)
      return
    }
    // Serialised once (and kept so by the session's ring); each consumer only prefixes the id.
    const body = bodyOf(event)
    for (const consumer of feed.consumers.values()) this.write(feed, consumer, event.seq, body)
  }

  /**
   * The link that carries live events was down (NATS reconnected): what was published meanwhile
   * never arrived here, and a session's last events show no gap until it speaks again. Every
   * feed checks its log, RESYNC_CONCURRENCY feeds at a time (a gateway may hold thousands): one
   * read of the log's last entry, and the full read after its position (a reader created, a
   * fetch, the reader deleted) only when that last entry is not exactly the feed's position.
   */
  async resync() {
    const feeds = [...this.feeds.values()]
    let next = 0
    const reader = async () => {
      while (next < feeds.length) {
        const feed = feeds[next++]!
        // Closed or gone; or already reading its log (subscribing, or filling a gap): that read
        // may have been made before what this outage lost, so it checks again once done.
        if (feed.closed || this.feeds.get(feed.sessionId) !== feed) continue
        if (feed.queue) {
          feed.recheck = true
          continue
        }
        feed.queue = []
        await this.repair(feed, true)
      }
    }
    await Promise.all(Array.from({ length: Math.min(RESYNC_CONCURRENCY, feeds.length) }, reader))
    return feeds.length
  }

  /**
   * Fills a gap in the live events from the log, then applies what was queued meanwhile. With
   * `unlessCurrent`, first asks for the log's last entry: when it is the feed's position itself
   * nothing was missed (an event appended after it would be last). Anything else, even an older
   * owner's late event sitting last, takes the full read.
   */
  private async repair(feed: Feed, unlessCurrent = false) {
    let missed: TransportEvent[] = []
    try {
      const last = unlessCurrent ? await this.transport.lastEvent(feed.sessionId) : null
      const current = last !== null && last.seq === feed.position.seq && last.epoch === feed.position.epoch
      if (!current) missed = await this.transport.replay(feed.sessionId, feed.position.seq)
    } catch (error) {
      this.logger.warn('event log not readable; the gap is reported to consumers', { sessionId: feed.sessionId, error })
    }
    const queued = feed.queue ?? []
    feed.queue = null
    for (const event of [...missed, ...queued].sort((a, b) => a.seq - b.seq)) {
      if (!isNewer(event, feed.position)) continue
      if (event.seq > feed.position.seq + 1) this.reportGap(feed, event.seq - 1)
      this.apply(feed, event)
    }
    if (feed.recheck && !feed.closed && this.feeds.get(feed.sessionId) === feed) {
      feed.recheck = false
      feed.queue = []
      await this.repair(feed, true)
    }
  }

  private reportGap(feed: Feed, resumedAfter: number) {
    const lastEventId = feed.position.seq
    this.logger.warn('session events lost to this gateway', { sessionId: feed.sessionId, lastEventId, resumedAfter })
    for (const consumer of feed.consumers.values()) {
      const body = eventBody('stream.gap', { sessionId: feed.sessionId, consumerId: consumer.id, reason: 'replay_buffer_exceeded', lastEventId, resumedAfter })
      this.write(feed, consumer, resumedAfter, body)
    }
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
    // Whatever was queued for it is discarded: its position goes back to what it surely got.
    stream.drop({ id: stream.lastWrittenId, body: this.reconnectBody(feed, consumer, 'slow_consumer') })
    consumer.position = stream.lastWrittenId
  }

  /** Ends the consumer's stream: the session closed (the default), or `why`. */
  private endStream(feed: Feed, consumer: Consumer, why: StreamEnd = { why: 'session_closed', reason: feed.closeReason }) {
    consumer.stream?.end(undefined, why)
    consumer.stream = null
  }

  private refuseWhileStopping() {
    if (this.shuttingDown) throw new ShuttingDown('The service is shutting down; retry shortly', { retryAfterSeconds: 1 })
  }

  /** Gateway stop: every open stream is told to reconnect (to another gateway), then ended. */
  shutdown() {
    this.shuttingDown = true
    this.heartbeats.stop()
    for (const feed of this.feeds.values()) {
      for (const consumer of feed.consumers.values()) {
        if (consumer.retention) clearTimeout(consumer.retention)
        const stream = consumer.stream
        if (stream && !stream.closed) stream.end({ id: consumer.position, body: this.reconnectBody(feed, consumer, 'shutdown') }, { why: 'shutdown' })
        consumer.stream = null
      }
      feed.subscription?.unsubscribe()
    }
    this.feeds.clear()
  }

  /** A user message through this gateway: refused (503) while the gateway is overloaded. */
  admitMessage() {
    this.overload.admit('message')
  }

  /** Open streams on this node (tests, bench). */
  openStreams(): number {
    let n = 0
    for (const feed of this.feeds.values()) for (const c of feed.consumers.values()) if (c.stream && !c.stream.closed) n++
    return n
  }
}
