// The shape of a session record (reports/session-records.ts writes them, slots.ts folds them
// into blocks, the report queries read them): types only, so every file of the module can use
// them without importing the writer.

/** completed: ended normally; abandoned: the user side went away / timed out; transferred_to_human:
 * handed off (SIP); error: ended by a failure; active / paused while live. */
export type SessionStatus = 'active' | 'paused' | 'completed' | 'abandoned' | 'transferred_to_human' | 'error'

export interface SessionRecordDoc {
  _id: string
  accountId: string
  crew_id: string
  session_id: string
  /** Agent in charge now (or at the end). */
  agent_id: string
  /** Every agent the session passed through, in order. */
  agents: string[]
  start_time: number
  end_time: number | null
  duration: number | null
  status: SessionStatus
  messages: number
  user_messages: number
  assistant_messages: number
  tool_calls: number
  transfers: number
  end_reason: string | null
  /**
   * The history seq its message and tool counts cover (the engine adds the counts of later
   * entries from the session's journal after a crash; absent in records of older versions).
   */
  log_position?: number
  /** Unix ms of the last write (the supervisors' lifecycle feed reads changes by it; engine/supervision/session-feed.ts). */
  updated_at?: number
  /** Unix ms of the last user and assistant messages (the listing's phase and no-reply flag). */
  last_user_at?: number
  last_assistant_at?: number
  /** The last message, clipped (the supervisors' listing). */
  last_message?: LastMessage
  /** Who the session is with, from its arguments (the supervisors' listing and search); absent when they name nobody. */
  customer?: { name?: string; address?: string }
  /** Raised attention flags by reason (engine/supervision/attention.ts decides them; this module stores them). */
  attention?: Record<string, { since?: number; detail?: string; ack_by?: string; ack_at?: number }>
  /** The 15-minute UTC quarter of start_time; present once the record is in the block counts. */
  slot?: number
  /** false while live; true once its final values are in the block stats (absent: written before them). */
  slotted?: boolean
  /** start_time as a Date: what its retention's TTL index reads (reports/retention.ts). */
  started_at?: Date
}

export interface LastMessage {
  author: 'user' | 'assistant'
  text: string
  at: number
}

/** What a flush of a turn adds: counts, and the latest message times. */
export interface TurnCounts {
  userMessages?: number
  assistantMessages?: number
  toolCalls?: number
  lastUserAt?: number
  lastAssistantAt?: number
  lastMessage?: LastMessage
}
