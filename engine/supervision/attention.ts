// Attention flags: why a live session needs a human now. Raised from the session's own
// history as it is written (RecordWriter follows every entry), kept on its report record so the
// listing and the lifecycle feed carry them from any gateway, and acknowledged by a supervisor.
//
//   guardrail            a guardrail redacted a message (detail: the guardrail's id)
//   assistant_error      the assistant could not produce a reply
//   tool_result_awaited  an external tool call waits for its result (cleared when it arrives)
//   human_requested      the user asked for a person (the crew's attention.humanRequestPhrases)
//   no_reply             a user message has had no assistant reply for attention.noReplySeconds
//
// no_reply is computed when read (from the times of the last user and assistant messages), so
// nothing has to wake up per session to raise it. A flag raised again after it was acknowledged
// counts as new (its `since` is later than the acknowledgement).
import type { HistoryEntry } from '../types.js'

export const ATTENTION_REASONS = ['guardrail', 'assistant_error', 'tool_result_awaited', 'human_requested', 'no_reply'] as const
export type AttentionReason = (typeof ATTENTION_REASONS)[number]

/** A crew's attention settings, as configured (engine/crews.ts). */
export interface AttentionSettings {
  humanRequestPhrases?: string[]
  noReplySeconds?: number
}

export const DEFAULT_HUMAN_REQUEST_PHRASES = ['human', 'real person', 'an agent', 'representative', 'operator', 'supervisor', 'persona', 'humano', 'agente', 'operador']
export const DEFAULT_NO_REPLY_SECONDS = 30

/** What the record keeps per raised flag. */
export interface StoredFlag {
  /** Absent for no_reply (computed when read): only its acknowledgement is stored. */
  since?: number
  detail?: string
  ack_by?: string
  ack_at?: number
}

/** A flag as the listing and the feed show it. */
export interface AttentionFlag {
  reason: AttentionReason
  /** Unix ms of the (latest) occurrence. */
  since: number
  detail?: string
  acknowledged: boolean
  acknowledgedBy?: string
  acknowledgedAt?: number
}

export type AttentionChange = { raise: AttentionReason; detail?: string; at: number } | { clear: AttentionReason }

/** Decides, one history entry at a time, what a session's flags become. */
export class AttentionRules {
  private readonly phrases: RegExp | null
  readonly noReplyMs: number

  constructor(settings: AttentionSettings = {}) {
    const phrases = (settings.humanRequestPhrases ?? DEFAULT_HUMAN_REQUEST_PHRASES).map(p => p.trim()).filter(Boolean)
    // Whole words in any case: "human" is a request, "humanity" is not.
    this.phrases = phrases.length ? new RegExp(`(?<![\\p{L}\\p{N}])(?:${phrases.map(escape).join('|')})(?![\\p{L}\\p{N}])`, 'iu') : null
    this.noReplyMs = (settings.noReplySeconds ?? DEFAULT_NO_REPLY_SECONDS) * 1000
  }

  changeOf(entry: HistoryEntry): AttentionChange | null {
    switch (entry.type) {
      case 'guardrail.triggered':
        return { raise: 'guardrail', detail: String(entry.guardrail), at: entry.at }
      case 'assistant.error':
        return { raise: 'assistant_error', at: entry.at }
      case 'tool.call':
        return entry.external ? { raise: 'tool_result_awaited', detail: String(entry.tool), at: entry.at } : null
      case 'tool.result':
        return entry.correlationId ? { clear: 'tool_result_awaited' } : null
      case 'message.user':
        return this.phrases && typeof entry.text === 'string' && this.phrases.test(entry.text) ? { raise: 'human_requested', at: entry.at } : null
      default:
        return null
    }
  }
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/\s+/g, '\\s+')

/**
 * The flags of a session now: the stored ones, plus no_reply when the last user message is older
 * than `noReplyMs` and has no assistant message after it. Closed sessions have none.
 */
export function flagsOf(
  stored: Partial<Record<AttentionReason, StoredFlag>> | undefined,
  times: { live: boolean; lastUserAt?: number; lastAssistantAt?: number; paused: boolean },
  noReplyMs: number,
  now: number,
): AttentionFlag[] {
  if (!times.live) return []
  const flags: AttentionFlag[] = []
  for (const reason of ATTENTION_REASONS) {
    const flag = stored?.[reason]
    if (reason === 'no_reply') {
      const waiting = awaitingReplySince(times)
      // A paused session is in a supervisor's hands already: its silence is on purpose.
      if (waiting === null || times.paused || now - waiting < noReplyMs) continue
      const since = waiting + noReplyMs
      const acknowledged = flag?.ack_at !== undefined && flag.ack_at >= since
      flags.push({ reason, since, acknowledged, ...(acknowledged ? { acknowledgedBy: flag!.ack_by, acknowledgedAt: flag!.ack_at } : {}) })
      continue
    }
    if (flag?.since === undefined) continue
    const acknowledged = flag.ack_at !== undefined && flag.ack_at >= flag.since
    flags.push({
      reason,
      since: flag.since,
      ...(flag.detail !== undefined ? { detail: flag.detail } : {}),
      acknowledged,
      ...(acknowledged ? { acknowledgedBy: flag.ack_by, acknowledgedAt: flag.ack_at } : {}),
    })
  }
  return flags
}

/** Unix ms of the user message still without a reply, or null. */
export function awaitingReplySince(times: { lastUserAt?: number; lastAssistantAt?: number }): number | null {
  if (times.lastUserAt === undefined) return null
  return times.lastAssistantAt !== undefined && times.lastAssistantAt >= times.lastUserAt ? null : times.lastUserAt
}
