// The session event log over NATS: one JetStream stream captures `sb.session.*.events`, the
// subject the owning engine node publishes each session's events on (gateways holding streams
// get them live by a plain subscription). Per session it keeps the last SSE_REPLAY_BUFFER_EVENTS
// events for SSE_EVENT_RETENTION_MS, so any gateway can replay what a client missed, after the
// engine node that published them is gone.
//
// Appends are plain publishes (one per event, no ack to wait for, no header: a core publish is
// sent once, and readers apply an event only if its seq follows what they have, so a stored
// duplicate would be skipped anyway), versioned like every message on NATS; what is read back is checked (platform/wire.ts), and the stream keeps
// events of the previous version for as long as its retention. Reads use a
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
import { Unavailable } from '../../platform/errors.js'
import type { Logger } from '../../platform/logger.js'
import type { Wire } from '../../platform/wire.js'
import { isNewer, type EventLog, type LogPosition, type StreamEvent } from '../streams/event-log.js'

export const EVENTS_STREAM = 'SB_SESSION_EVENTS'
export const eventsSubject = (sessionId: string) => `sb.session.${sessionId}.events`

export interface JetStreamEventLogOptions {
  /** Events kept per session. */
  perSession: number
  retentionMs: number
  replicas: number
  logger: Logger
  wire: Wire
}

export class JetStreamEventLog implements EventLog {
  readonly durable = true
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
    try {
      const { body: _serialisedForStreams, ...wire } = event
      this.nc.publish(eventsSubject(sessionId), this.wire.encode(wire))
    } catch (error) {
      this.logger.warn('session event not published', { sessionId, seq: event.seq, error })
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
    const event = this.wire.decode<StreamEvent>('session.event', data, { stream: EVENTS_STREAM, subject: eventsSubject(sessionId) })
    if (!event.ok) throw new Unavailable('WIRE_REFUSED', `The last event of session ${sessionId} cannot be read by this process (see its log)`, {}, { retryAfterSeconds: 1 })
    return event.message
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
        const decoded = this.wire.decode<StreamEvent>('session.event', msg.data, { stream: EVENTS_STREAM, subject: msg.subject })
        if (decoded.ok) {
          const event = decoded.message
          // In log order; what an owner that lost the session flushed late is skipped.
          if (isNewer(event, position)) {
            position = event
            out.push(event)
          } else if (event.seq <= after && event.epoch > position.epoch) {
            position = { seq: after, epoch: event.epoch }
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
