// The session event log over NATS: one JetStream stream captures `sb.session.*.events`, the
// subject the owning engine node publishes each session's events on (gateways holding streams
// get them live by a plain subscription). Per session it keeps the last SSE_REPLAY_BUFFER_EVENTS
// events for SSE_EVENT_RETENTION_MS, so any gateway can replay what a client missed, after the
// engine node that published them is gone.
//
// Appends are plain publishes (one per event, no ack to wait for; Nats-Msg-Id = session, epoch
// and seq, so a publish retried by the client after a reconnect is stored once). Reads use a
// short-lived ephemeral consumer filtered on the session's subject (nats-server 2.9 has neither
// multi-filter ordered consumers nor batched direct gets).
import { headers, type NatsConnection } from '@nats-io/transport-node'
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  StorageType,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream'
import type { Logger } from '../platform/logger.js'
import { isNewer, type EventLog, type LogPosition, type StreamEvent } from './event-log.js'

export const EVENTS_STREAM = 'SB_SESSION_EVENTS'
export const eventsSubject = (sessionId: string) => `sb.session.${sessionId}.events`
const nanos = (ms: number) => ms * 1_000_000

export interface JetStreamEventLogOptions {
  /** Events kept per session. */
  perSession: number
  retentionMs: number
  replicas: number
  logger: Logger
}

export class JetStreamEventLog implements EventLog {
  readonly durable = true
  private constructor(
    private readonly nc: NatsConnection,
    private readonly jsm: JetStreamManager,
    private readonly js: JetStreamClient,
    private readonly logger: Logger,
  ) {}

  /** Opens (creating it when missing) the stream; an existing one is used as it is. */
  static async open(nc: NatsConnection, options: JetStreamEventLogOptions): Promise<JetStreamEventLog> {
    const jsm = await jetstreamManager(nc)
    try {
      await jsm.streams.info(EVENTS_STREAM)
    } catch (error) {
      if (!(error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound)) throw error
      try {
        await jsm.streams.add({
          name: EVENTS_STREAM,
          subjects: [eventsSubject('*')],
          storage: StorageType.File,
          discard: DiscardPolicy.Old,
          max_msgs_per_subject: options.perSession,
          max_age: nanos(options.retentionMs),
          duplicate_window: nanos(Math.min(options.retentionMs, 2 * 60_000)),
          num_replicas: options.replicas,
        })
      } catch {
        await jsm.streams.info(EVENTS_STREAM) // created concurrently by another process: fine
      }
    }
    return new JetStreamEventLog(nc, jsm, jetstream(nc), options.logger)
  }

  append(sessionId: string, event: StreamEvent) {
    const h = headers()
    h.set('Nats-Msg-Id', `${sessionId}:${event.epoch}:${event.seq}`)
    try {
      const { body: _serialisedForStreams, ...wire } = event
      this.nc.publish(eventsSubject(sessionId), JSON.stringify(wire), { headers: h })
    } catch (error) {
      this.logger.warn('session event not published', { sessionId, seq: event.seq, error })
    }
  }

  /** One direct read of the subject's last message (no consumer). */
  async last(sessionId: string): Promise<LogPosition | null> {
    const message = await this.jsm.streams.getMessage(EVENTS_STREAM, { last_by_subj: eventsSubject(sessionId) })
    if (!message) return null
    const { seq, epoch } = message.json<StreamEvent>()
    return { seq, epoch }
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
        const event = msg.json<StreamEvent>()
        // In log order; what an owner that lost the session flushed late is skipped.
        if (isNewer(event, position)) {
          position = event
          out.push(event)
        } else if (event.seq <= after && event.epoch > position.epoch) {
          position = { seq: after, epoch: event.epoch }
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
      const seq = last ? last.json<StreamEvent>().seq : 0
      // The mark is stored only if nothing landed since `last`: a late publish of the previous
      // owner makes it fail, and the new owner reads again (so it never reuses that seq).
      try {
        await this.js.publish(eventsSubject(sessionId), JSON.stringify({ kind: 'owner', seq, epoch }), {
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

const isWrongLastSequence = (error: unknown) =>
  error instanceof JetStreamApiError &&
  (error.code === JetStreamApiCodes.StreamWrongLastSequence || error.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
