// Session records: one document per assistant session, written by the engine as the session
// lives and read by the report queries. This module owns the shape; the engine only calls
// the writer methods below.
import type { Collection, IndexSpec, Store } from '../platform/store/index.js'
import { type Clock, systemClock } from '../platform/clock.js'

export const SESSION_RECORDS = 'session_records'

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
  /** Unix ms of the last write (the supervisors' lifecycle feed reads changes by it; engine/session-feed.ts). */
  updated_at?: number
}

export const SESSION_RECORD_INDEXES: IndexSpec[] = [
  // Both report queries: one crew of one account over a start_time range; sessions-detail sorts
  // by (start_time, _id) and seeks past a cursor on it. The embedded store hashes records by
  // (account, crew), so those queries scan one crew's records, not the collection.
  { name: 'account_crew_start', key: { accountId: 1, crew_id: 1, start_time: 1, _id: 1 }, partitionFields: 2 },
]

export class SessionRecorder {
  private readonly records: Collection<SessionRecordDoc>
  constructor(
    private readonly store: Store,
    private readonly clock: Clock = systemClock,
  ) {
    this.records = store.collection<SessionRecordDoc>(SESSION_RECORDS)
  }

  ensureIndexes() {
    return this.store.ensureIndexes(SESSION_RECORDS, SESSION_RECORD_INDEXES)
  }

  /** Idempotent: a session restored on another node may open again without a second record. */
  async opened(r: { accountId: string; crewId: string; sessionId: string; agentId: string; startTime: number }) {
    await this.records.updateOne(
      { _id: r.sessionId },
      {
        $setOnInsert: {
          accountId: r.accountId,
          crew_id: r.crewId,
          session_id: r.sessionId,
          agent_id: r.agentId,
          agents: [r.agentId],
          start_time: r.startTime,
          end_time: null,
          duration: null,
          status: 'active',
          messages: 0,
          user_messages: 0,
          assistant_messages: 0,
          tool_calls: 0,
          transfers: 0,
          end_reason: null,
        },
        $set: { updated_at: this.clock.now() },
      },
      { upsert: true },
    )
  }

  async counted(sessionId: string, counts: { userMessages?: number; assistantMessages?: number; toolCalls?: number }) {
    const user = counts.userMessages ?? 0
    const assistant = counts.assistantMessages ?? 0
    await this.records.updateOne(
      { _id: sessionId },
      { $inc: { messages: user + assistant, user_messages: user, assistant_messages: assistant, tool_calls: counts.toolCalls ?? 0 }, $set: { updated_at: this.clock.now() } },
    )
  }

  async transferred(sessionId: string, agentId: string) {
    await this.records.updateOne({ _id: sessionId }, { $set: { agent_id: agentId, updated_at: this.clock.now() }, $push: { agents: agentId }, $inc: { transfers: 1 } })
  }

  async statusChanged(sessionId: string, status: 'active' | 'paused') {
    await this.records.updateOne({ _id: sessionId, end_time: null }, { $set: { status, updated_at: this.clock.now() } })
  }

  async closed(sessionId: string, r: { endTime: number; status: Exclude<SessionStatus, 'active' | 'paused'>; reason: string }) {
    const record = await this.records.findOne({ _id: sessionId })
    if (!record || record.end_time !== null) return
    await this.records.updateOne(
      { _id: sessionId, end_time: null },
      // Clamped: a clock step between the nodes that opened and closed it must not go negative.
      { $set: { end_time: r.endTime, duration: Math.max(0, r.endTime - record.start_time), status: r.status, end_reason: r.reason, updated_at: this.clock.now() } },
    )
  }
}
