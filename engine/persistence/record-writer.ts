// One session's report record (reports/session-records.ts) kept up with its history: writes go in
// order, one after the other. Message and tool counts are added up entry by entry and written with
// the session's checkpoints (engine/persistence/session-writer.ts), tagged with the history seq
// they cover, so a restore adds exactly the entries after it from the journal; attention flags,
// transfers, pauses and the close are written at once. A failed write is logged; the session goes
// on.
import type { Logger } from '../../platform/logger.js'
import type { SessionRecorder, SessionStatus, TurnCounts } from '../../reports/index.js'
import type { AttentionRules } from '../supervision/attention.js'
import type { HistoryEntry } from '../types.js'

const RECORD_STATUS: Record<string, Exclude<SessionStatus, 'active' | 'paused'>> = {
  idle_timeout: 'abandoned',
  abandoned: 'abandoned',
  user_gone: 'abandoned',
  transferred_to_human: 'transferred_to_human',
  handoff: 'transferred_to_human',
  error: 'error',
}

type Counts = TurnCounts & { userMessages: number; assistantMessages: number; toolCalls: number }
const noCounts = (): Counts => ({ userMessages: 0, assistantMessages: 0, toolCalls: 0 })
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
    private readonly attention: AttentionRules | undefined,
    /** The history seq the stored record's counts cover. */
    private countedUpTo: number,
  ) {}

  opened(record: Omit<Parameters<SessionRecorder['opened']>[0], 'sessionId'>) {
    this.then(() => this.recorder.opened({ ...record, sessionId: this.sessionId }))
  }

  /** Follows one history entry of the session. */
  note(entry: HistoryEntry) {
    const { recorder, sessionId } = this
    const change = this.attention?.changeOf(entry)
    if (change) {
      // Written at once, not with the checkpoint: a supervisor is being called.
      if ('raise' in change) this.then(() => recorder.flagRaised(sessionId, change.raise, { since: change.at, ...(change.detail !== undefined ? { detail: change.detail } : {}) }))
      else this.then(() => recorder.flagCleared(sessionId, change.clear))
    }
    this.count(entry)
    switch (entry.type) {
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
        this.flushCounts(entry.seq)
        const reason = String(entry.reason)
        this.then(() => recorder.closed(sessionId, { endTime: entry.at, status: RECORD_STATUS[reason] ?? 'completed', reason }))
        break
      }
    }
  }

  /** Counts an entry the record does not cover yet (a restore's entries after the record's seq; nothing else is written again). */
  recount(entry: HistoryEntry) {
    if (entry.seq > this.countedUpTo) this.count(entry)
  }

  private count(entry: HistoryEntry) {
    const counts = this.counts
    switch (entry.type) {
      case 'message.user':
        counts.userMessages++
        counts.lastUserAt = entry.at
        counts.lastMessage = { author: 'user', text: clipped(entry.text), at: entry.at }
        break
      case 'message.assistant':
        counts.assistantMessages++
        counts.lastAssistantAt = entry.at
        // A reply that only calls tools has no text: the last message stays the one with words.
        if (entry.text) counts.lastMessage = { author: 'assistant', text: clipped(entry.text), at: entry.at }
        break
      case 'tool.call':
        counts.toolCalls++
        break
    }
  }

  /** Adds the counts noted so far to the record, as covering the history up to `upTo`. */
  flushCounts(upTo: number) {
    const counts = this.counts
    if (counts.userMessages + counts.assistantMessages + counts.toolCalls === 0 && !counts.lastMessage) return
    this.counts = noCounts()
    const span = { from: this.countedUpTo, to: Math.max(upTo, this.countedUpTo) }
    this.countedUpTo = span.to
    this.then(() => this.recorder.counted(this.sessionId, counts, span))
  }

  /** Resolves once every write asked for so far is done. */
  written(): Promise<void> {
    return this.writes
  }

  private then(write: () => Promise<void>) {
    this.writes = this.writes.then(write).catch(error => this.logger.error('session record write failed', { sessionId: this.sessionId, error }))
  }
}
