// The timers of a host's live sessions: each session's idle deadline and its external tools'
// deadlines, armed from the machine's context after every event. Time lives in the machine as
// absolute deadlines; a timer only wakes the host, which sends the machine an event whose guard
// decides (a session active since the timer was armed is not expired by it).
import type { Clock } from '../../platform/clock.js'
import type { PendingTool } from '../types.js'

export interface SessionTimers {
  idleTimer: { deadline: number; timer: NodeJS.Timeout } | null
  /** The context's idle deadline as last seen (kept while hibernated). */
  idleDeadline: number
  toolTimers: Map<string, NodeJS.Timeout>
}

export class Deadlines<S extends SessionTimers> {
  constructor(
    private readonly clock: Clock,
    private readonly fire: { idle(session: S): void; tool(session: S, correlationId: string): void },
  ) {}

  arm(session: S, idleDeadline: number, pendingTools: readonly PendingTool[]) {
    session.idleDeadline = idleDeadline
    // Every activity pushes the idle deadline out; the timer armed for an earlier deadline is
    // kept (no clear and re-arm per message): when it fires, the machine's guard sees the newer
    // deadline and the timer is armed again for it.
    if (!session.idleTimer || session.idleTimer.deadline > idleDeadline) {
      if (session.idleTimer) clearTimeout(session.idleTimer.timer)
      session.idleTimer = { deadline: idleDeadline, timer: this.timer(idleDeadline, () => this.fire.idle(session)) }
    }
    if (pendingTools.length === 0 && session.toolTimers.size === 0) return
    const wanted = new Set<string>()
    for (const pending of pendingTools) {
      if (!pending.correlationId || pending.deadline === undefined) continue
      wanted.add(pending.correlationId)
      if (!session.toolTimers.has(pending.correlationId)) this.armTool(session, pending.correlationId, pending.deadline)
    }
    for (const [id, timer] of session.toolTimers) {
      if (!wanted.has(id)) {
        clearTimeout(timer)
        session.toolTimers.delete(id)
      }
    }
  }

  /** The idle timer again, for a deadline that moved since it was armed. */
  rearmIdle(session: S) {
    session.idleTimer = { deadline: session.idleDeadline, timer: this.timer(session.idleDeadline, () => this.fire.idle(session)) }
  }

  armTool(session: S, correlationId: string, deadline: number) {
    session.toolTimers.set(correlationId, this.timer(deadline, () => this.fire.tool(session, correlationId)))
  }

  clear(session: S) {
    if (session.idleTimer) clearTimeout(session.idleTimer.timer)
    session.idleTimer = null
    for (const timer of session.toolTimers.values()) clearTimeout(timer)
    session.toolTimers.clear()
  }

  private timer(deadline: number, fire: () => void) {
    const timer = setTimeout(fire, Math.min(Math.max(0, deadline - this.clock.now()), 2 ** 31 - 1))
    timer.unref()
    return timer
  }
}
