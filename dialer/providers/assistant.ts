// The assistant provider: a phone or whatsapp attempt opens an outbound assistant session through
// the engine's public session transport (in-process, or engine nodes over NATS) and ends when the
// session does. The session id is the attempt id, so a supervisor can go from an attempt to its
// session (administration history, whisper, destroy). The crew is rules.crewId or
// DIALER_ASSISTANT_CREW; the first message is static: rules.outboundText or a default; the
// contact's customFields are the session's `arguments`. How the session ended decides the outcome:
//   idle_timeout (nobody spoke within SESSION_IDLE_TIMEOUT_MS) -> no_answer
//   error                                                       -> failed
//   anything else (destroyed, finished, admin_destroyed, ...)   -> answered
// A session that cannot be opened (unknown crew, crew full) is `failed`.
import { randomUUID } from 'node:crypto'
import type { SessionTransport, Subscription, TransportListener } from '../../engine/transport.js'
import type { Outcome } from '../rules.js'
import { AttemptHandedOver, type AttemptRequest, type AttemptResult, type Provider, type ResumedAttempt } from './types.js'

/** What close() hands the attempts still in their session (an identity, never recorded). */
const STOPPED: AttemptResult = { outcome: 'failed', detail: 'service stopped before the assistant session ended' }
const NO_ENGINE: AttemptResult = { outcome: 'failed', detail: 'no assistant engine in this process (run the dialer workers with ROLE=all)' }

export const DEFAULT_OUTBOUND_TEXT = 'Hello {{name}}, this is an automated call from our contact center. Do you have a minute?'

export interface AssistantRules {
  crewId?: string
  outboundText?: string
}

export function outcomeOfClose(reason: string): Outcome {
  if (reason === 'idle_timeout') return 'no_answer'
  if (reason === 'error') return 'failed'
  return 'answered'
}

export class AssistantProvider {
  readonly name = 'assistant'
  private readonly pending = new Map<string, (result: AttemptResult) => void>()

  constructor(
    /** The engine's transport; undefined where this process runs no engine (ROLE=worker). */
    private readonly transport: () => SessionTransport | undefined,
    private readonly defaultCrewId: string,
  ) {}

  /** The provider as one batch sees it (its crew and first message). */
  forBatch(rules: AssistantRules): Provider {
    return { name: this.name, dial: attempt => this.dial(attempt, rules), resume: attempt => this.resume(attempt) }
  }

  async dial(attempt: AttemptRequest, rules: AssistantRules = {}): Promise<AttemptResult> {
    if (attempt.channel === 'email') return { outcome: 'failed', detail: 'the assistant provider dials phone and whatsapp only' }
    const transport = this.transport()
    if (!transport) return NO_ENGINE
    const crewId = rules.crewId ?? this.defaultCrewId
    const text = (rules.outboundText ?? DEFAULT_OUTBOUND_TEXT).replace(/\{\{name\}\}/g, attempt.name)
    const sessionId = attempt.attemptId
    return this.untilClosed(
      sessionId,
      listener =>
        transport.create(
          {
            sessionId,
            consumerId: randomUUID(),
            accountId: attempt.accountId,
            crewId,
            arguments: { ...attempt.customFields },
            outbound: { type: 'static', parameters: { text } },
          },
          listener,
        ),
      `on crew ${crewId}`,
      error => ({ outcome: 'failed', detail: `assistant session not opened on crew ${crewId}: ${error.message}` }),
    )
  }

  /**
   * An attempt whose scheduler died: its session (the attempt id) lives on in the store, and is
   * followed from here to its close (restored on this engine if it has to be). A session that
   * ended before it could be followed (while no scheduler watched it: a minute or more) left its
   * close reason in its tombstone, which decides the outcome as its close would have; one that
   * cannot be reached and left no tombstone ends as `failed`.
   */
  async resume(attempt: ResumedAttempt): Promise<AttemptResult> {
    const transport = this.transport()
    if (!transport) return NO_ENGINE
    const target = { sessionId: attempt.attemptId, accountId: attempt.accountId }
    return this.untilClosed(
      target.sessionId,
      listener => transport.subscribe(target, listener),
      '(followed after its scheduler died)',
      async error => {
        // A failed read of the tombstone is settled by untilClosed as `failed`.
        const reason = await transport.closeReason(target)
        if (reason !== null) return { outcome: outcomeOfClose(reason), detail: `session ${target.sessionId} had closed before its scheduler's successor followed it: ${reason}` }
        return { outcome: 'failed', detail: `assistant session ${target.sessionId} could not be followed after its scheduler died: ${error.message}` }
      },
    )
  }

  /** Resolves when the session opened (or joined) by `open` closes; its close reason is the outcome. */
  private untilClosed(
    sessionId: string,
    open: (listener: TransportListener) => Promise<Subscription>,
    where: string,
    notOpened: (error: Error) => AttemptResult | Promise<AttemptResult>,
  ): Promise<AttemptResult> {
    return new Promise<AttemptResult>(resolve => {
      let subscription: Subscription | undefined
      let settled = false
      const settle = (result: AttemptResult) => {
        if (settled) return
        settled = true
        this.pending.delete(sessionId)
        subscription?.unsubscribe()
        resolve(result)
      }
      this.pending.set(sessionId, settle)
      open(event => {
        if (event.kind === 'closed') settle({ outcome: outcomeOfClose(event.reason), detail: `session ${sessionId} ${where} closed: ${event.reason}` })
      }).then(
        sub => {
          subscription = sub
          if (settled) sub.unsubscribe()
        },
        error =>
          Promise.resolve(notOpened(error as Error)).then(settle, (failure: Error) => settle({ outcome: 'failed', detail: `session ${sessionId} ${where}: ${failure.message}` })),
      )
    }).then(result => {
      if (result === STOPPED) throw new AttemptHandedOver(`service stopped during session ${sessionId}: the next scheduler follows it`)
      return result
    })
  }

  /** Service stopping: attempts whose session is still open are handed over (AttemptHandedOver); the session stays. */
  close() {
    for (const settle of [...this.pending.values()]) settle(STOPPED)
  }
}
