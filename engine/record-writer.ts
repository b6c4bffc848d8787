// One session's report record (reports/session-records.ts) kept up with its history: writes go
// in order, one after the other, and message and tool counts are added up and written once per
// flush (one write per turn, not one per entry). A failed write is logged; the session goes on.
import type { Logger } from '../platform/logger.js'
import type { SessionRecorder, SessionStatus, TurnCounts } from '../reports/index.js'
import type { AttentionRules } from './attention.js'
import type { HistoryEntry } from './types.js'

const RECORD_STATUS: Record<string, Exclude<SessionStatus, 'active' | 'paused'>> = {
  idle_timeout: 'abandoned',
  abandoned: 'abandoned',
  user_gone: 'abandoned',
  transferred_to_human: 'transferred_to_human',
  handoff: 'transferred_to_human',
  error: 'error',
}

const noCounts = (): TurnCounts & { userMessages: number; assistantMessages: number; toolCalls: number } => ({ userMessages: 0, assistantMessages: 0, toolCalls: 0 })
/** The listing shows the start of the last message only. */
const LAST_MESSAGE_CHARS = 200
const clipped = (text: unknown) => {
  const value = typeof text === 'string' ? text : ''
  return value.length > LAST_MESSAGE_CHARS ? `${value.slice(0, LAST_MESSAGE_CHARS - 1)}…` : value
}

export class RecordWriter {
  /** Message and tool counts not yet added to the record. */
  private counts = noCounts()
  private writes: Promise<void> = Promise.resolve()

  constructor(
    private readonly recorder: SessionRecorder,
    private readonly sessionId: string,
    private readonly logger: Logger,
    private readonly attention?: AttentionRules,
  ) {}

  opened(record: Omit<Parameters<SessionRecorder['opened']>[0], 'sessionId'>) {
    this.then(() => this.recorder.opened({ ...record, sessionId: this.sessionId }))
  }

  /** Follows one history entry of the session. */
  note(entry: HistoryEntry) {
    const { recorder, sessionId } = this
    const change = this.attention?.changeOf(entry)
    if (change) {
      // Written at once, not with the turn: a supervisor is being called.
      if ('raise' in change) this.then(() => recorder.flagRaised(sessionId, change.raise, { since: change.at, ...(change.detail !== undefined ? { detail: change.detail } : {}) }))
      else this.then(() => recorder.flagCleared(sessionId, change.clear))
    }
    switch (entry.type) {
      case 'message.user':
        this.counts.userMessages++
        this.counts.lastUserAt = entry.at
        this.counts.lastMessage = { author: 'user', text: clipped(entry.text), at: entry.at }
        break
      case 'message.assistant':
        this.counts.assistantMessages++
        this.counts.lastAssistantAt = entry.at
        // A reply that only calls tools has no text: the last message stays the one with words.
        if (entry.text) this.counts.lastMessage = { author: 'assistant', text: clipped(entry.text), at: entry.at }
        break
      case 'tool.call':
        this.counts.toolCalls++
        break
      case 'agent.transferred':
        this.then(() => recorder.transferred(sessionId, entry.to as string))
        break
      case 'session.paused':
        this.then(() => recorder.statusChanged(sessionId, 'paused'))
        break
      case 'session.resumed':
        this.then(() => recorder.statusChanged(sessionId, 'active'))
        break
      case 'session.destroyed': {
        this.flushCounts()
        const reason = String(entry.reason)
        this.then(() => recorder.closed(sessionId, { endTime: entry.at, status: RECORD_STATUS[reason] ?? 'completed', reason }))
        break
      }
    }
  }

  /** Adds the counts noted so far to the record. */
  flushCounts() {
    const counts = this.counts
    if (counts.userMessages + counts.assistantMessages + counts.toolCalls === 0 && !counts.lastMessage) return
    this.counts = noCounts()
    this.then(() => this.recorder.counted(this.sessionId, counts))
  }

  /** Resolves once every write asked for so far is done. */
  written(): Promise<void> {
    return this.writes
  }

  private then(write: () => Promise<void>) {
    this.writes = this.writes.then(write).catch(error => this.logger.error('session record write failed', { sessionId: this.sessionId, error }))
  }
}
