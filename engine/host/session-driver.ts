// How events reach a live session's machine, and what follows every event it takes. A command's
// event is refused with 409 when the machine's state does not take it; an event of the session's
// own effects (a generation's end, a tool's result) is dropped when the machine moved on. After
// an event: the session closes if the machine ended, its turn is counted, its deadlines are
// armed, and a session with no command in progress is looked at for hibernation.
import { InvalidState } from '../../platform/errors.js'
import { isBusy, type LiveSession } from '../session/live-session.js'
import { assertCan, IllegalMoveError, type SessionEvent } from '../session/machine.js'
import type { Deadlines } from './deadlines.js'
import type { Hibernation } from './hibernation.js'
import type { LiveSessions } from './live-sessions.js'
import type { SessionActors } from './session-actors.js'

export interface SessionDriverDeps {
  sessions: Pick<LiveSessions, 'countTurn'>
  actors: Pick<SessionActors, 'awake'>
  deadlines: Pick<Deadlines<LiveSession>, 'arm'>
  hibernation: Pick<Hibernation, 'note'>
  /** The machine ended (destroyed, idle timeout): the session closes. */
  finish(live: LiveSession): void
}

export class SessionDriver {
  constructor(private readonly deps: SessionDriverDeps) {}

  /** Sends a command's event the machine accepts, or refuses it with 409. */
  send(live: LiveSession, event: SessionEvent) {
    const actor = this.deps.actors.awake(live)
    try {
      assertCan(actor.getSnapshot(), event)
    } catch (error) {
      if (error instanceof IllegalMoveError) {
        throw new InvalidState('INVALID_SESSION_STATE', error.message, { state: error.state, command: error.event })
      }
      throw error
    }
    actor.send(event)
    this.afterEvent(live)
  }

  /** An event of the session's own effects (a generation's end, a tool's result): dropped if the machine moved on. */
  deliver(live: LiveSession, event: SessionEvent) {
    if (live.finished || !live.actor) return
    const snapshot = live.actor.getSnapshot()
    if (snapshot.status !== 'active' || !snapshot.can(event)) return
    live.actor.send(event)
    this.afterEvent(live)
  }

  afterEvent(live: LiveSession) {
    if (live.finished || !live.actor) return
    const snapshot = live.actor.getSnapshot()
    if (snapshot.status === 'done') return this.deps.finish(live)
    if (snapshot.status !== 'active') return
    this.deps.sessions.countTurn(live, isBusy(snapshot))
    this.deps.deadlines.arm(live, snapshot.context.idleDeadline, snapshot.context.pendingTools)
    if (live.pins === 0) this.deps.hibernation.note(live)
  }
}
