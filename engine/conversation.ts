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

/**
 * The conversation summary kept in the snapshot as `ResumenConversacion`: extractive and
 * deterministic (what a human agent needs at a glance on a handoff), recomputed by the engine
 * whenever the conversation changes.
 */
export function summarize(messages: ConversationMessage[], agentId: string): string {
  const visible = messages.filter(m => m.source !== 'whisper' && m.author !== 'tool')
  if (visible.length === 0) return `No messages yet. Agent in charge: ${agentId}.`
  const users = visible.filter(m => m.author === 'user')
  const assistants = visible.filter(m => m.author === 'assistant' || m.author === 'agent')
  const tools = messages.filter(m => m.author === 'tool').map(m => m.tool)
  const parts = [`${users.length} user message(s), ${assistants.length} assistant message(s).`]
  if (users[0]) parts.push(`User opened with: "${clip(users[0].text)}".`)
  if (users.length > 1) parts.push(`Last user message: "${clip(users.at(-1)!.text)}".`)
  if (assistants.length) parts.push(`Last assistant reply: "${clip(assistants.at(-1)!.text)}".`)
  if (tools.length) parts.push(`Tools used: ${[...new Set(tools)].join(', ')}.`)
  const whispers = messages.filter(m => m.source === 'whisper')
  if (whispers.length) parts.push(`Supervisor notes: ${whispers.map(w => `"${clip(w.text, 80)}"`).join('; ')}.`)
  parts.push(`Agent in charge: ${agentId}.`)
  return parts.join(' ')
}
