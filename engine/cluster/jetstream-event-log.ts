// The session event log over NATS: one JetStream stream captures `sb.session.*.events`, the
// subject the owning engine node publishes each session's events on (gateways holding streams
// get them live by a plain subscription). Per session it keeps the last SSE_REPLAY_BUFFER_EVENTS
// events for SSE_EVENT_RETENTION_MS, so any gateway can replay what a client missed, after the
// engine node that published them is gone.
//
// Appends are plain publishes (no ack to wait for, no header: a core publish is sent once, and
// readers apply an event only if its seq follows what they have, so a stored duplicate would be
// skipped anyway), versioned like every message on NATS. From wire version 3 the events a session
// publishes in one turn of the loop (a turn's status, then its reply and the next status) go out
// as one message, a batch: per event, a message's cost on the node, nats-server and every gateway
// is paid once per batch. Pinned to an older version (a rolling upgrade), one message per event.
// What is read back is checked (platform/wire.ts), and the stream keeps events of the previous
// version for as long as its retention; its per-session limit counts messages, so it keeps at
// least that many events. Reads use a
// short-lived ephemeral consumer filtered on the session's subject (nats-server 2.9 has neither
// multi-filter ordered consumers nor batched direct gets).
import type { NatsConnection } from '@nats-io/transport-node'
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  jetstream,
  jetstreamManager,
  StorageType,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream'
import { isWrongLastSequence, nanos, openStream } from './jetstream-streams.js'
import { writeNatsNow } from '../../platform/bus/nats-writes.js'
import { Unavailable } from '../../platform/errors.js'
import type { Logger } from '../../platform/logger.js'
import type { Wire } from '../../platform/wire.js'
import { isNewer, type EventLog, type LogPosition, type StreamEvent } from '../streams/event-log.js'

export const EVENTS_STREAM = 'SB_SESSION_EVENTS'

/** What one message on a session's event subject carries: an event, or from version 3 several in order. */
export type WireEvent = StreamEvent | { kind: 'batch'; events: StreamEvent[] }

/** The events a message carries, in order. */
export const eventsOf = (message: WireEvent): StreamEvent[] => (message.kind === 'batch' ? message.events : [message])
export const eventsSubject = (sessionId: string) => `sb.session.${sessionId}.events`

export interface JetStreamEventLogOptions {
  /** Events kept per session. */
  perSession: number
  retentionMs: number
  replicas: number
  logger: Logger
  wire: Wire
}

type WireStreamEvent = Omit<StreamEvent, 'body'>

export class JetStreamEventLog implements EventLog {
  readonly durable = true
  /** Version 3 on: each session's events of this turn of the loop, published together at its end. */
  private readonly batches = new Map<string, WireStreamEvent[]>()
  private flushing = false
  private constructor(
    private readonly nc: NatsConnection,
    private readonly jsm: JetStreamManager,
    private readonly js: JetStreamClient,
    private readonly logger: Logger,
    private readonly wire: Wire,
  ) {}

  /** Opens (creating it when missing) the stream; an existing one is used as it is. */
  static async open(nc: NatsConnection, options: JetStreamEventLogOptions): Promise<JetStreamEventLog> {
    const jsm = await jetstreamManager(nc)
    await openStream(jsm, {
      name: EVENTS_STREAM,
      subjects: [eventsSubject('*')],
      storage: StorageType.File,
      discard: DiscardPolicy.Old,
      max_msgs_per_subject: options.perSession,
      max_age: nanos(options.retentionMs),
      duplicate_window: nanos(Math.min(options.retentionMs, 2 * 60_000)),
      num_replicas: options.replicas,
    })
    return new JetStreamEventLog(nc, jsm, jetstream(nc), options.logger, options.wire)
  }

  append(sessionId: string, event: StreamEvent) {
    const { body: _serialisedForStreams, ...wire } = event
    if (this.wire.writes < 3) return this.publish(sessionId, wire)
    const batch = this.batches.get(sessionId)
    if (batch) batch.push(wire)
    else this.batches.set(sessionId, [wire])
    if (!this.flushing) {
      this.flushing = true
      setImmediate(() => this.flush())
    }
  }

  /** Publishes what the sessions appended in this turn of the loop: one message per session. */
  private flush() {
    this.flushing = false
    for (const [sessionId, events] of this.batches) this.publish(sessionId, events.length === 1 ? events[0]! : { kind: 'batch', events })
    this.batches.clear()
    writeNatsNow()
  }

  private publish(sessionId: string, message: WireStreamEvent | { kind: 'batch'; events: WireStreamEvent[] }) {
    try {
      this.nc.publish(eventsSubject(sessionId), this.wire.encode(message))
    } catch (error) {
      this.logger.warn('session events not published', { sessionId, error })
    }
  }

  /** One direct read of the subject's last message (no consumer). */
  async last(sessionId: string): Promise<LogPosition | null> {
    const message = await this.jsm.streams.getMessage(EVENTS_STREAM, { last_by_subj: eventsSubject(sessionId) })
    if (!message) return null
    const { seq, epoch } = this.lastOf(sessionId, message.data)
    return { seq, epoch }
  }

  /** The session's last stored event; one this build cannot read leaves its position unknown. */
  private lastOf(sessionId: string, data: Uint8Array): StreamEvent {
    const message = this.wire.decode<WireEvent>('session.event', data, { stream: EVENTS_STREAM, subject: eventsSubject(sessionId) })
    if (!message.ok) throw new Unavailable('WIRE_REFUSED', `The last event of session ${sessionId} cannot be read by this process (see its log)`, {}, { retryAfterSeconds: 1 })
    return eventsOf(message.message).at(-1)!
  }

  async read(sessionId: string, after: number): Promise<StreamEvent[]> {
    const consumer = await this.jsm.consumers.add(EVENTS_STREAM, {
      filter_subject: eventsSubject(sessionId),
      ack_policy: AckPolicy.None,
      deliver_policy: DeliverPolicy.All,
      mem_storage: true,
      num_replicas: 1,
      inactive_threshold: nanos(30_000), // removed by the server if this reader dies mid-read
    })
    const out: StreamEvent[] = []
    try {
      if (consumer.num_pending === 0) return out
      const messages = await (await this.js.consumers.get(EVENTS_STREAM, consumer.name)).fetch({ max_messages: consumer.num_pending, expires: 5_000 })
      let position = { seq: after, epoch: 0 }
      for await (const msg of messages) {
        // One this build cannot read is left out (logged and counted): a gap in seq, as if not kept.
        const decoded = this.wire.decode<WireEvent>('session.event', msg.data, { stream: EVENTS_STREAM, subject: msg.subject })
        if (decoded.ok) {
          for (const event of eventsOf(decoded.message)) {
            // In log order; what an owner that lost the session flushed late is skipped.
            if (isNewer(event, position)) {
              position = event
              out.push(event)
            } else if (event.seq <= after && event.epoch > position.epoch) {
              position = { seq: after, epoch: event.epoch }
            }
          }
        }
        if (msg.info.pending === 0) break
      }
      return out
    } finally {
      this.jsm.consumers.delete(EVENTS_STREAM, consumer.name).catch(() => {})
    }
  }

  async takeOver(sessionId: string, epoch: number): Promise<number> {
    for (let attempt = 0; ; attempt++) {
      const last = await this.jsm.streams.getMessage(EVENTS_STREAM, { last_by_subj: eventsSubject(sessionId) })
      const seq = last ? this.lastOf(sessionId, last.data).seq : 0
      // The mark is stored only if nothing landed since `last`: a late publish of the previous
      // owner makes it fail, and the new owner reads again (so it never reuses that seq).
      try {
        await this.js.publish(eventsSubject(sessionId), this.wire.encode({ kind: 'owner', seq, epoch }), {
          expect: { lastSubjectSequence: last?.seq ?? 0 },
          msgID: `${sessionId}:${epoch}:owner`,
        })
        return seq
      } catch (error) {
        if (attempt >= 5 || !isWrongLastSequence(error)) throw error
      }
    }
  }

  forget() {
    // The stream's limits (per session count, max age) let ended sessions' events go.
  }
}
