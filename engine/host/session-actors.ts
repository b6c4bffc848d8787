// The XState actors of this host's sessions: the session machine with its effects provided,
// which live session each actor belongs to, and how an actor is made (for a new session, or
// from a persisted control state) and started.
import { createActor, type Actor, type AnyActorRef } from 'xstate'
import type { Logger } from '../../platform/logger.js'
import type { LiveSession } from '../session/live-session.js'
import { restoredSnapshot, sessionMachine, type PersistedControl, type SessionContext, type SessionMachine } from '../session/machine.js'
import { sessionEffects, type EffectHost } from '../session/session-effects.js'

export interface SessionActorsDeps {
  /** The machine's effects as the host provides them; the actor's session is found here. */
  effects: Omit<EffectHost, 'sessionOf'>
  logger: Logger
  /** The session's actor failed (an effect threw): the session ends instead of the process. */
  failed(live: LiveSession): void
}

export class SessionActors {
  private readonly machine: SessionMachine
  /** The live session of each running actor (the effects are told the actor). */
  private readonly sessions = new WeakMap<AnyActorRef, LiveSession>()

  constructor(private readonly deps: SessionActorsDeps) {
    this.machine = sessionMachine.provide({ actions: sessionEffects({ ...deps.effects, sessionOf: actor => this.sessions.get(actor)! }) })
  }

  /** The actor of a new session, from its initial context. */
  fresh(context: SessionContext): Actor<SessionMachine> {
    return createActor(this.machine, { input: context })
  }

  /** The actor of a persisted session, from its control state. */
  restored(control: PersistedControl): Actor<SessionMachine> {
    return createActor(this.machine, { snapshot: restoredSnapshot(this.machine, control), input: control.context })
  }

  /** Makes `actor` the session's actor and starts it (at creation, restore or wake-up). */
  bind(live: LiveSession, actor: Actor<SessionMachine>) {
    this.sessions.set(actor, live)
    const failures = actor.subscribe({
      error: error => {
        this.deps.logger.error('session actor failed', { sessionId: live.id, error })
        this.deps.failed(live)
      },
    })
    live.actor = actor
    live.unbind = () => {
      failures.unsubscribe()
      this.sessions.delete(actor)
    }
    actor.start()
  }

  /** The session's actor; a hibernated session must be woken first (SessionLoader.obtain does). */
  awake(live: LiveSession): Actor<SessionMachine> {
    if (!live.actor) throw new Error(`session ${live.id} is hibernated`)
    return live.actor
  }

  /** Forgets whose the session's actor was (the session is closed). */
  forget(live: LiveSession) {
    if (live.actor) this.sessions.delete(live.actor)
  }
}
