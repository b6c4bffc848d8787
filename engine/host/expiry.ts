// What a session's timers (engine/host/deadlines.ts) do when they fire: at the idle deadline the
// session expires (a hibernated one is woken for it); at an external tool's deadline the call
// fails. Either way the machine's guard decides by the service clock: a timer armed for an
// earlier deadline is armed again for what is left.
import type { Logger } from '../../platform/logger.js'
import type { LiveSession } from '../session/live-session.js'
import type { SessionEvent } from '../session/machine.js'
import type { Deadlines } from './deadlines.js'
import type { SessionActors } from './session-actors.js'
import type { SessionDriver } from './session-driver.js'

export interface ExpiryDeps {
  driver: Pick<SessionDriver, 'deliver' | 'afterEvent'>
  actors: Pick<SessionActors, 'awake'>
  deadlines: Pick<Deadlines<LiveSession>, 'rearmIdle' | 'armTool'>
  /** Brings a hibernated session's actor back. */
  wake(live: LiveSession): Promise<void>
  logger: Logger
  now(): number
}

export class Expiry {
  constructor(private readonly deps: ExpiryDeps) {}

  /** The session's idle timer fired. */
  idle(live: LiveSession) {
    live.idleTimer = null
    if (live.finished) return
    if (this.deps.now() < live.idleDeadline) {
      // Armed for an earlier deadline; the session was active since.
      this.deps.deadlines.rearmIdle(live)
      return
    }
    if (!live.actor) {
      this.deps.wake(live).then(
        () => this.idle(live),
        error => this.deps.logger.error('hibernated session could not be woken to expire', { sessionId: live.id, error }),
      )
      return
    }
    this.deps.driver.deliver(live, { type: 'session.expire', at: this.deps.now() })
  }

  /** The deadline of an external tool call of the session fired. */
  tool(live: LiveSession, correlationId: string) {
    live.toolTimers.delete(correlationId)
    if (live.finished) return
    const event: SessionEvent = { type: 'tool.expire', correlationId, at: this.deps.now() }
    const actor = this.deps.actors.awake(live) // a session with pending tools is never hibernated
    if (actor.getSnapshot().can(event)) {
      actor.send(event)
      this.deps.driver.afterEvent(live)
      return
    }
    // Not due yet by the service clock: arm again for what is left.
    const pending = actor.getSnapshot().context.pendingTools.find(p => p.correlationId === correlationId)
    if (pending?.deadline !== undefined) this.deps.deadlines.armTool(live, correlationId, pending.deadline)
  }
}
