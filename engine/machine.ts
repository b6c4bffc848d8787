// The assistant session as a pure XState v5 machine. Every effect leaves it as an emitted event
// (`log` for the history, `publish` for consumer streams) or as an invoked actor (`generate`,
// `runTools`) whose implementation the host provides. Guards only read context and event;
// time arrives inside events (`at`), never from a clock. One exception, for cost: a reply's
// chunks (`assistant.response`) are published by the generation as they stream, under the
// message id and chunk index it is given; the machine only learns that the turn began writing
// (`gen.writing`, once) and then the whole reply (`gen.completed`): a transition per chunk was
// four of the six transitions of a four-word reply.
//
//   active.idle ──user.message / attend──▶ active.generating ──gen.completed(tools)──▶ active.tooling
//        ▲                                     │  ▲                                        │
//        └────────── gen.completed / failed ───┘  └──────── all turn tools answered ───────┘
//   active.* ──pause──▶ paused ──resume──▶ active.tooling | active.generating | active.idle
//   active.*, paused ──transfer──▶ (same state, new agent)
//   active.*, paused ──destroy / idle expiry──▶ destroyed (final)
import { enqueueActions, fromCallback, setup, type SnapshotFrom } from 'xstate'
import {
  applyGuardrails,
  applyModifiers,
  digestAdd,
  digestOf,
  emptyDigest,
  recentWindow,
  summarizeDigest,
  type ConversationDigest,
  type Guardrail,
} from './conversation.js'
import type {
  ConversationMessage,
  HistoryEntry,
  Modifiers,
  OutboundSpec,
  PendingTool,
  PublishedEvent,
} from './types.js'

export interface SessionInput {
  sessionId: string
  accountId: string
  crewId: string
  agentId: string
  agents: string[]
  modifiers: Modifiers
  guardrails?: Guardrail[]
  arguments: Record<string, unknown>
  outbound?: OutboundSpec
  at: number
  idleTimeoutMs: number
  maxToolRounds?: number
  consumerId: string
}

export interface SessionContext {
  sessionId: string
  accountId: string
  crewId: string
  agentId: string
  agents: string[]
  modifiers: Modifiers
  guardrails: Guardrail[]
  arguments: Record<string, unknown>
  /**
   * The recent window of the conversation (CONTEXT_WINDOW_MESSAGES / _BYTES): what the assistant
   * is given. The whole conversation is in the history log, so a session's memory does not grow
   * with the length of its conversation.
   */
  messages: ConversationMessage[]
  /** Counts and extracts of the whole conversation, for the summary (absent in snapshots of older versions). */
  digest?: ConversationDigest
  /** ResumenConversacion. */
  summary: string
  /** Log position: seq of the last history entry. */
  seq: number
  /** An assistant reply is owed (a user message or attend not yet covered by a generation). */
  replyOwed: boolean
  turnId: number
  toolRounds: number
  maxToolRounds: number
  pendingTools: PendingTool[]
  /** Recently resolved correlation ids (bounded), so a late duplicate is told apart from an unknown id. */
  resolved: string[]
  /** The reply being written (its chunks streamed since gen.writing); null between replies. */
  draft: { messageId: string } | null
  /** Id of the conversation's last message when the turn started (null: none; absent in older snapshots). */
  turnAfter?: string | null
  transfers: number
  createdAt: number
  updatedAt: number
  idleTimeoutMs: number
  /** Absolute deadline (ms) after which the session expires as abandoned. */
  idleDeadline: number
  closeReason: string | null
  closedBy: 'channel' | 'admin' | 'system' | null
}

type At = { at: number }
export type ContextMessageInput = { author: string; text: string }

export type SessionEvent =
  | ({ type: 'user.message'; text: string; consumerId: string } & At)
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
  | ({ type: 'session.destroy'; reason: string; by: 'channel' | 'admin' | 'system'; userId?: string } & At)
  | ({ type: 'session.expire' } & At)
  | ({ type: 'session.restored'; logPosition: number } & At)
  | ({ type: 'gen.writing' } & At)
  | ({ type: 'gen.completed'; text: string; toolCalls: PendingTool[] } & At)
  | ({ type: 'gen.failed'; error: string } & At)
  | ({ type: 'tool.result'; callId: string; result: unknown; ok: boolean } & At)

export type SessionEmitted = { type: 'log'; entry: HistoryEntry } | { type: 'publish'; event: PublishedEvent }

/** What the `generate` actor receives: the conversation as of the start of the turn. */
export interface GenerationInput {
  sessionId: string
  accountId: string
  crewId: string
  agentId: string
  turnId: number
  /** The id of the reply this generation writes: its chunks and its message carry it. */
  messageId: string
  arguments: Record<string, unknown>
  messages: ConversationMessage[]
  /** False once the turn used its tool rounds: the reply must be text. */
  toolsAllowed: boolean
}

export interface ToolRunInput {
  sessionId: string
  crewId: string
  calls: PendingTool[]
}

/** The context keeps at most this many recent messages... */
export const CONTEXT_WINDOW_MESSAGES = 50
/** ...and about this much of their text. */
export const CONTEXT_WINDOW_BYTES = 32 * 1024

/** Collects one action's changes: context patch, history entries, published events. */
class Recorder {
  seq: number
  readonly patch: Partial<SessionContext> = {}
  readonly emitted: SessionEmitted[] = []
  constructor(private readonly base: SessionContext, readonly at: number) {
    this.seq = base.seq
  }
  get ctx(): SessionContext {
    return { ...this.base, ...this.patch }
  }
  /** One field of the context as patched so far (without copying the context). */
  current<K extends keyof SessionContext>(key: K): SessionContext[K] {
    return key in this.patch ? (this.patch[key] as SessionContext[K]) : this.base[key]
  }
  set(patch: Partial<SessionContext>) {
    Object.assign(this.patch, patch)
  }
  log(type: string, fields: Record<string, unknown> = {}): number {
    const seq = ++this.seq
    this.emitted.push({ type: 'log', entry: { seq, at: this.at, type, ...stripUndefined(fields) } })
    return seq
  }
  publish(name: string, data: Record<string, unknown> = {}) {
    this.emitted.push({ type: 'publish', event: { name, data: { sessionId: this.base.sessionId, ...data } } })
  }
  /** Replaces the conversation (override, opening context) and refreshes the summary. */
  setMessages(messages: ConversationMessage[]) {
    const digest = digestOf(messages)
    this.set({ messages: window(messages), digest, summary: summarizeDigest(digest, this.current('agentId')) })
  }
  /** Adds messages to the conversation (at the end, or before index `at`) and refreshes the summary. */
  addMessages(added: ConversationMessage[], at?: number) {
    const messages = this.current('messages')
    const digest = added.reduce(digestAdd, digestFor(this.current('digest'), messages))
    const next = at === undefined ? [...messages, ...added] : [...messages.slice(0, at), ...added, ...messages.slice(at)]
    this.set({ messages: window(next), digest, summary: summarizeDigest(digest, this.current('agentId')) })
  }
  addMessage(message: ConversationMessage) {
    this.addMessages([message])
  }
  /**
   * Adds a turn's reply before the user messages taken while it was written (the run of user
   * messages at the end, after `turnAfter`): the reply did not see them, and the next reply,
   * which answers them, then follows them. The history log keeps the order things happened in.
   */
  addReply(message: ConversationMessage, turnAfter: string | null | undefined) {
    const messages = this.current('messages')
    // Where the turn started; unknown (an older snapshot, or that message left the window): the end.
    const start = turnAfter === null ? 0 : messages.findIndex(m => m.id === turnAfter) + 1 || messages.length
    let at = messages.length
    while (at > start && messages[at - 1]!.author === 'user') at--
    this.addMessages([message], at)
  }
  touch() {
    this.set({ idleDeadline: this.at + this.base.idleTimeoutMs })
  }
}

const window = (messages: ConversationMessage[]) => recentWindow(messages, CONTEXT_WINDOW_MESSAGES, CONTEXT_WINDOW_BYTES)

/** The digest of a context; one restored from an older snapshot has none yet (its messages were whole then). */
export const digestFor = (digest: ConversationDigest | undefined, messages: ConversationMessage[]) => digest ?? digestOf(messages)

function stripUndefined(fields: Record<string, unknown>) {
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) out[k] = v
  return out
}

const eventAt = (context: SessionContext, event: { at?: number }) => event.at ?? context.updatedAt

/** Makes one named action out of a pure step over a Recorder. */
function step<E extends SessionEvent = SessionEvent>(fn: (r: Recorder, event: E, context: SessionContext) => void) {
  return enqueueActions(({ context, event, enqueue }: { context: SessionContext; event: SessionEvent; enqueue: any }) => {
    const r = new Recorder(context, eventAt(context, event as { at?: number }))
    fn(r, event as E, context)
    enqueue.assign({ ...r.patch, seq: r.seq, updatedAt: r.at })
    for (const emitted of r.emitted) enqueue.emit(emitted)
  }) as any
}

/** The history entry of a tool call, asked for by a reply (`turn`) or injected by a supervisor. */
function logToolCall(r: Recorder, call: PendingTool, how: { origin: 'turn'; turnId: number } | { origin: 'inject'; userId: string }) {
  r.log('tool.call', {
    callId: call.callId,
    tool: call.tool,
    args: call.args,
    external: call.external,
    correlationId: call.correlationId,
    deadline: call.deadline,
    ...how,
  })
}

function contextMessages(r: Recorder, input: ContextMessageInput[], userId: string | undefined): ConversationMessage[] {
  return input.map((m, i) => ({
    id: `m${r.seq}.${i}`,
    author: m.author as ConversationMessage['author'],
    text: m.text,
    source: 'context' as const,
    at: r.at,
    ...(userId ? { userId } : {}),
  }))
}

const turnToolsPending = (context: SessionContext) => context.pendingTools.some(p => p.origin === 'turn')
/** The id of the reply a turn's round writes (its chunks and its message carry it). */
const replyId = (context: SessionContext) => `t${context.turnId}.${context.toolRounds}`

export function initialContext(input: SessionInput): SessionContext {
  const base: SessionContext = {
    sessionId: input.sessionId,
    accountId: input.accountId,
    crewId: input.crewId,
    agentId: input.agentId,
    agents: input.agents,
    modifiers: input.modifiers,
    guardrails: input.guardrails ?? [],
    arguments: input.arguments,
    messages: [],
    digest: emptyDigest(),
    summary: summarizeDigest(emptyDigest(), input.agentId),
    seq: 0,
    replyOwed: false,
    turnId: 0,
    toolRounds: 0,
    maxToolRounds: input.maxToolRounds ?? 4,
    pendingTools: [],
    resolved: [],
    draft: null,
    turnAfter: null,
    transfers: 0,
    createdAt: input.at,
    updatedAt: input.at,
    idleTimeoutMs: input.idleTimeoutMs,
    idleDeadline: input.at + input.idleTimeoutMs,
    closeReason: null,
    closedBy: null,
  }
  // The opening entries are part of the initial context (a machine cannot emit before it starts);
  // the host writes them to the log when it creates the session.
  return base
}

/** History entries and messages of session creation, computed purely from the input. */
export function openingOf(input: SessionInput): { context: SessionContext; log: HistoryEntry[]; publish: PublishedEvent[] } {
  const r = new Recorder(initialContext(input), input.at)
  r.log('session.created', {
    crewId: input.crewId,
    agentId: input.agentId,
    consumerId: input.consumerId,
    arguments: input.arguments,
    outbound: input.outbound?.type,
  })
  const outbound = input.outbound
  if (outbound?.type === 'static') {
    const raw = outbound.parameters.text ?? ''
    const text = outbound.parameters.applyModifiers ? applyModifiers(raw, input.modifiers) : raw
    const seq = r.log('message.assistant', { source: 'outbound', text, agentId: input.agentId, applyModifiers: !!outbound.parameters.applyModifiers })
    const messageId = `m${seq}`
    r.addMessage({ id: messageId, author: 'assistant', text, source: 'outbound', at: input.at, agentId: input.agentId })
    r.publish('assistant.message', { messageId, agentId: input.agentId, text, turnId: 0, at: input.at })
  } else if (outbound?.type === 'dynamic') {
    const previous = outbound.parameters.previousWhisperedMessages ?? []
    const seq = r.log('context.appended', { source: 'previousWhisperedMessages', count: previous.length, messages: previous })
    r.setMessages(previous.map((m, i) => ({ id: `m${seq}.${i}`, author: m.author as any, text: m.text, source: 'context' as const, at: input.at })))
    r.set({ replyOwed: true })
  }
  return { context: { ...r.ctx, seq: r.seq }, log: r.emitted.filter(e => e.type === 'log').map(e => (e as any).entry), publish: r.emitted.filter(e => e.type === 'publish').map(e => (e as any).event) }
}

export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    input: {} as { context: SessionContext },
    events: {} as SessionEvent,
    emitted: {} as SessionEmitted,
  },
  actors: {
    // Implementations come from the host (machine.provide); these defaults do nothing so the
    // pure machine can be exercised alone.
    generate: fromCallback<SessionEvent, GenerationInput>(() => () => {}),
    runTools: fromCallback<SessionEvent, ToolRunInput>(() => () => {}),
  },
  guards: {
    replyOwed: ({ context }) => context.replyOwed,
    turnToolsPending: ({ context }) => turnToolsPending(context),
    turnToolsDone: ({ context }) => !turnToolsPending(context),
    asksForTools: ({ event }) => event.type === 'gen.completed' && event.toolCalls.length > 0,
    knownAgent: ({ context, event }) =>
      event.type === 'admin.transfer' && context.agents.includes(event.target) && event.target !== context.agentId,
    correlationPending: ({ context, event }) =>
      (event.type === 'external.resolve' || event.type === 'tool.expire') &&
      context.pendingTools.some(p => p.correlationId === event.correlationId),
    toolDeadlinePassed: ({ context, event }) =>
      event.type === 'tool.expire' &&
      context.pendingTools.some(p => p.correlationId === event.correlationId && p.deadline !== undefined && p.deadline <= event.at),
    idleDeadlinePassed: ({ context, event }) => event.type === 'session.expire' && event.at >= context.idleDeadline,
    restoredBehind: ({ context, event }) => event.type === 'session.restored' && event.logPosition >= context.seq,
  },
  actions: {
    announceWaiting: step((r, _e, context) => {
      r.publish('crew.status.waiting', { agentId: context.agentId })
    }),
    startTurn: step((r, _e, context) => {
      // A round after tool results continues the same turn; anything else starts a new one.
      const continuing = context.toolRounds > 0
      const turnId = continuing ? context.turnId : context.turnId + 1
      r.set({ turnId, replyOwed: false, draft: null, ...(continuing ? {} : { turnAfter: context.messages.at(-1)?.id ?? null }) })
      r.log(continuing ? 'turn.continued' : 'turn.started', { turnId, agentId: context.agentId, round: context.toolRounds })
      r.publish('crew.status.writing', { agentId: context.agentId, turnId })
    }),
    continueTurn: step((r, _e, context) => {
      // Same turn, next round after tools: no new writing status, the draft restarts.
      r.set({ draft: null, toolRounds: context.toolRounds + 1 })
    }),
    resetToolRounds: step(r => r.set({ toolRounds: 0 })),
    markReplyOwed: step(r => r.set({ replyOwed: true })),
    markWriting: step((r, _e, context) => r.set({ draft: { messageId: replyId(context) } })),
    recordUserMessage: step<Extract<SessionEvent, { type: 'user.message' }>>((r, e, context) => {
      const { text, triggered } = applyGuardrails(e.text, context.guardrails, 'user')
      const seq = r.log('message.user', { consumerId: e.consumerId, text })
      for (const guardrail of triggered) r.log('guardrail.triggered', { guardrail, action: 'redact', messageSeq: seq, side: 'user' })
      r.addMessage({ id: `m${seq}`, author: 'user', text, source: 'user', at: r.at })
      r.set({ replyOwed: true })
      r.touch()
    }),
    recordAttend: step<Extract<SessionEvent, { type: 'admin.attend' }>>((r, e) => {
      r.log('admin.attend', { userId: e.userId })
      r.set({ replyOwed: true })
      r.touch()
    }),
    recordReply: step<Extract<SessionEvent, { type: 'gen.completed' }>>((r, e, context) => {
      const { text, triggered } = applyGuardrails(e.text, context.guardrails, 'assistant')
      const messageId = replyId(context)
      const seq = r.log('message.assistant', { source: 'generated', messageId, turnId: context.turnId, agentId: context.agentId, text })
      for (const guardrail of triggered) r.log('guardrail.triggered', { guardrail, action: 'redact', messageSeq: seq, side: 'assistant' })
      r.addReply({ id: messageId, author: 'assistant', text, source: 'generated', at: r.at, agentId: context.agentId }, context.turnAfter)
      r.set({ draft: null, toolRounds: 0 })
      r.publish('assistant.message', { messageId, turnId: context.turnId, agentId: context.agentId, text, at: r.at })
      r.touch()
    }),
    recordToolRequest: step<Extract<SessionEvent, { type: 'gen.completed' }>>((r, e, context) => {
      const messageId = replyId(context)
      r.log('message.assistant', {
        source: 'generated',
        messageId,
        turnId: context.turnId,
        agentId: context.agentId,
        text: e.text,
        toolCalls: e.toolCalls.map(c => ({ callId: c.callId, tool: c.tool })),
      })
      for (const call of e.toolCalls) logToolCall(r, call, { origin: 'turn', turnId: context.turnId })
      r.addMessage({
        id: messageId,
        author: 'assistant',
        text: e.text,
        source: 'generated',
        at: r.at,
        agentId: context.agentId,
        toolCalls: e.toolCalls.map(c => ({ callId: c.callId, tool: c.tool, args: c.args })),
      })
      r.set({ draft: null, pendingTools: [...context.pendingTools, ...e.toolCalls.map(c => ({ ...c, origin: 'turn' as const }))] })
    }),
    recordFailure: step<Extract<SessionEvent, { type: 'gen.failed' }>>((r, e, context) => {
      r.log('assistant.error', { turnId: context.turnId, error: e.error })
      r.set({ draft: null, toolRounds: 0 })
      r.publish('assistant.error', { turnId: context.turnId, code: 'ASSISTANT_UNAVAILABLE', message: 'The assistant could not produce a reply' })
    }),
    recordToolResult: step<Extract<SessionEvent, { type: 'tool.result' | 'external.resolve' | 'tool.expire' }>>((r, e, context) => {
      const match =
        e.type === 'tool.result'
          ? context.pendingTools.find(p => p.callId === e.callId)
          : context.pendingTools.find(p => p.correlationId === e.correlationId)
      if (!match) return
      const result = e.type === 'tool.expire' ? { error: 'timeout', message: `No result for ${match.tool} before its deadline` } : e.result
      const ok = e.type === 'tool.result' ? e.ok : e.type === 'external.resolve'
      const seq = r.log('tool.result', {
        callId: match.callId,
        tool: match.tool,
        correlationId: match.correlationId,
        ok,
        result,
        origin: match.origin,
        userId: e.type === 'external.resolve' ? e.userId : undefined,
        via: e.type === 'external.resolve' ? 'resolver' : e.type === 'tool.expire' ? 'timeout' : 'handler',
      })
      r.addMessage({ id: `m${seq}`, author: 'tool', text: JSON.stringify(result ?? null), source: 'tool', at: r.at, callId: match.callId, tool: match.tool })
      r.set({
        pendingTools: context.pendingTools.filter(p => p !== match),
        resolved: match.correlationId ? [...context.resolved, match.correlationId].slice(-100) : context.resolved,
      })
      if (match.origin === 'inject') r.touch()
    }),
    recordAppend: step<Extract<SessionEvent, { type: 'admin.append' }>>((r, e, context) => {
      r.log('context.appended', { userId: e.userId, count: e.messages.length, messages: e.messages })
      r.addMessages(contextMessages(r, e.messages, e.userId))
      r.touch()
    }),
    recordOverride: step<Extract<SessionEvent, { type: 'admin.override' }>>((r, e, context) => {
      r.log('context.overridden', {
        userId: e.userId,
        previousCount: digestFor(context.digest, context.messages).total,
        count: e.messages.length,
        messages: e.messages,
        arguments: e.arguments,
      })
      if (e.arguments) r.set({ arguments: e.arguments })
      r.setMessages(contextMessages(r, e.messages, e.userId))
      r.touch()
    }),
    recordWhisper: step<Extract<SessionEvent, { type: 'admin.whisper' }>>((r, e) => {
      // Hidden: recorded and given to the assistant as a system message, never published.
      const seq = r.log('message.whisper', { userId: e.userId, role: 'system', text: e.text })
      r.addMessage({ id: `m${seq}`, author: 'system', text: e.text, source: 'whisper', at: r.at, userId: e.userId })
      r.touch()
    }),
    recordImpersonation: step<Extract<SessionEvent, { type: 'admin.impersonate' }>>((r, e, context) => {
      const text = e.applyModifiers ? applyModifiers(e.text, context.modifiers) : e.text
      const seq = r.log('message.assistant', { source: 'impersonated', userId: e.userId, agentId: context.agentId, text, applyModifiers: e.applyModifiers })
      const messageId = `m${seq}`
      r.addMessage({ id: messageId, author: 'assistant', text, source: 'impersonated', at: r.at, agentId: context.agentId, userId: e.userId })
      // Shown exactly like a generated message: the end user cannot tell them apart.
      r.publish('assistant.message', { messageId, turnId: context.turnId, agentId: context.agentId, text, at: r.at })
      r.touch()
    }),
    recordToolInjection: step<Extract<SessionEvent, { type: 'admin.toolinject' }>>((r, e, context) => {
      const call = e.call
      logToolCall(r, call, { origin: 'inject', userId: e.userId })
      if (call.external) {
        r.set({ pendingTools: [...context.pendingTools, { ...call, origin: 'inject', userId: e.userId }] })
      } else {
        const seq = r.log('tool.result', { callId: call.callId, tool: call.tool, ok: e.ok ?? true, result: e.result, origin: 'inject', userId: e.userId, via: 'handler' })
        r.addMessage({ id: `m${seq}`, author: 'tool', text: JSON.stringify(e.result ?? null), source: 'tool', at: r.at, callId: call.callId, tool: call.tool, userId: e.userId })
      }
      r.touch()
    }),
    recordTransfer: step<Extract<SessionEvent, { type: 'admin.transfer' }>>((r, e, context) => {
      r.log('agent.transferred', { userId: e.userId, from: context.agentId, to: e.target, reason: e.reason })
      r.set({ agentId: e.target, transfers: context.transfers + 1 })
      r.set({ summary: summarizeDigest(digestFor(context.digest, context.messages), e.target) })
      r.publish('session.transferred', { from: context.agentId, agentId: e.target })
      r.touch()
    }),
    recordPause: step<Extract<SessionEvent, { type: 'admin.pause' }>>((r, e, context) => {
      r.log('session.paused', { userId: e.userId, reason: e.reason, interruptedTurn: context.draft !== null || undefined })
      r.set({ draft: null })
      r.publish('session.paused', {})
      r.touch()
    }),
    interruptTurn: step(r => r.set({ replyOwed: true })),
    recordResume: step<Extract<SessionEvent, { type: 'admin.resume' }>>((r, e) => {
      r.log('session.resumed', { userId: e.userId })
      r.publish('session.resumed', {})
      r.touch()
    }),
    recordDestroy: step<Extract<SessionEvent, { type: 'session.destroy' | 'session.expire' }>>((r, e) => {
      const reason = e.type === 'session.expire' ? 'idle_timeout' : e.reason
      const by = e.type === 'session.expire' ? 'system' : e.by
      r.log('session.destroyed', { reason, by, userId: e.type === 'session.destroy' ? e.userId : undefined })
      r.set({ closeReason: reason, closedBy: by, pendingTools: [], draft: null })
      r.publish('session.closed', { reason })
    }),
    recordRestore: step<Extract<SessionEvent, { type: 'session.restored' }>>((r, e) => {
      // Entries written after the last snapshot keep their numbers; continue after them.
      r.seq = Math.max(r.seq, e.logPosition)
      r.log('session.restored', { logPosition: e.logPosition })
    }),
  },
}).createMachine({
  id: 'session',
  context: ({ input }) => input.context,
  initial: 'active',
  on: {
    'admin.append': { actions: 'recordAppend' },
    'admin.override': { actions: 'recordOverride' },
    'admin.whisper': { actions: 'recordWhisper' },
    'admin.impersonate': { actions: 'recordImpersonation' },
    'admin.toolinject': { actions: 'recordToolInjection' },
    'external.resolve': { guard: 'correlationPending', actions: 'recordToolResult' },
    'tool.expire': { guard: 'toolDeadlinePassed', actions: 'recordToolResult' },
    'session.destroy': { target: '.destroyed', actions: 'recordDestroy' },
    'session.expire': { guard: 'idleDeadlinePassed', target: '.destroyed', actions: 'recordDestroy' },
    'session.restored': { actions: 'recordRestore' },
  },
  states: {
    active: {
      initial: 'opening',
      on: {
        'admin.pause': { target: 'paused', actions: 'recordPause' },
        'admin.transfer': { guard: 'knownAgent', actions: 'recordTransfer' },
      },
      states: {
        opening: {
          always: [{ guard: 'replyOwed', target: 'generating' }, { target: 'idle' }],
        },
        idle: {
          entry: 'announceWaiting',
          on: {
            'user.message': { target: 'generating', actions: 'recordUserMessage' },
            'admin.attend': { target: 'generating', actions: 'recordAttend' },
          },
        },
        generating: {
          entry: 'startTurn',
          invoke: {
            id: 'generator',
            src: 'generate',
            input: ({ context }): GenerationInput => ({
              sessionId: context.sessionId,
              accountId: context.accountId,
              crewId: context.crewId,
              agentId: context.agentId,
              turnId: context.turnId,
              messageId: replyId(context),
              arguments: context.arguments,
              messages: context.messages,
              toolsAllowed: context.toolRounds < context.maxToolRounds,
            }),
          },
          on: {
            'gen.writing': { actions: 'markWriting' },
            'gen.completed': [
              { guard: 'asksForTools', target: 'tooling', actions: 'recordToolRequest' },
              { guard: 'replyOwed', target: 'generating', reenter: true, actions: 'recordReply' },
              { target: 'idle', actions: 'recordReply' },
            ],
            'gen.failed': [
              { guard: 'replyOwed', target: 'generating', reenter: true, actions: 'recordFailure' },
              { target: 'idle', actions: 'recordFailure' },
            ],
            // Kept and answered by another reply right after this one.
            'user.message': { actions: 'recordUserMessage' },
            'admin.pause': { target: '#session.paused', actions: ['interruptTurn', 'resetToolRounds', 'recordPause'] },
          },
        },
        tooling: {
          invoke: {
            id: 'tools',
            src: 'runTools',
            input: ({ context }): ToolRunInput => ({
              sessionId: context.sessionId,
              crewId: context.crewId,
              calls: context.pendingTools.filter(p => p.origin === 'turn' && !p.external),
            }),
          },
          always: { guard: 'turnToolsDone', target: 'generating', actions: 'continueTurn' },
          on: {
            'tool.result': { actions: 'recordToolResult' },
            'user.message': { actions: 'recordUserMessage' },
            'admin.pause': { target: '#session.paused', actions: ['interruptTurn', 'recordPause'] },
          },
        },
      },
    },
    paused: {
      on: {
        'admin.resume': [
          { guard: 'turnToolsPending', target: 'active.tooling', actions: 'recordResume' },
          { guard: 'replyOwed', target: 'active.generating', actions: 'recordResume' },
          { target: 'active.idle', actions: 'recordResume' },
        ],
        // Kept; answered after resume.
        'user.message': { actions: ['recordUserMessage', 'markReplyOwed'] },
        'admin.transfer': { guard: 'knownAgent', actions: 'recordTransfer' },
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
 * Read off the value: `matches()` builds both state values on every call, and the host asks after
 * every transition.
 */
export function activeState(snapshot: SessionSnapshot): string | undefined {
  const value = snapshot.value
  return typeof value === 'object' ? (value as { active?: string }).active : undefined
}

export class IllegalMoveError extends Error {
  override name = 'IllegalMoveError'
  constructor(readonly event: string, readonly state: string) {
    super(`${event} is not allowed while the session is ${state}`)
  }
}

/** The only way events reach a session actor: an event the machine would ignore is refused. */
export function assertCan(snapshot: SessionSnapshot, event: SessionEvent) {
  if (snapshot.status !== 'active') throw new IllegalMoveError(event.type, 'destroyed')
  if (!snapshot.can(event)) throw new IllegalMoveError(event.type, stateName(snapshot))
}
