// The session machine as the floor prototypes run it (bench/sse/server.ts `floor`,
// bench/cluster/floor.ts): the real machine (engine/session/machine.ts) with only the effects a
// scripted turn needs — its history entries and its events, through the prototype's own `log`
// and `frame` — and a reply that quotes the message, written at once.
import { createActor } from 'xstate'
import { initialContext, replyId, SESSION_EFFECTS, sessionMachine } from '../engine/session/machine.js'

export type FloorActor = ReturnType<typeof createActor<typeof sessionMachine>>

/** What a prototype keeps per session for the effects. */
export interface FloorSession {
  id: string
  actor: FloorActor
  /** The history seq of the last entry logged. */
  history: number
  /** The last user message: its seq (what its answer waits for) and text (what the reply quotes). */
  user: { seq: number; text: string }
}

export interface FloorSink<S extends FloorSession> {
  /** A history entry (numbered by the sink: it raises `history`). */
  log(s: S, type: string, at: number, fields: Record<string, unknown>): void
  /** An event to the session's streams. */
  frame(s: S, event: string, data: unknown): void
  /** The reply's text for the user's message. */
  reply(text: string): string
}

/** The machine with the sink's effects, and how to start one actor per session. */
export function floorMachine<S extends FloorSession>(sink: FloorSink<S>) {
  const ofActor = new WeakMap<object, S>()
  const effects = Object.fromEntries(SESSION_EFFECTS.map(name => [name, () => {}])) as Record<string, (args: any) => void>
  const on = (fn: (s: S, args: any) => void) => (args: any) => fn(ofActor.get(args.self)!, args)
  effects.announceWaiting = on((s, { context }) => sink.frame(s, 'crew.status.waiting', { sessionId: s.id, agentId: context.agentId }))
  effects.recordUserMessage = on((s, { event }) => {
    sink.log(s, 'message.user', event.at, { consumerId: event.consumerId, text: event.text })
    s.user = { seq: s.history, text: event.text }
  })
  effects.startTurn = on((s, { context, event }) => {
    sink.log(s, 'turn.started', event.at, { turnId: context.turnId, agentId: context.agentId, round: 0 })
    sink.frame(s, 'crew.status.writing', { sessionId: s.id, agentId: context.agentId, turnId: context.turnId })
    const text = sink.reply(s.user.text)
    queueMicrotask(() => s.actor.send({ type: 'gen.completed', text, toolCalls: [], at: Date.now() }))
  })
  effects.recordReply = on((s, { context, event }) => {
    const messageId = replyId(context)
    sink.log(s, 'message.assistant', event.at, { source: 'generated', messageId, turnId: context.turnId, agentId: context.agentId, text: event.text })
    sink.frame(s, 'assistant.response', { messageId, turnId: context.turnId, index: 0, delta: event.text })
    sink.frame(s, 'assistant.message', { sessionId: s.id, messageId, turnId: context.turnId, agentId: context.agentId, text: event.text, at: event.at })
  })
  const machine = sessionMachine.provide({ actions: effects })
  const terms = { agents: ['general'], idleTimeoutMs: 600_000, maxToolRounds: 4 }
  return {
    /** A new actor, bound to its session by `bind` before it starts. */
    actor: (): FloorActor => createActor(machine, { input: initialContext(terms, 'general', Date.now()) }),
    bind: (s: S) => ofActor.set(s.actor, s),
  }
}
