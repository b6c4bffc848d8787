// What a session leaves in the store: its document (the persisted XState snapshot, its
// deadlines, its owner's fence, then a tombstone) and its history log. The actor host writes
// them, the orphan reaper (engine/reaper.ts) reads and closes them; this module alone knows the
// collections, their indexes and how a snapshot and a log entry are encoded.
import type { Collection, Doc, Store } from '../platform/store/index.js'
import type { HistoryEntry } from './types.js'

export const SESSIONS = 'engine_sessions'
export const SESSION_LOG = 'engine_session_log'

type LiveState = 'active' | 'paused'
const LIVE = { $in: ['active', 'paused'] }

interface SessionDoc extends Doc {
  accountId: string
  crewId: string
  state: LiveState | 'destroyed'
  agentId: string
  /** XState persisted snapshot as JSON text (client-supplied keys are not valid field names everywhere). */
  snapshot: string | null
  logPosition: number
  consumers: string[]
  deadlines: SessionDeadlines
  createdAt: Date
  updatedAt: Date
  destroyedAt?: Date
  closeReason?: string
  /** Fencing token of the engine node that owns the session (NATS mode): its lease's claim revision. */
  fence?: number
  /** Seq of the last event published when the snapshot was written (a floor for a restore). */
  eventSeq?: number
  /**
   * No event id the owner published passes it (kept ahead of the ids when the event log dies with
   * the process, exact after a clean stop): where a restore numbers on after a crash.
   */
  eventSeqBound?: number
}

export interface LogDoc extends Doc {
  sessionId: string
  seq: number
  at: number
  type: string
  entry: string
}

export interface SessionDeadlines {
  idle: number
  tools: number[]
}

/** A session about to start (no snapshot before the end of its first turn). */
export interface NewSession {
  sessionId: string
  accountId: string
  crewId: string
  agentId: string
  consumerId: string
  idleDeadline: number
  at: number
  /** The opening, as a persisted snapshot between turns (JSON): restorable from its insert on (null: not encodable). */
  snapshot: string | null
  /** The history seq that snapshot covers (the opening's entries). */
  logPosition: number
  /** Events the opening publishes (`Initialized`, the opening's own, the first state's): the floor of a restore's numbering. */
  eventSeq: number
  /** The bound on the ids the owner will publish before it writes a new one (absent: not kept). */
  eventSeqBound?: number
}

/** What the host writes after a turn: the actor's persisted snapshot and what it points at. */
export interface SnapshotWrite {
  state: LiveState
  agentId: string
  /** `actor.getPersistedSnapshot()` as JSON text (encoded by the writer, which tells an unencodable snapshot from a store failure). */
  snapshot: string
  logPosition: number
  eventSeq: number
  deadlines: SessionDeadlines
  updatedAt: number
}

/** A live session as persisted, for a restore. */
export interface PersistedSession {
  accountId: string
  crewId: string
  consumers: string[]
  logPosition: number
  eventSeq: number
  /** No id its owner published passes it (0: not kept). */
  eventSeqBound: number
  /** The XState persisted snapshot. */
  snapshot: any
}

/** A live session found past its idle deadline (the reaper's scan). */
export interface ExpiredSession {
  sessionId: string
  accountId: string
  crewId: string
  idleDeadline: number
}

/** The fencing token of the writing node (NATS mode); undefined in one process. */
type Fence = number | undefined
const fenced = (fence: Fence): { fence?: number } => (fence === undefined ? {} : { fence })

export class SessionStore {
  private readonly sessions: Collection<SessionDoc>
  private readonly log: Collection<LogDoc>

  constructor(private readonly store: Store) {
    this.sessions = store.collection<SessionDoc>(SESSIONS)
    this.log = store.collection<LogDoc>(SESSION_LOG)
  }

  async ensureIndexes() {
    await this.store.ensureIndexes(SESSIONS, [
      { name: 'account_crew_state', key: { accountId: 1, crewId: 1, state: 1 } },
      // The orphan reaper (engine/reaper.ts): live sessions whose idle deadline has passed.
      { name: 'state_idle_deadline', key: { state: 1, 'deadlines.idle': 1 } },
      // Tombstones of destroyed sessions are kept a day (a late call says "destroyed", then 404).
      // Partial: a live session has no entry (no null key written with every new session).
      { name: 'destroyed_ttl', key: { destroyedAt: 1 }, expireAfterSeconds: 86_400, partialFilterExpression: { state: 'destroyed' } },
    ])
    // Not unique: a log document's _id is `<sessionId>:<seq>`, so the primary key already refuses
    // a second entry with the same number, and a unique check was a range read per entry written.
    await this.store.ensureIndexes(SESSION_LOG, [{ name: 'session_seq', key: { sessionId: 1, seq: 1 } }])
  }

  async insert(session: NewSession, fence: Fence) {
    await this.sessions.insertOne({
      _id: session.sessionId,
      accountId: session.accountId,
      crewId: session.crewId,
      state: 'active',
      agentId: session.agentId,
      snapshot: session.snapshot,
      logPosition: session.logPosition,
      eventSeq: session.eventSeq,
      ...(session.eventSeqBound === undefined ? {} : { eventSeqBound: session.eventSeqBound }),
      consumers: [session.consumerId],
      deadlines: { idle: session.idleDeadline, tools: [] },
      createdAt: new Date(session.at),
      updatedAt: new Date(session.at),
      ...fenced(fence),
    })
  }

  /** Records a new consumer id; only the last `keep` are kept (the session's consumer ids are bounded). */
  async addConsumer(sessionId: string, consumerId: string, keep: number) {
    await this.sessions.updateOne({ _id: sessionId }, { $push: { consumers: { $each: [consumerId], $slice: -keep } } })
  }

  /** The log documents of `entries` (throws when an entry cannot be encoded). */
  logDocs(sessionId: string, entries: HistoryEntry[]): LogDoc[] {
    return entries.map(entry => ({ _id: `${sessionId}:${entry.seq}`, sessionId, seq: entry.seq, at: entry.at, type: entry.type, entry: JSON.stringify(entry) }))
  }

  /** Writes log documents of any number of sessions at once (a retry skips those already written). */
  async insertLogDocs(docs: LogDoc[]) {
    await this.log.insertMany(docs, { ordered: false })
  }

  async appendLog(sessionId: string, entries: HistoryEntry[]) {
    await this.insertLogDocs(this.logDocs(sessionId, entries))
  }

  /** Writes the snapshot unless the session is destroyed or fenced by a newer owner; answers whether it did. */
  async writeSnapshot(sessionId: string, write: SnapshotWrite, fence: Fence): Promise<boolean> {
    const written = await this.sessions.updateOne(
      { _id: sessionId, state: { $ne: 'destroyed' }, ...fenced(fence) },
      {
        $set: {
          state: write.state,
          agentId: write.agentId,
          snapshot: write.snapshot,
          logPosition: write.logPosition,
          eventSeq: write.eventSeq,
          deadlines: write.deadlines,
          updatedAt: new Date(write.updatedAt),
        },
      },
    )
    return written.matchedCount > 0
  }

  /** Raises the bound on the session's event ids (never lowers it: writes may land out of order). */
  async reserveEventIds(sessionId: string, bound: number) {
    await this.sessions.updateOne({ _id: sessionId, state: LIVE }, { $max: { eventSeqBound: bound } })
  }

  /** A clean stop: the bound becomes the last id published, so a restore numbers on without a jump. */
  async releaseEventIds(sessionId: string, lastSeq: number) {
    await this.sessions.updateOne({ _id: sessionId, state: LIVE }, { $set: { eventSeqBound: lastSeq } })
  }

  /**
   * Fencing: the live session's document takes this node's token, after which a node holding an
   * older token can no longer write its snapshot. False: destroyed, absent or owned by a newer token.
   */
  async takeFence(sessionId: string, token: number): Promise<boolean> {
    const taken = await this.sessions.updateOne(
      { _id: sessionId, state: LIVE, $or: [{ fence: { $exists: false } }, { fence: { $lte: token } }] },
      { $set: { fence: token } },
    )
    return taken.matchedCount > 0
  }

  /** The live session with its snapshot; null when destroyed, absent or without a snapshot yet. */
  async load(sessionId: string): Promise<PersistedSession | null> {
    const doc = await this.sessions.findOne({ _id: sessionId, state: LIVE })
    if (!doc || !doc.snapshot) return null
    return {
      accountId: doc.accountId,
      crewId: doc.crewId,
      // Bounded on write; a consumer re-attached may appear twice.
      consumers: [...new Set(doc.consumers)],
      logPosition: doc.logPosition,
      eventSeq: doc.eventSeq ?? 0,
      eventSeqBound: doc.eventSeqBound ?? 0,
      snapshot: JSON.parse(doc.snapshot),
    }
  }

  /**
   * How an account's session ended, from its tombstone (kept a day): its close reason; null when
   * no tombstone of that account's session is kept (never existed, still live, or long gone).
   */
  async closeReason(sessionId: string, accountId: string): Promise<string | null> {
    const doc = await this.sessions.findOne({ _id: sessionId, accountId, state: 'destroyed' }, { projection: { closeReason: 1 } })
    return doc ? (doc.closeReason ?? 'destroyed') : null
  }

  /** The history entries with seq > after, in order (at most `limit`). */
  async entriesAfter(sessionId: string, after: number, limit?: number): Promise<HistoryEntry[]> {
    const docs = await this.log.find({ sessionId, seq: { $gt: after } }, { sort: { seq: 1 }, ...(limit === undefined ? {} : { limit }) })
    return docs.map(d => JSON.parse(d.entry) as HistoryEntry)
  }

  /**
   * Turns a live session into a tombstone; answers whether this call did (two nodes closing the
   * same session: only one matches). `idleDeadline`: only if it is still the one read before.
   */
  async markDestroyed(sessionId: string, close: { reason: string; at: number; idleDeadline?: number }): Promise<boolean> {
    const closed = await this.sessions.updateOne(
      { _id: sessionId, state: LIVE, ...(close.idleDeadline === undefined ? {} : { 'deadlines.idle': close.idleDeadline }) },
      { $set: { state: 'destroyed', snapshot: null, destroyedAt: new Date(close.at), closeReason: close.reason } },
    )
    return closed.matchedCount === 1
  }

  async deleteLog(sessionId: string) {
    await this.log.deleteMany({ sessionId })
  }

  /** Live sessions whose idle deadline is before `now`, the oldest deadlines first. */
  async expired(now: number, limit: number): Promise<ExpiredSession[]> {
    const docs = await this.sessions.find(
      { state: LIVE, 'deadlines.idle': { $lt: now } },
      { sort: { 'deadlines.idle': 1 }, limit, projection: { accountId: 1, crewId: 1, deadlines: 1 } },
    )
    return docs.map(d => ({ sessionId: d._id, accountId: d.accountId, crewId: d.crewId, idleDeadline: d.deadlines.idle }))
  }
}
