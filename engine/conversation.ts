// Pure helpers over the conversation: modifiers, guardrails and the running summary
// (ResumenConversacion). No I/O: the machine's actions call these.
import type { ConversationMessage, Modifiers } from './types.js'

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

export function applyGuardrails(
  text: string,
  guardrails: Guardrail[] | undefined,
  side: 'user' | 'assistant',
): { text: string; triggered: string[] } {
  const triggered: string[] = []
  let out = text
  for (const g of guardrails ?? []) {
    if (g.appliesTo !== 'both' && g.appliesTo !== side) continue
    const re = new RegExp(g.pattern, 'gi')
    if (re.test(out)) {
      triggered.push(g.id)
      out = out.replace(new RegExp(g.pattern, 'gi'), g.replacement ?? '[redacted]')
    }
  }
  return { text: out, triggered }
}

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
  const digest = { ...previous, total: previous.total + 1 }
  if (message.author === 'tool') return message.tool && !digest.tools.includes(message.tool) ? { ...digest, tools: [...digest.tools, message.tool] } : digest
  if (message.source === 'whisper') return { ...digest, whispers: [...digest.whispers, clip(message.text, 80)].slice(-SUMMARY_NOTES) }
  const visible = digest.visible + 1
  if (message.author === 'user') {
    const text = clip(message.text)
    return { ...digest, visible, users: digest.users + 1, firstUser: digest.firstUser ?? text, lastUser: text }
  }
  if (message.author === 'assistant' || message.author === 'agent') return { ...digest, visible, assistants: digest.assistants + 1, lastAssistant: clip(message.text) }
  return { ...digest, visible }
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
