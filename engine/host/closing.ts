// How a session ends on this host, once its machine is done (destroyed, idle timeout) or its
// actor failed: its timers and generation stop, its pending history is written, its document
// becomes a tombstone and its crew slot is freed, then its streams are told it closed and its
// journal goes.
import type { Logger } from '../../platform/logger.js'
import { settledWithin } from '../../platform/timing.js'
import type { CrewSlots } from '../persistence/crew-slots.js'
import type { SessionRepository } from '../persistence/session-store.js'
import type { LiveSession } from '../session/live-session.js'
import type { EventLog } from '../streams/event-log.js'
import type { Deadlines } from './deadlines.js'
import type { EventPublisher } from './event-publisher.js'
import type { SessionLeases } from './host-options.js'
import type { LiveSessions } from './live-sessions.js'
import type { SessionActors } from './session-actors.js'

/**
 * How long a closing session's streams wait for its close to be written (tombstone, crew slot
 * freed) before they are told `session.closed` anyway: the write-behind retries a failing store
 * for ~32 s, and a stream should not hang on it that long.
 */
export const CLOSE_NOTICE_WAIT_MS = 2_000

export interface SessionClosingDeps {
  sessions: Pick<LiveSessions, 'released' | 'forget'>
  actors: Pick<SessionActors, 'awake' | 'forget'>
  deadlines: Pick<Deadlines<LiveSession>, 'clear'>
  publisher: Pick<EventPublisher, 'emit'>
  events: Pick<EventLog, 'forget'>
  store: Pick<SessionRepository, 'markDestroyed' | 'deleteLog'>
  slots: Pick<CrewSlots, 'release'>
  leases: SessionLeases | undefined
  logger: Logger
  now(): number
}

export class SessionClosing {
  /** Closes in progress: a stopping host waits for them. */
  private readonly cleanups = new Set<Promise<void>>()

  constructor(private readonly deps: SessionClosingDeps) {}

  finish(live: LiveSession) {
    if (live.finished) return
    const { sessions, store, logger } = this.deps
    live.finished = true
    const context = this.deps.actors.awake(live).getSnapshot().context
    this.deps.deadlines.clear(live)
    live.closedAs = context.closed?.reason ?? 'destroyed'
    sessions.released(live)
    // Resources released: the journal goes; a tombstone says it was destroyed. The session stays
    // live, finished, until then: a command meanwhile answers 404 instead of restoring it from
    // its document, which is not a tombstone yet.
    const closed = (async () => {
      await live.writer.flushed()
      // Conditional: two nodes closing the same session (reapers racing, engine/host/reaper.ts)
      // free its crew slot once, whoever turns the document into a tombstone first.
      if (await store.markDestroyed(live.id, { reason: live.closedAs!, at: this.deps.now() })) {
        await this.deps.slots.release(live.accountId, live.crew.id)
      }
    })()
    live.cleanup = (async () => {
      // The streams hear `session.closed` once the session is closed in the store and its crew
      // slot is free, so a client that opens a new session on it is not refused for the old one;
      // a store that cannot be written holds the notice CLOSE_NOTICE_WAIT_MS at most.
      await settledWithin(closed, CLOSE_NOTICE_WAIT_MS)
      if (live.closingNotice) this.deps.publisher.emit(live, { kind: 'event', ...live.closingNotice })
      this.deps.publisher.emit(live, { kind: 'closed', reason: live.closedAs! })
      this.deps.events.forget(live.id)
      live.listeners.clear()
      await closed
      await store.deleteLog(live.id)
    })()
      .finally(() => live.writer.closed())
      .catch(error => logger.error('session cleanup failed', { sessionId: live.id, error }))
      .finally(() => {
        this.deps.actors.forget(live)
        sessions.forget(live)
        this.deps.leases?.unloaded(live.id, 'finished', live.accountId)
      })
    const cleanup = live.cleanup
    this.cleanups.add(cleanup)
    void cleanup.finally(() => this.cleanups.delete(cleanup))
  }

  /** Resolves once the closes in progress now are written and their resources released. */
  async closed() {
    await Promise.all(this.cleanups)
  }
}
