// How a session leaves this node without ending: dropped (another node owns it, or may: its
// lease was lost or lapsed; the store is not touched), handed over (an engine node draining) or
// let go with the process that stops. A session handed over or stopped is checkpointed first;
// each stays persisted for whichever node restores it next.
import type { Logger } from '../../platform/logger.js'
import type { Metrics } from '../../platform/metrics.js'
import type { SessionRepository } from '../persistence/session-store.js'
import { settled, type LiveSession } from '../session/live-session.js'
import type { Deadlines } from './deadlines.js'
import type { SessionLeases } from './host-options.js'
import type { LiveSessions } from './live-sessions.js'

export interface SessionLeavingDeps {
  sessions: Pick<LiveSessions, 'get' | 'list' | 'clear' | 'forget' | 'released' | 'countTurn'>
  deadlines: Pick<Deadlines<LiveSession>, 'clear'>
  store: Pick<SessionRepository, 'releaseEventIds'>
  leases: SessionLeases | undefined
  logger: Logger
  metrics: Metrics
}

export class SessionLeaving {
  constructor(private readonly deps: SessionLeavingDeps) {}

  /** Lets go of a session without touching the store: another node owns it now. */
  drop(live: LiveSession, why: string) {
    if (live.finished) return
    this.deps.logger.warn('session dropped from this node', { sessionId: live.id, why })
    live.finished = true
    this.deps.deadlines.clear(live)
    live.listeners.clear()
    live.writer.discard()
    this.letGo(live)
    this.deps.sessions.forget(live)
    this.deps.sessions.released(live)
    this.deps.leases?.unloaded(live.id, 'dropped', live.accountId)
  }

  /**
   * Graceful hand-over (an engine node draining): waits at most `timeoutMs` for the reply or tool
   * round in progress to end, checkpoints the session and lets its actor go without ending the
   * session, for another node to restore. Answers the session's account (undefined: not here).
   */
  async handOver(sessionId: string, timeoutMs: number): Promise<string | undefined> {
    const live = this.deps.sessions.get(sessionId)
    if (!live || live.finished) return undefined
    if (live.actor) await settled(live.actor, timeoutMs)
    if (live.finished) return undefined
    this.deps.deadlines.clear(live)
    live.writer.checkpoint()
    await live.writer.flushed()
    if (live.finished) return undefined
    live.finished = true
    live.listeners.clear()
    this.letGo(live)
    this.deps.sessions.forget(live)
    this.deps.sessions.released(live)
    return live.accountId
  }

  /** Every live session but those closing: checkpointed and let go, their event ids released. */
  async stopAll() {
    const released: Promise<void>[] = []
    for (const live of this.deps.sessions.list()) {
      if (live.finished) continue // closing: the host waits for its close
      this.deps.deadlines.clear(live)
      live.writer.checkpoint()
      await live.writer.flushed()
      live.finished = true
      this.letGo(live)
      this.deps.sessions.released(live)
      // Nothing more is published: the next process numbers on from the exact last id.
      if (live.eventBound) {
        released.push(
          this.deps.store.releaseEventIds(live.id, live.eventSeq).catch(error => this.deps.logger.warn('session event ids could not be released', { sessionId: live.id, error })),
        )
      }
    }
    this.deps.sessions.clear()
    await Promise.all(released)
  }

  /** The session's actor stops (a hibernated one has none). */
  private letGo(live: LiveSession) {
    this.deps.sessions.countTurn(live, false)
    if (live.actor) {
      live.unbind?.()
      live.actor.stop()
    } else {
      this.deps.metrics.sessionsHibernated.dec()
    }
  }
}
