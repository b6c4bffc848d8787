// A live session's published events: each numbered (its seq is the SSE id of the session's
// streams, on every gateway), handed to this node's listeners and appended to the event log.
import type { Logger } from '../../platform/logger.js'
import type { SessionRepository } from '../persistence/session-store.js'
import type { LiveSession } from '../session/live-session.js'
import type { EventLog, StreamEventBody } from '../streams/event-log.js'
import type { FeedSubscription } from '../transport.js'
import type { SessionLeases } from './host-options.js'

/**
 * In one process the event log dies with the process, and a restore after a kill -9 would
 * number events again from what the store knows, reusing ids a client already holds (and drops,
 * if it de-duplicates by id). So the document keeps a bound this far ahead of the ids, raised
 * when half of it is used (one small write per 500 events); a restore after a crash numbers on
 * from the bound (a resuming client gets a `stream.gap`), after a clean stop from the exact last id.
 */
export const EVENT_ID_RESERVE = 1000

export interface EventPublisherDeps {
  events: EventLog
  store: Pick<SessionRepository, 'reserveEventIds'>
  leases: SessionLeases | undefined
  logger: Logger
  /** Lets the session go without touching the store: another node may own it. */
  drop(live: LiveSession, why: string): void
}

export class EventPublisher {
  private readonly events: EventLog
  private readonly leases: SessionLeases | undefined

  constructor(private readonly deps: EventPublisherDeps) {
    this.events = deps.events
    this.leases = deps.leases
  }

  /** An event of the machine's effects for the session's streams (data led by the session id). */
  publish(live: LiveSession, name: string, data: Record<string, unknown>) {
    if (name === 'session.closed') {
      // Held back until the close is written (SessionClosing.finish).
      live.closingNotice = { name, data: { sessionId: live.id, ...data } }
      return
    }
    this.emit(live, { kind: 'event', name, data: { sessionId: live.id, ...data } })
  }

  /** Numbers the session's next event, hands it to this node's listeners and to the log. */
  emit(live: LiveSession, body: StreamEventBody) {
    const epoch = this.epochOf(live.id)
    if (this.leases && epoch === 0) {
      // Over NATS, a node whose lease lapsed publishes nothing more: another node may own the
      // session by now. Going on here would lose this event for good (its listeners wait for a
      // reply that never comes), so the session is let go at once; the ownership takes it back
      // if it is still this node's, and the restore gives the cut reply again. Not from inside
      // the actor's own transition: on the next turn of the loop.
      setImmediate(() => this.deps.drop(live, 'lease lapsed: its events could not be published'))
      return
    }
    const event = { ...body, seq: ++live.eventSeq, epoch }
    if (live.eventBound && live.eventSeq > live.eventBound - EVENT_ID_RESERVE / 2) this.reserveEventIds(live)
    for (const listener of live.listeners) listener(event)
    this.events.append(live.id, event)
  }

  /** The lease's fencing token the session's events carry (0 in one process). */
  epochOf(sessionId: string): number {
    return this.leases?.token(sessionId) ?? 0
  }

  /** Where the session's streams stand: its last event. */
  position(live: LiveSession): FeedSubscription['position'] {
    return { seq: live.eventSeq, epoch: this.epochOf(live.id) }
  }

  /** Moves the document's bound on the session's event ids ahead (EVENT_ID_RESERVE). */
  private reserveEventIds(live: LiveSession) {
    live.eventBound = live.eventSeq + EVENT_ID_RESERVE
    this.deps.store.reserveEventIds(live.id, live.eventBound).catch(error => {
      this.deps.logger.warn('session event ids could not be reserved: after a crash a restore may reuse some', { sessionId: live.id, error })
    })
  }
}
