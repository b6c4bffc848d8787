// Session records: one document per assistant session, written by the engine as the session
// lives and read by the report queries. This module owns the shape; the engine only calls
// the writer methods below. Each record also feeds the pre-aggregated blocks of slots.ts, exactly
// once: its `sessions` count when the record is created (the upsert that inserts it), its final
// values when it is closed (the conditional update that sets end_time, which one caller wins).
// A closed record is final: later counts, transfers or status changes no longer touch it, so the
// blocks and the record keep saying the same thing.
import type { BulkOp, Collection, IndexSpec, Store } from '../platform/store/index.js'
import { type Clock, systemClock } from '../platform/clock.js'
import type { SessionRecordDoc, SessionStatus, TurnCounts } from './record-types.js'
import { quarterOf, SLOT_COUNTS, SLOT_INDEXES, SLOT_STATS, SLOT_STATS_OPTIONS, SlotUpdates, type SlotCountDoc, type SlotStatsDoc } from './slots.js'

export const SESSION_RECORDS = 'session_records'

export type { LastMessage, SessionRecordDoc, SessionStatus, TurnCounts } from './record-types.js'

export const SLOT_MIGRATIONS = 'report_migrations'
const SLOTS_MIGRATION = 'slots-v1'

export const SESSION_RECORD_INDEXES: IndexSpec[] = [
  // Both report queries: one crew of one account over a start_time range; sessions-detail sorts
  // by (start_time, _id) and seeks past a cursor on it. The embedded store hashes records by
  // (account, crew), so those queries scan one crew's records, not the collection.
  { name: 'account_crew_start', key: { accountId: 1, crew_id: 1, start_time: 1, _id: 1 }, partitionFields: 2 },
  // The same order within one 15-minute quarter: sessions-detail pins the quarters a page spans,
  // and counts the rows of a range's partial quarters (the embedded store hashes by the quarter).
  { name: 'account_crew_slot_start', key: { accountId: 1, crew_id: 1, slot: 1, start_time: 1, _id: 1 }, partitionFields: 3 },
  // Live sessions (slotted: false) of a crew over a start_time range: reports read them from the
  // records, since the block stats hold ended sessions only.
  { name: 'account_crew_slotted_start', key: { accountId: 1, crew_id: 1, slotted: 1, start_time: 1 }, partitionFields: 3 },
]

export class SessionRecorder {
  // The one opener of these collections: the report sources read through the same handles.
  readonly records: Collection<SessionRecordDoc>
  readonly counts: Collection<SlotCountDoc>
  readonly stats: Collection<SlotStatsDoc>
  constructor(
    private readonly store: Store,
    private readonly clock: Clock = systemClock,
  ) {
    this.records = store.collection<SessionRecordDoc>(SESSION_RECORDS)
    this.counts = store.collection<SlotCountDoc>(SLOT_COUNTS)
    this.stats = store.collection<SlotStatsDoc>(SLOT_STATS, SLOT_STATS_OPTIONS)
  }

  async ensureIndexes() {
    await Promise.all([
      this.store.ensureIndexes(SESSION_RECORDS, SESSION_RECORD_INDEXES),
      this.store.ensureIndexes(SLOT_COUNTS, SLOT_INDEXES),
      this.store.ensureIndexes(SLOT_STATS, SLOT_INDEXES),
    ])
  }

  /** Idempotent: a session restored on another node may open again without a second record. */
  async opened(r: { accountId: string; crewId: string; sessionId: string; agentId: string; startTime: number; customer?: { name?: string; address?: string } }) {
    const result = await this.records.updateOne(
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
          log_position: 0,
          slot: quarterOf(r.startTime),
          slotted: false,
          ...(r.customer ? { customer: r.customer } : {}),
          started_at: new Date(r.startTime),
        },
        $set: { updated_at: this.clock.now() },
      },
      { upsert: true },
    )
    // Only the call that created the record counts it.
    if (result.upsertedId === null) return
    const updates = new SlotUpdates()
    updates.started({ accountId: r.accountId, crew_id: r.crewId, start_time: r.startTime })
    await this.apply(updates)
  }

  /**
   * Adds the counts of the session's history entries after seq `span.from` up to `span.to`.
   * Applied once: only while the record still covers exactly `span.from` (a write repeated, or
   * counts a restore added again from the journal, do not count twice).
   */
  async counted(sessionId: string, counts: TurnCounts, span: { from: number; to: number }) {
    const user = counts.userMessages ?? 0
    const assistant = counts.assistantMessages ?? 0
    const set: Record<string, unknown> = { updated_at: this.clock.now(), log_position: span.to }
    if (counts.lastUserAt !== undefined) set.last_user_at = counts.lastUserAt
    if (counts.lastAssistantAt !== undefined) set.last_assistant_at = counts.lastAssistantAt
    if (counts.lastMessage) set.last_message = counts.lastMessage
    // A record of an older version has no seq yet (null matches a missing field): its first counts take.
    await this.records.updateOne(
      { _id: sessionId, end_time: null, log_position: { $in: [span.from, null] } },
      { $inc: { messages: user + assistant, user_messages: user, assistant_messages: assistant, tool_calls: counts.toolCalls ?? 0 }, $set: set },
    )
  }

  /** The history seq a live session's record counts cover (null: no live record; undefined: a record of an older version, which does not say). */
  async countedUpTo(sessionId: string): Promise<number | null | undefined> {
    const record = await this.records.findOne({ _id: sessionId, end_time: null }, { projection: { log_position: 1 } })
    return record ? record.log_position : null
  }

  /** An attention flag is raised (again): its time and detail change, an earlier acknowledgement stays (older than it). */
  async flagRaised(sessionId: string, reason: string, flag: { since: number; detail?: string }) {
    const set: Record<string, unknown> = { [`attention.${reason}.since`]: flag.since, updated_at: this.clock.now() }
    if (flag.detail !== undefined) set[`attention.${reason}.detail`] = flag.detail
    await this.records.updateOne({ _id: sessionId, end_time: null }, { $set: set })
  }

  async flagCleared(sessionId: string, reason: string) {
    await this.records.updateOne({ _id: sessionId, end_time: null, [`attention.${reason}`]: { $exists: true } }, { $unset: { [`attention.${reason}`]: '' }, $set: { updated_at: this.clock.now() } })
  }

  /** A supervisor acknowledged a flag of a live session of the account; false when there is no such live session. */
  async flagAcknowledged(accountId: string, sessionId: string, reason: string, by: { userId: string; at: number }): Promise<boolean> {
    const result = await this.records.updateOne(
      { _id: sessionId, accountId, end_time: null },
      { $set: { [`attention.${reason}.ack_by`]: by.userId, [`attention.${reason}.ack_at`]: by.at, updated_at: this.clock.now() } },
    )
    return result.matchedCount === 1
  }

  async transferred(sessionId: string, agentId: string) {
    await this.records.updateOne({ _id: sessionId, end_time: null }, { $set: { agent_id: agentId, updated_at: this.clock.now() }, $push: { agents: agentId }, $inc: { transfers: 1 } })
  }

  async statusChanged(sessionId: string, status: 'active' | 'paused') {
    await this.records.updateOne({ _id: sessionId, end_time: null }, { $set: { status, updated_at: this.clock.now() } })
  }

  async closed(sessionId: string, r: { endTime: number; status: Exclude<SessionStatus, 'active' | 'paused'>; reason: string }) {
    const record = await this.records.findOne({ _id: sessionId })
    if (!record || record.end_time !== null) return
    // The close and `slotted: true` in one conditional update: of every caller closing this
    // record (a flush repeated, a restored session, the reaper), exactly one gets it back.
    const closed = await this.records.findOneAndUpdate(
      { _id: sessionId, end_time: null },
      // Clamped: a clock step between the nodes that opened and closed it must not go negative.
      {
        $set: {
          end_time: r.endTime,
          duration: Math.max(0, r.endTime - record.start_time),
          status: r.status,
          end_reason: r.reason,
          slotted: true,
          updated_at: this.clock.now(),
        },
      },
      { returnDocument: 'after' },
    )
    if (!closed) return
    const updates = new SlotUpdates()
    updates.ended(closed)
    await this.apply(updates)
  }

  /**
   * Writes whole records at once (imports, fixtures, benches): each new record is counted and,
   * if it has ended, added to the stats, like one opened and closed through this class. An _id
   * already stored is left alone and not counted. Returns how many were inserted.
   */
  async insert(records: SessionRecordDoc[]): Promise<number> {
    const docs = records.map(r => ({ ...r, slot: quarterOf(r.start_time), slotted: r.end_time != null, started_at: new Date(r.start_time) }))
    const result = await this.records.insertMany(docs, { ordered: false })
    const rejected = new Set(result.duplicateKeyIndexes)
    const updates = new SlotUpdates()
    docs.forEach((doc, i) => {
      if (rejected.has(i)) return
      updates.started(doc)
      if (doc.slotted) updates.ended(doc)
    })
    await this.apply(updates)
    return result.insertedCount
  }

  /** True once every record is in the blocks (records written before them were added). */
  async slotsComplete(): Promise<boolean> {
    return (await this.store.collection(SLOT_MIGRATIONS).findOne({ _id: SLOTS_MIGRATION })) !== null
  }

  /**
   * One bounded slice of the migration of records written before the blocks existed (no `slot`
   * or no `slotted` field), in _id order after `after`. Each record is claimed by a conditional
   * update (so a concurrent close, or another node running the same migration, never adds it
   * twice) and then added. Returns the last _id read, or null once the whole collection is done
   * (and marks it done).
   */
  async migrateSlice(after: string | null, limit: number): Promise<string | null> {
    const page = await this.records.find(after === null ? {} : { _id: { $gt: after } }, { sort: { _id: 1 }, limit })
    const updates = new SlotUpdates()
    for (const r of page) {
      if (r.slot === undefined) {
        const claimed = await this.records.updateOne({ _id: r._id, slot: { $exists: false } }, { $set: { slot: quarterOf(r.start_time) } })
        if (claimed.modifiedCount === 1) updates.started(r)
      }
      if (r.slotted === undefined) {
        if (r.end_time != null) {
          const claimed = await this.records.updateOne({ _id: r._id, slotted: { $exists: false }, end_time: { $ne: null } }, { $set: { slotted: true } })
          if (claimed.modifiedCount === 1) updates.ended(r)
        } else {
          await this.records.updateOne({ _id: r._id, slotted: { $exists: false }, end_time: null }, { $set: { slotted: false } })
        }
      }
    }
    await this.apply(updates)
    if (page.length === limit) return page[page.length - 1]!._id
    await this.store.collection(SLOT_MIGRATIONS).updateOne({ _id: SLOTS_MIGRATION }, { $setOnInsert: { doneAt: new Date() } }, { upsert: true })
    return null
  }

  /** Block updates asked for in this event-loop turn, written together once it ends. */
  private queued: { updates: SlotUpdates; written: Promise<void> } | null = null

  /**
   * Resolves once `updates` are written. The updates of every caller in the same turn (sessions
   * opening at once: five block upserts each) are merged into one upsert per block document.
   */
  private apply(updates: SlotUpdates): Promise<void> {
    if (updates.size === 0) return Promise.resolve()
    if (!this.queued) {
      const queued: { updates: SlotUpdates; written: Promise<void> } = { updates: new SlotUpdates(), written: Promise.resolve() }
      queued.written = new Promise<void>(resolve => setImmediate(resolve)).then(async () => {
        this.queued = null // later updates start the next batch
        const ops = queued.updates.ops()
        await Promise.all([upsertAll(this.counts, ops[SLOT_COUNTS]), upsertAll(this.stats, ops[SLOT_STATS])])
      })
      this.queued = queued
    }
    this.queued.updates.merge(updates)
    return this.queued.written
  }
}

/**
 * Two writers creating the same block at once: one upsert inserts, the other may be refused by
 * the _id index (MongoDB can report it instead of retrying); run again, it updates the block.
 */
async function upsertAll(collection: Collection<any>, ops: BulkOp[]) {
  let pending = ops
  for (let attempt = 0; pending.length > 0 && attempt < 3; attempt++) {
    const result = await collection.bulkWrite(pending, { ordered: false })
    pending = result.duplicateKeyIndexes.map(i => pending[i]!)
  }
  if (pending.length > 0) throw new Error(`report blocks: ${pending.length} upserts kept colliding`)
}
