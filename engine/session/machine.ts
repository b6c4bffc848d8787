// The assistant session as a pure XState v5 machine: its states, the events each state takes, and
// what each transition changes in a small context (one assign per transition). What a transition
// does outside the machine is a named effect (`record…`, `startTurn`, `runTools`, ...) whose
// implementation the actor host provides (engine/session/session-effects.ts): the history entries,
// the published events, the turn's generation and tools. The conversation itself (its recent
// window, summary, arguments) is kept beside the actor, folded from the history entries
// (engine/session/conversation.ts), so a transition never copies it. Guards read context and event
// only; time arrives inside events (`at`).
//
//   active.idle ──user.message / attend──▶ active.generating ──gen.completed(tools)──▶ active.tooling
//        ▲                                     │  ▲                                        │
//        └─── gen.completed / failed / interrupt ┘  └────── all turn tools answered ───────┘
//   active.* ──pause──▶ paused ──resume──▶ active.tooling | active.generating | active.idle
//   active.*, paused ──transfer──▶ (same state, new agent)
//   active.*, paused ──destroy / idle expiry──▶ destroyed (final)
//
// Effects are listed before the transition's assign: they see the context as it was when the
// event came (the reply's turn, the call being answered); entry effects see it after.
import { assign, setup, type SnapshotFrom } from 'xstate'
import type { PendingTool } from '../types.js'

/** What a session may do, fixed when it opens (the crew's agents and limits). */
export interface SessionTerms {
  agents: string[]
  idleTimeoutMs: number
  /** Tool rounds a turn may take before its reply must be text. */
  maxToolRounds: number
}

export interface SessionContext {
  agentId: string
  turnId: number
  /** Tool rounds taken by the turn in progress (0: its first generation). */
  round: number
  /** An assistant reply is owed: a user message or attend not yet covered by a generation. */
  replyOwed: boolean
  pendingTools: PendingTool[]
  /** Recently resolved correlation ids (bounded), so a late duplicate is told apart from an unknown id. */
  resolved: string[]
  transfers: number
  /** Absolute deadline (ms) after which the session expires as abandoned. */
  idleDeadline: number
  closed: { reason: string; by: CloseSource } | null
  terms: SessionTerms
}

export type CloseSource = 'channel' | 'admin' | 'system'
type At = { at: number }
export type ContextMessageInput = { author: string; text: string }

export type SessionEvent =
  | ({ type: 'user.message'; text: string; consumerId: string } & At)
  | ({ type: 'user.interrupt'; consumerId: string; heard?: string } & At)
  | ({ type: 'admin.append'; userId: string; messages: ContextMessageInput[] } & At)
  | ({ type: 'admin.override'; userId: string; messages: ContextMessageInput[]; arguments?: Record<string, unknown> } & At)
  | ({ type: 'admin.attend'; userId: string } & At)
  | ({ type: 'admin.whisper'; userId: string; text: string } & At)
  | ({ type: 'admin.impersonate'; userId: string; text: string; applyModifiers: boolean } & At)
  | ({ type: 'admin.toolinject'; userId: string; call: PendingTool; result?: unknown; ok?: boolean } & At)
  | ({ type: 'admin.transfer'; userId: string; target: string; reason?: string } & At)
  | ({ type: 'admin.pause'; userId: string; reason?: string } & At)
  | ({ type: 'admin.resume'; userId: string } & At)
  | ({ type: 'external.resolve'; correlationId: string; result: unknown; userId?: string } & At)
  | ({ type: 'tool.expire'; correlationId: string } & At)
  | ({ type: 'session.destroy'; reason: string; by: CloseSource; userId?: string } & At)
  | ({ type: 'session.expire' } & At)
  | ({ type: 'gen.completed'; text: string; toolCalls: PendingTool[] } & At)
  | ({ type: 'gen.failed'; error: string } & At)
  | ({ type: 'tool.result'; callId: string; result: unknown; ok: boolean } & At)

export type EventOf<T extends SessionEvent['type']> = Extract<SessionEvent, { type: T }>

export function initialContext(terms: SessionTerms, agentId: string, at: number, replyOwed = false): SessionContext {
  return {
    agentId,
    turnId: 0,
    round: 0,
    replyOwed,
    pendingTools: [],
    resolved: [],
    transfers: 0,
    idleDeadline: at + terms.idleTimeoutMs,
    closed: null,
    terms,
  }
}

const turnToolsPending = (context: SessionContext) => context.pendingTools.some(p => p.origin === 'turn')
/** The id of the reply a turn's round writes (its chunks and its message carry it). */
export const replyId = (context: Pick<SessionContext, 'turnId' | 'round'>) => `t${context.turnId}.${context.round}`
export const toolsAllowed = (context: SessionContext) => context.round < context.terms.maxToolRounds

/** The idle deadline pushed out by activity at `at`. */
const touched = (context: SessionContext, event: SessionEvent) => ({ idleDeadline: event.at + context.terms.idleTimeoutMs })
const nextTurn = (context: SessionContext) => ({ turnId: context.turnId + 1, round: 0, replyOwed: false })

/** The pending call an event answers (a turn's tool result, a resolver's result, a deadline). */
export function answeredCall(context: SessionContext, event: SessionEvent): PendingTool | undefined {
  if (event.type === 'tool.result') return context.pendingTools.find(p => p.callId === event.callId)
  if (event.type === 'external.resolve' || event.type === 'tool.expire') return context.pendingTools.find(p => p.correlationId === event.correlationId)
  return undefined
}

/** The machine's effects, by name: implementations are the host's (machine.provide); here they do nothing. */
export const SESSION_EFFECTS = [
  'announceWaiting',
  'startTurn',
  'stopTurn',
  'runTools',
  'recordUserMessage',
  'recordInterrupt',
  'recordAttend',
  'recordReply',
  'recordToolRequest',
  'recordFailure',
  'recordToolResult',
  'recordAppend',
  'recordOverride',
  'recordWhisper',
  'recordImpersonation',
  'recordToolInjection',
  'recordTransfer',
  'recordPause',
  'recordResume',
  'recordDestroy',
] as const
export type SessionEffectName = (typeof SESSION_EFFECTS)[number]
const effects = Object.fromEntries(SESSION_EFFECTS.map(name => [name, () => {}])) as Record<SessionEffectName, () => void>

export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    input: {} as SessionContext,
    events: {} as SessionEvent,
  },
  guards: {
    replyOwed: ({ context }) => context.replyOwed,
    turnToolsPending: ({ context }) => turnToolsPending(context),
    turnToolsDone: ({ context }) => !turnToolsPending(context),
    asksForTools: ({ event }) => event.type === 'gen.completed' && event.toolCalls.length > 0,
    knownAgent: ({ context, event }) => event.type === 'admin.transfer' && context.terms.agents.includes(event.target) && event.target !== context.agentId,
    correlationPending: ({ context, event }) => event.type === 'external.resolve' && answeredCall(context, event) !== undefined,
    toolDeadlinePassed: ({ context, event }) => {
      const call = answeredCall(context, event)
      return event.type === 'tool.expire' && call?.deadline !== undefined && call.deadline <= event.at
    },
    idleDeadlinePassed: ({ context, event }) => event.type === 'session.expire' && event.at >= context.idleDeadline,
  },
  actions: {
    // Effects (engine/session/session-effects.ts).
    ...effects,

    // What transitions change: one assign each.
    touch: assign(({ context, event }) => touched(context, event)),
    oweReply: assign(({ context, event }) => ({ replyOwed: true, ...touched(context, event) })),
    newTurn: assign(({ context, event }) => ({ ...nextTurn(context), ...touched(context, event) })),
    newTurnUntouched: assign(({ context }) => nextTurn(context)),
    /** A round after tool results continues the same turn. */
    continueTurn: assign(({ context }) => ({ round: context.round + 1, replyOwed: false })),
    /** Resumed with a reply owed: the interrupted turn goes on if it was past its first round, else a new one starts. */
    resumeTurn: assign(({ context, event }) => ({
      ...(context.round > 0 ? { replyOwed: false } : nextTurn(context)),
      ...touched(context, event),
    })),
    endTurn: assign(({ context, event }) => ({ round: 0, ...touched(context, event) })),
    endTurnUntouched: assign({ round: 0 }),
    /** Paused mid-reply: the reply is owed again, from a first round. */
    cutReply: assign(({ context, event }) => ({ replyOwed: true, round: 0, ...touched(context, event) })),
    /** Paused while tools run: the turn resumes where it was once they answer. */
    holdTurn: assign(({ context, event }) => ({ replyOwed: true, ...touched(context, event) })),
    takeTurnCalls: assign(({ context, event }) => ({
      pendingTools: [...context.pendingTools, ...(event as EventOf<'gen.completed'>).toolCalls.map(c => ({ ...c, origin: 'turn' as const }))],
    })),
    takeInjectedCall: assign(({ context, event }) => {
      const { call, userId } = event as EventOf<'admin.toolinject'>
      return { ...(call.external ? { pendingTools: [...context.pendingTools, { ...call, origin: 'inject' as const, userId }] } : {}), ...touched(context, event) }
    }),
    settleCall: assign(({ context, event }) => {
      const call = answeredCall(context, event)
      if (!call) return {}
      return {
        pendingTools: context.pendingTools.filter(p => p !== call),
        resolved: call.correlationId ? [...context.resolved, call.correlationId].slice(-100) : context.resolved,
        ...(call.origin === 'inject' ? touched(context, event) : {}),
      }
    }),
    transfer: assign(({ context, event }) => ({ agentId: (event as EventOf<'admin.transfer'>).target, transfers: context.transfers + 1, ...touched(context, event) })),
    close: assign(({ event }) => ({
      closed: event.type === 'session.destroy' ? { reason: event.reason, by: event.by } : { reason: 'idle_timeout', by: 'system' as const },
      pendingTools: [],
    })),
  },
}).createMachine({
  id: 'session',
  context: ({ input }) => input,
  initial: 'active',
  on: {
    'admin.append': { actions: ['recordAppend', 'touch'] },
    'admin.override': { actions: ['recordOverride', 'touch'] },
    'admin.whisper': { actions: ['recordWhisper', 'touch'] },
    'admin.impersonate': { actions: ['recordImpersonation', 'touch'] },
    'admin.toolinject': { actions: ['recordToolInjection', 'takeInjectedCall'] },
    'external.resolve': { guard: 'correlationPending', actions: ['recordToolResult', 'settleCall'] },
    'tool.expire': { guard: 'toolDeadlinePassed', actions: ['recordToolResult', 'settleCall'] },
    'session.destroy': { target: '.destroyed', actions: ['recordDestroy', 'close'] },
    'session.expire': { guard: 'idleDeadlinePassed', target: '.destroyed', actions: ['recordDestroy', 'close'] },
  },
  states: {
    active: {
      initial: 'opening',
      on: {
        'admin.pause': { target: 'paused', actions: ['recordPause', 'touch'] },
        'admin.transfer': { guard: 'knownAgent', actions: ['recordTransfer', 'transfer'] },
      },
      states: {
        opening: {
          always: [{ guard: 'replyOwed', target: 'generating', actions: 'newTurnUntouched' }, { target: 'idle' }],
        },
        idle: {
          entry: 'announceWaiting',
          on: {
            'user.message': { target: 'generating', actions: ['recordUserMessage', 'newTurn'] },
            'admin.attend': { target: 'generating', actions: ['recordAttend', 'newTurn'] },
          },
        },
        generating: {
          entry: 'startTurn',
          exit: 'stopTurn',
          on: {
            'gen.completed': [
              { guard: 'asksForTools', target: 'tooling', actions: ['recordToolRequest', 'takeTurnCalls'] },
              { guard: 'replyOwed', target: 'generating', reenter: true, actions: ['recordReply', 'newTurn'] },
              { target: 'idle', actions: ['recordReply', 'endTurn'] },
            ],
            'gen.failed': [
              { guard: 'replyOwed', target: 'generating', reenter: true, actions: ['recordFailure', 'newTurnUntouched'] },
              { target: 'idle', actions: ['recordFailure', 'endTurnUntouched'] },
            ],
            // Kept and answered by another reply right after this one.
            'user.message': { actions: ['recordUserMessage', 'oweReply'] },
            // Barge-in: the reply stops where it is (stopTurn); a message it did not answer yet is answered next.
            'user.interrupt': [
              { guard: 'replyOwed', target: 'generating', reenter: true, actions: ['recordInterrupt', 'newTurn'] },
              { target: 'idle', actions: ['recordInterrupt', 'endTurn'] },
            ],
            'admin.pause': { target: '#session.paused', actions: ['recordPause', 'cutReply'] },
          },
        },
        tooling: {
          entry: 'runTools',
          always: { guard: 'turnToolsDone', target: 'generating', actions: 'continueTurn' },
          on: {
            'tool.result': { actions: ['recordToolResult', 'settleCall'] },
            'user.message': { actions: ['recordUserMessage', 'oweReply'] },
            'admin.pause': { target: '#session.paused', actions: ['recordPause', 'holdTurn'] },
          },
        },
      },
    },
    paused: {
      on: {
        'admin.resume': [
          { guard: 'turnToolsPending', target: 'active.tooling', actions: ['recordResume', 'touch'] },
          { guard: 'replyOwed', target: 'active.generating', actions: ['recordResume', 'resumeTurn'] },
          { target: 'active.idle', actions: ['recordResume', 'touch'] },
        ],
        // Kept; answered after resume.
        'user.message': { actions: ['recordUserMessage', 'oweReply'] },
        'admin.transfer': { guard: 'knownAgent', actions: ['recordTransfer', 'transfer'] },
      },
    },
    destroyed: { type: 'final' },
  },
})

export type SessionMachine = typeof sessionMachine
export type SessionSnapshot = SnapshotFrom<SessionMachine>

/** `active.idle`, `paused`, ... */
export function stateName(snapshot: SessionSnapshot): string {
  const value = snapshot.value
  if (typeof value === 'string') return value
  const [parent, child] = Object.entries(value)[0]!
  return typeof child === 'string' ? `${parent}.${child}` : parent
}

/**
 * The state under `active` (`idle`, `generating`, `tooling`), undefined when paused or destroyed.
 * Read off the value: `matches()` builds both state values on every call.
 */
export function activeState(snapshot: SessionSnapshot): string | undefined {
  const value = snapshot.value
  return typeof value === 'object' ? (value as { active?: string }).active : undefined
}

/**
 * What is persisted of the machine: its state and context, between turns. A reply being written
 * is kept as owed (`active.idle`, replyOwed): a restore answers it again from its first word.
 */
export interface PersistedControl {
  value: SessionSnapshot['value']
  context: SessionContext
}

export function persistedControl(snapshot: SessionSnapshot): PersistedControl {
  if (activeState(snapshot) === 'generating') {
    return { value: { active: 'idle' }, context: { ...snapshot.context, replyOwed: true, round: 0 } }
  }
  return { value: snapshot.value, context: snapshot.context }
}

/** A persisted control as a snapshot a new actor starts from (createActor(machine, { snapshot })). */
export function restoredSnapshot(machine: SessionMachine, control: PersistedControl) {
  return machine.getPersistedSnapshot(machine.resolveState({ value: control.value, context: control.context }))
}

export class IllegalMoveError extends Error {
  override name = 'IllegalMoveError'
  constructor(readonly event: string, readonly state: string) {
    super(`${event} is not allowed while the session is ${state}`)
  }
}

/**
 * The only way events reach a session actor: an event the machine would ignore is refused. A
 * user message is taken in every live state (test/engine/machine.test.ts holds the machine to
 * it), so it is not resolved twice: `can` computes the whole transition.
 */
export function assertCan(snapshot: SessionSnapshot, event: SessionEvent) {
  if (snapshot.status !== 'active') throw new IllegalMoveError(event.type, 'destroyed')
  if (event.type === 'user.message') return
  if (!snapshot.can(event)) throw new IllegalMoveError(event.type, stateName(snapshot))
}
