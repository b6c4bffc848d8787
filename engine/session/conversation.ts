// The conversation of a session: modifiers, guardrails, the running summary
// (ResumenConversacion), and the Conversation kept beside the session's actor. No I/O.
import type { ConversationMessage, HistoryEntry, Modifiers } from '../types.js'

/** The crew's style applied to literal text (static outbound, impersonation) on request. */
export function applyModifiers(text: string, modifiers: Modifiers | undefined): string {
  if (!modifiers) return text
  let out = text
  for (const { from, to } of modifiers.replacements ?? []) out = out.split(from).join(to)
  return `${modifiers.prefix ?? ''}${out}${modifiers.suffix ?? ''}`
}

export interface Guardrail {
  id: string
  /** Regular expression (JavaScript syntax, applied globally, case-insensitive). */
  pattern: string
  /** redact: the match is replaced before the text enters the context. */
  action: 'redact'
  appliesTo: 'user' | 'assistant' | 'both'
  replacement?: string
}

/** A crew's guardrails, their patterns compiled once. */
export class Guardrails {
  private readonly rules: { guardrail: Guardrail; pattern: RegExp }[]

  constructor(guardrails: Guardrail[] = []) {
    this.rules = guardrails.map(guardrail => ({ guardrail, pattern: new RegExp(guardrail.pattern, 'gi') }))
  }

  apply(text: string, side: 'user' | 'assistant'): { text: string; triggered: string[] } {
    let out = text
    let triggered: string[] | undefined
    for (const { guardrail, pattern } of this.rules) {
      if (guardrail.appliesTo !== 'both' && guardrail.appliesTo !== side) continue
      // A global pattern keeps its position between calls: each use starts from the beginning.
      pattern.lastIndex = 0
      if (!pattern.test(out)) continue
      pattern.lastIndex = 0
      ;(triggered ??= []).push(guardrail.id)
      out = out.replace(pattern, guardrail.replacement ?? '[redacted]')
    }
    return { text: out, triggered: triggered ?? NONE }
  }
}

const NONE: string[] = []


const clip = (text: string, max = 160) => (text.length > max ? `${text.slice(0, max - 1)}…` : text)

/** Supervisor notes kept in the summary (the most recent). */
export const SUMMARY_NOTES = 20

/**
 * What the summary is made of, kept up to date message by message so that neither the summary
 * nor the context needs the whole conversation (the context keeps a recent window; the whole
 * conversation is in the history log). Every text is already clipped.
 */
export interface ConversationDigest {
  /** Every message of the conversation (the context keeps only a recent window of them). */
  total: number
  /** Messages other than tool results and supervisor notes. */
  visible: number
  users: number
  assistants: number
  firstUser: string | null
  lastUser: string | null
  lastAssistant: string | null
  /** Tools used, in order of first use. */
  tools: string[]
  /** The last SUMMARY_NOTES supervisor notes. */
  whispers: string[]
}

export const emptyDigest = (): ConversationDigest => ({ total: 0, visible: 0, users: 0, assistants: 0, firstUser: null, lastUser: null, lastAssistant: null, tools: [], whispers: [] })

/** The digest after `message` (a new object; the input is not changed). */
export function digestAdd(previous: ConversationDigest, message: ConversationMessage): ConversationDigest {
  const digest = { ...previous }
  addToDigest(digest, message)
  return digest
}

/** Counts `message` into `digest` in place; its lists are replaced, never changed (older digests may share them). */
function addToDigest(digest: ConversationDigest, message: ConversationMessage) {
  digest.total++
  if (message.author === 'tool') {
    if (message.tool && !digest.tools.includes(message.tool)) digest.tools = [...digest.tools, message.tool]
    return
  }
  if (message.source === 'whisper') {
    digest.whispers = [...digest.whispers, clip(message.text, 80)].slice(-SUMMARY_NOTES)
    return
  }
  digest.visible++
  if (message.author === 'user') {
    const text = clip(message.text)
    digest.users++
    digest.firstUser ??= text
    digest.lastUser = text
  } else if (message.author === 'assistant' || message.author === 'agent') {
    digest.assistants++
    digest.lastAssistant = clip(message.text)
  }
}

export const digestOf = (messages: ConversationMessage[]) => messages.reduce(digestAdd, emptyDigest())

/** ResumenConversacion from a digest (see summarize). */
export function summarizeDigest(d: ConversationDigest, agentId: string): string {
  if (d.visible === 0) return `No messages yet. Agent in charge: ${agentId}.`
  const parts = [`${d.users} user message(s), ${d.assistants} assistant message(s).`]
  if (d.firstUser !== null) parts.push(`User opened with: "${d.firstUser}".`)
  if (d.users > 1) parts.push(`Last user message: "${d.lastUser}".`)
  if (d.lastAssistant !== null) parts.push(`Last assistant reply: "${d.lastAssistant}".`)
  if (d.tools.length) parts.push(`Tools used: ${d.tools.join(', ')}.`)
  if (d.whispers.length) parts.push(`Supervisor notes: ${d.whispers.map(w => `"${w}"`).join('; ')}.`)
  parts.push(`Agent in charge: ${agentId}.`)
  return parts.join(' ')
}

/**
 * The conversation summary kept in the snapshot as `ResumenConversacion`: extractive and
 * deterministic (what a human agent needs at a glance on a handoff), recomputed by the engine
 * whenever the conversation changes.
 */
export function summarize(messages: ConversationMessage[], agentId: string): string {
  return summarizeDigest(digestOf(messages), agentId)
}

/** The recent window of a conversation the context keeps: at most `count` messages and about `bytes` of text. */
export function recentWindow(messages: ConversationMessage[], count: number, bytes: number): ConversationMessage[] {
  let from = Math.max(0, messages.length - count)
  let size = 0
  for (let i = messages.length - 1; i >= from; i--) {
    size += messages[i]!.text.length + 64
    // The newest message is always kept, however long.
    if (size > bytes && i < messages.length - 1) {
      from = i + 1
      break
    }
  }
  return from === 0 ? messages : messages.slice(from)
}

/** The context keeps at most this many recent messages... */
export const CONTEXT_WINDOW_MESSAGES = 50
/** ...and about this much of their text. */
export const CONTEXT_WINDOW_BYTES = 32 * 1024

/** What a session keeps of its conversation between turns (persisted with its checkpoint). */
export interface ConversationState {
  /** The recent window (CONTEXT_WINDOW_MESSAGES / _BYTES): what the assistant is given. */
  messages: ConversationMessage[]
  digest: ConversationDigest
  arguments: Record<string, unknown>
  /** Id of the conversation's last message when the turn in progress started (null: none). */
  turnAfter: string | null
}

/**
 * The conversation of a live session, kept beside its actor and folded from its history
 * entries: the live session applies each entry as it is written, a restore applies the entries
 * written after its checkpoint, and both end in the same conversation. The whole conversation is
 * the history log; this keeps a bounded window of it, a digest and the session's arguments.
 */
export class Conversation {
  private messages: ConversationMessage[]
  private digest: ConversationDigest
  private bytes: number
  arguments: Record<string, unknown>
  private turnAfter: string | null

  constructor(state: ConversationState) {
    this.messages = state.messages
    // Its own copy: counted into in place.
    this.digest = { ...state.digest }
    this.arguments = state.arguments
    this.turnAfter = state.turnAfter
    this.bytes = state.messages.reduce((sum, m) => sum + sizeOf(m), 0)
  }

  static empty(args: Record<string, unknown>): Conversation {
    return new Conversation({ messages: [], digest: emptyDigest(), arguments: args, turnAfter: null })
  }

  /** The recent window, oldest first (shared: callers must not change it). */
  get window(): readonly ConversationMessage[] {
    return this.messages
  }

  get total(): number {
    return this.digest.total
  }

  summary(agentId: string): string {
    return summarizeDigest(this.digest, agentId)
  }

  state(): ConversationState {
    return { messages: this.messages.slice(), digest: { ...this.digest }, arguments: this.arguments, turnAfter: this.turnAfter }
  }

  /** Takes one history entry (engine/session/session-effects.ts writes them) into the conversation. */
  apply(entry: HistoryEntry) {
    const id = `m${entry.seq}`
    const at = entry.at
    const userId = typeof entry.userId === 'string' ? entry.userId : undefined
    switch (entry.type) {
      case 'message.user':
        return this.add({ id, author: 'user', text: String(entry.text), source: 'user', at })
      case 'message.whisper':
        return this.add({ id, author: 'system', text: String(entry.text), source: 'whisper', at, ...(userId ? { userId } : {}) })
      case 'message.assistant': {
        const agentId = entry.agentId as string | undefined
        const text = String(entry.text ?? '')
        if (entry.source !== 'generated') {
          return this.add({ id, author: 'assistant', text, source: entry.source as 'outbound' | 'impersonated', at, agentId, ...(userId ? { userId } : {}) })
        }
        const message: ConversationMessage = { id: String(entry.messageId), author: 'assistant', text, source: 'generated', at, agentId }
        const calls = entry.toolCalls as ConversationMessage['toolCalls'] | undefined
        if (calls?.length) return this.add({ ...message, toolCalls: calls.map(c => ({ callId: c.callId, tool: c.tool, args: c.args ?? {} })) })
        return this.addReply(message)
      }
      case 'tool.result':
        return this.add({
          id,
          author: 'tool',
          text: JSON.stringify(entry.result ?? null),
          source: 'tool',
          at,
          callId: entry.callId as string,
          tool: entry.tool as string,
          // A supervisor's builtin call carries who ran it (providers tell it from the assistant's own calls).
          ...(entry.origin === 'inject' && entry.via === 'handler' && userId ? { userId } : {}),
        })
      case 'context.appended': {
        const added = contextMessages(entry, userId)
        return added.length ? this.add(...added) : undefined
      }
      case 'context.overridden':
        if (entry.arguments && typeof entry.arguments === 'object') this.arguments = entry.arguments as Record<string, unknown>
        return this.replace(contextMessages(entry, userId))
      case 'turn.started':
        this.turnAfter = this.messages.at(-1)?.id ?? null
        return
      case 'turn.interrupted': {
        // What the user heard of a reply cut short is what the assistant said.
        const text = String(entry.heard ?? entry.delivered ?? '')
        if (!text) return
        return this.addReply({ id: String(entry.messageId), author: 'assistant', text, source: 'generated', at, agentId: entry.agentId as string | undefined })
      }
    }
  }

  private add(...added: ConversationMessage[]) {
    for (const message of added) {
      addToDigest(this.digest, message)
      this.messages.push(message)
      this.bytes += sizeOf(message)
    }
    this.trim()
  }

  /**
   * A turn's reply goes before the user messages taken while it was written (the run of user
   * messages at the end, after the message the turn started from): the reply did not see them,
   * and the next reply, which answers them, then follows them. The history log keeps the order
   * things happened in.
   */
  private addReply(message: ConversationMessage) {
    const messages = this.messages
    // Where the turn started; unknown (that message left the window): the end.
    const start = this.turnAfter === null ? 0 : messages.findIndex(m => m.id === this.turnAfter) + 1 || messages.length
    let at = messages.length
    while (at > start && messages[at - 1]!.author === 'user') at--
    addToDigest(this.digest, message)
    messages.splice(at, 0, message)
    this.bytes += sizeOf(message)
    this.trim()
  }

  private replace(messages: ConversationMessage[]) {
    this.messages = []
    this.bytes = 0
    this.digest = emptyDigest()
    this.add(...messages)
  }

  /** At most CONTEXT_WINDOW_MESSAGES and about CONTEXT_WINDOW_BYTES; the newest message is always kept. */
  private trim() {
    let drop = Math.max(0, this.messages.length - CONTEXT_WINDOW_MESSAGES)
    let bytes = this.bytes
    for (let i = 0; i < drop; i++) bytes -= sizeOf(this.messages[i]!)
    while (bytes > CONTEXT_WINDOW_BYTES && drop < this.messages.length - 1) bytes -= sizeOf(this.messages[drop++]!)
    if (drop === 0) return
    this.messages = this.messages.slice(drop)
    this.bytes = bytes
  }
}

const sizeOf = (message: ConversationMessage) => message.text.length + 64

function contextMessages(entry: HistoryEntry, userId: string | undefined): ConversationMessage[] {
  const input = Array.isArray(entry.messages) ? (entry.messages as { author: string; text: string }[]) : []
  return input.map((m, i) => ({
    id: `m${entry.seq}.${i}`,
    author: m.author as ConversationMessage['author'],
    text: m.text,
    source: 'context' as const,
    at: entry.at,
    ...(userId ? { userId } : {}),
  }))
}
