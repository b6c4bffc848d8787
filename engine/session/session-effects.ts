// What a session's transitions do outside its machine (engine/session/machine.ts names them): the
// history entries they write, the events they publish to the session's streams, the turn's
// generation and tools. Every history entry goes through `log`: numbered, folded into the
// session's conversation, and handed to its writer (journal, report record) in one place.
import type { AnyActorRef } from 'xstate'
import { applyModifiers, Guardrails } from './conversation.js'
import type { Crew } from '../crews.js'
import type { LiveSession } from './live-session.js'
import {
  answeredCall,
  replyId,
  type EventOf,
  type SessionContext,
  type SessionEffectName,
  type SessionEvent,
  type SessionTerms,
} from './machine.js'
import type { HistoryEntry, OutboundSpec, PendingTool, PublishedEvent } from '../types.js'

/** What the effects need of the actor host. */
export interface EffectHost {
  /** The live session an actor belongs to. */
  sessionOf(actor: AnyActorRef): LiveSession
  /** An event to the session's streams (numbered by the host). */
  publish(live: LiveSession, name: string, data: Record<string, unknown>): void
  /** Starts the turn's generation (the machine just entered `generating`). */
  generate(live: LiveSession, context: SessionContext): void
  /** Cancels the generation in flight, if any (the machine left `generating`; its exit runs before the transition's effects). */
  stopGeneration(live: LiveSession): void
  /** Runs the round's in-process tool calls; their results come back as `tool.result` events. */
  runTools(live: LiveSession, calls: PendingTool[]): void
  /** The clock, for effects of a transition no timed event caused (the actor's start). */
  now(): number
}

type Fields = Record<string, unknown>

/** Numbers a history entry, folds it into the conversation and hands it to the writer; answers its seq. */
export function log(live: LiveSession, type: string, at: number, fields: Fields): number {
  const entry: HistoryEntry = { seq: ++live.seq, at, type }
  for (const key in fields) if (fields[key] !== undefined) entry[key] = fields[key]
  live.updatedAt = at
  live.conversation!.apply(entry)
  live.writer.append(entry)
  return entry.seq
}

/** Each crew's guardrails, compiled once. */
const compiledGuardrails = new WeakMap<Crew, Guardrails>()
export function guardrailsOf(crew: Crew): Guardrails {
  let guardrails = compiledGuardrails.get(crew)
  if (!guardrails) compiledGuardrails.set(crew, (guardrails = new Guardrails(crew.guardrails)))
  return guardrails
}

type Effect = (live: LiveSession, context: SessionContext, event: SessionEvent) => void

/** The implementations of the machine's effects (machine.provide({ actions })). */
export function sessionEffects(host: EffectHost): Record<SessionEffectName, (args: { context: SessionContext; event: SessionEvent; self: AnyActorRef }) => void> {
  const effects: Partial<Record<SessionEffectName, Effect>> = {
    announceWaiting: (live, c) => host.publish(live, 'crew.status.waiting', { agentId: c.agentId }),
    startTurn: (live, c, e) => {
      // A round after tool results continues the same turn.
      log(live, c.round > 0 ? 'turn.continued' : 'turn.started', e.at ?? host.now(), { turnId: c.turnId, agentId: c.agentId, round: c.round })
      host.publish(live, 'crew.status.writing', { agentId: c.agentId, turnId: c.turnId })
      host.generate(live, c)
    },
    stopTurn: live => host.stopGeneration(live),
    runTools: (live, c) => host.runTools(live, c.pendingTools.filter(p => p.origin === 'turn' && !p.external)),
    recordUserMessage: (live, _c, event) => {
      const e = event as EventOf<'user.message'>
      const { text, triggered } = guardrailsOf(live.crew).apply(e.text, 'user')
      const seq = log(live, 'message.user', e.at, { consumerId: e.consumerId, text })
      for (const guardrail of triggered) log(live, 'guardrail.triggered', e.at, { guardrail, action: 'redact', messageSeq: seq, side: 'user' })
    },
    recordInterrupt: (live, c, event) => {
      // The generation was cancelled on leaving `generating` (stopTurn ran first): what it
      // published is all the user got of this reply.
      const e = event as EventOf<'user.interrupt'>
      const generation = live.generation
      const messageId = replyId(c)
      const delivered = generation?.published ?? ''
      log(live, 'turn.interrupted', e.at, { turnId: c.turnId, messageId, agentId: c.agentId, consumerId: e.consumerId, delivered, chunks: generation?.index ?? 0, heard: e.heard })
      host.publish(live, 'assistant.interrupted', { messageId, turnId: c.turnId, agentId: c.agentId, chunks: generation?.index ?? 0, text: delivered })
    },
    recordAttend: (live, _c, e) => void log(live, 'admin.attend', e.at, { userId: (e as EventOf<'admin.attend'>).userId }),
    recordReply: (live, c, event) => {
      const e = event as EventOf<'gen.completed'>
      const { text, triggered } = guardrailsOf(live.crew).apply(e.text, 'assistant')
      const messageId = replyId(c)
      const seq = log(live, 'message.assistant', e.at, { source: 'generated', messageId, turnId: c.turnId, agentId: c.agentId, text })
      for (const guardrail of triggered) log(live, 'guardrail.triggered', e.at, { guardrail, action: 'redact', messageSeq: seq, side: 'assistant' })
      host.publish(live, 'assistant.message', { messageId, turnId: c.turnId, agentId: c.agentId, text, at: e.at })
    },
    recordToolRequest: (live, c, event) => {
      const e = event as EventOf<'gen.completed'>
      const toolCalls = e.toolCalls.map(call => ({ callId: call.callId, tool: call.tool, args: call.args }))
      log(live, 'message.assistant', e.at, { source: 'generated', messageId: replyId(c), turnId: c.turnId, agentId: c.agentId, text: e.text, toolCalls })
      for (const call of e.toolCalls) logToolCall(live, call, e.at, { origin: 'turn', turnId: c.turnId })
    },
    recordFailure: (live, c, e) => {
      log(live, 'assistant.error', e.at, { turnId: c.turnId, error: (e as EventOf<'gen.failed'>).error })
      host.publish(live, 'assistant.error', { turnId: c.turnId, code: 'ASSISTANT_UNAVAILABLE', message: 'The assistant could not produce a reply' })
    },
    recordToolResult: (live, c, e) => {
      const call = answeredCall(c, e)
      if (!call) return
      const result = e.type === 'tool.expire' ? { error: 'timeout', message: `No result for ${call.tool} before its deadline` } : (e as EventOf<'tool.result' | 'external.resolve'>).result
      log(live, 'tool.result', e.at, {
        callId: call.callId,
        tool: call.tool,
        correlationId: call.correlationId,
        ok: e.type === 'tool.result' ? e.ok : e.type === 'external.resolve',
        result,
        origin: call.origin,
        userId: e.type === 'external.resolve' ? e.userId : undefined,
        via: e.type === 'external.resolve' ? 'resolver' : e.type === 'tool.expire' ? 'timeout' : 'handler',
      })
    },
    recordAppend: (live, _c, event) => {
      const e = event as EventOf<'admin.append'>
      log(live, 'context.appended', e.at, { userId: e.userId, count: e.messages.length, messages: e.messages })
    },
    recordOverride: (live, _c, event) => {
      const e = event as EventOf<'admin.override'>
      log(live, 'context.overridden', e.at, { userId: e.userId, previousCount: live.conversation!.total, count: e.messages.length, messages: e.messages, arguments: e.arguments })
    },
    recordWhisper: (live, _c, event) => {
      // Hidden: recorded and given to the assistant as a system message, never published.
      const e = event as EventOf<'admin.whisper'>
      log(live, 'message.whisper', e.at, { userId: e.userId, role: 'system', text: e.text })
    },
    recordImpersonation: (live, c, event) => {
      const e = event as EventOf<'admin.impersonate'>
      const text = e.applyModifiers ? applyModifiers(e.text, live.crew.modifiers) : e.text
      const seq = log(live, 'message.assistant', e.at, { source: 'impersonated', userId: e.userId, agentId: c.agentId, text, applyModifiers: e.applyModifiers })
      // Shown exactly like a generated message: the end user cannot tell them apart.
      host.publish(live, 'assistant.message', { messageId: `m${seq}`, turnId: c.turnId, agentId: c.agentId, text, at: e.at })
    },
    recordToolInjection: (live, _c, event) => {
      const e = event as EventOf<'admin.toolinject'>
      logToolCall(live, e.call, e.at, { origin: 'inject', userId: e.userId })
      if (!e.call.external) {
        log(live, 'tool.result', e.at, { callId: e.call.callId, tool: e.call.tool, ok: e.ok ?? true, result: e.result, origin: 'inject', userId: e.userId, via: 'handler' })
      }
    },
    recordTransfer: (live, c, event) => {
      const e = event as EventOf<'admin.transfer'>
      log(live, 'agent.transferred', e.at, { userId: e.userId, from: c.agentId, to: e.target, reason: e.reason })
      host.publish(live, 'session.transferred', { from: c.agentId, agentId: e.target })
    },
    recordPause: (live, _c, event) => {
      const e = event as EventOf<'admin.pause'>
      // A generation still held was cut by this pause (a finished one is let go as it ends).
      log(live, 'session.paused', e.at, { userId: e.userId, reason: e.reason, interruptedTurn: live.generation?.wrote || undefined })
      host.publish(live, 'session.paused', {})
    },
    recordResume: (live, _c, e) => {
      log(live, 'session.resumed', e.at, { userId: (e as EventOf<'admin.resume'>).userId })
      host.publish(live, 'session.resumed', {})
    },
    recordDestroy: (live, _c, e) => {
      const reason = e.type === 'session.destroy' ? e.reason : 'idle_timeout'
      const by = e.type === 'session.destroy' ? e.by : 'system'
      log(live, 'session.destroyed', e.at, { reason, by, userId: e.type === 'session.destroy' ? e.userId : undefined })
      host.publish(live, 'session.closed', { reason })
    },
  }
  const provided = {} as Record<SessionEffectName, (args: { context: SessionContext; event: SessionEvent; self: AnyActorRef }) => void>
  for (const [name, effect] of Object.entries(effects) as [SessionEffectName, Effect][]) {
    provided[name] = ({ context, event, self }) => effect(host.sessionOf(self), context, event)
  }
  return provided
}

/** The history entry of a tool call, asked for by a reply (`turn`) or injected by a supervisor. */
function logToolCall(live: LiveSession, call: PendingTool, at: number, how: { origin: 'turn'; turnId: number } | { origin: 'inject'; userId: string }) {
  log(live, 'tool.call', at, {
    callId: call.callId,
    tool: call.tool,
    args: call.args,
    external: call.external,
    correlationId: call.correlationId,
    deadline: call.deadline,
    ...how,
  })
}

/** What a new session asks for. */
export interface OpeningInput {
  crew: Crew
  terms: SessionTerms
  consumerId: string
  arguments: Record<string, unknown>
  outbound?: OutboundSpec
  at: number
}

/**
 * The opening of a session, computed before anything is written: its history entries (from seq
 * 1), the events it publishes after `Initialized`, and whether a reply is owed at once (an
 * outbound session that speaks first).
 */
export function openingOf(input: OpeningInput): { entries: HistoryEntry[]; publish: PublishedEvent[]; replyOwed: boolean } {
  const { crew, at } = input
  const agentId = input.terms.agents[0]!
  const entries: HistoryEntry[] = [
    strip({ seq: 1, at, type: 'session.created', crewId: crew.id, agentId, consumerId: input.consumerId, arguments: input.arguments, outbound: input.outbound?.type }),
  ]
  const publish: PublishedEvent[] = []
  const outbound = input.outbound
  if (outbound?.type === 'static') {
    const raw = outbound.parameters.text ?? ''
    const text = outbound.parameters.applyModifiers ? applyModifiers(raw, crew.modifiers) : raw
    entries.push({ seq: 2, at, type: 'message.assistant', source: 'outbound', text, agentId, applyModifiers: !!outbound.parameters.applyModifiers })
    publish.push({ name: 'assistant.message', data: { messageId: 'm2', agentId, text, turnId: 0, at } })
  } else if (outbound?.type === 'dynamic') {
    const previous = outbound.parameters.previousWhisperedMessages ?? []
    entries.push({ seq: 2, at, type: 'context.appended', source: 'previousWhisperedMessages', count: previous.length, messages: previous })
  }
  return { entries, publish, replyOwed: outbound?.type === 'dynamic' }
}

function strip(entry: HistoryEntry): HistoryEntry {
  for (const key of Object.keys(entry)) if (entry[key] === undefined) delete entry[key]
  return entry
}
