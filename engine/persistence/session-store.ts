// What a session leaves in the store: its journal and its document. The actor host writes them,
// the orphan reaper (engine/host/reaper.ts) reads and closes them; this module alone knows how they
// are kept.
//
//   journal   an ordered log (platform/store OrderedLog) per session: its history entries at
//             their seq (1, 2, ...), and at position 0 the machine's control state as of the last
//             entry written. One write per batch of a turn's entries, the control with them: a
//             turn costs one commit, not a document rewrite.
//   document  the session's metadata (account, crew, consumers, deadlines, fence, event ids) and
//             its checkpoint: control and conversation as of a history seq. Written when the
//             session opens and then every few dozen entries or seconds (session-writer.ts), when
//             it hibernates, is handed over or stops; a restore takes the checkpoint and folds
//             the journal's entries after it. Then a tombstone.
import type { Collection, Doc, OrderedLog, Store } from '../../platform/store/index.js'
import type { ConversationState } from '../session/conversation.js'
import { emptyDigest, digestOf } from '../session/conversation.js'
import type { PersistedControl, SessionContext } from '../session/machine.js'
import type { HistoryEntry } from '../types.js'

export const SESSIONS = 'engine_sessions'
export const SESSION_JOURNAL = 'engine_session_journal'
/** Where history entries were kept as documents before the journal (moved into it at start-up). */
export const LEGACY_SESSION_LOG = 'engine_session_log'

type LiveState = 'active' | 'paused'
const LIVE = { $in: ['active', 'paused'] }

interface SessionDoc extends Doc {
  accountId: string
  crewId: string
  state: LiveState | 'destroyed'
  agentId: string
  /** The checkpoint as JSON text (client-supplied keys are not valid field names everywhere); null once destroyed. */
  snapshot: string | null
  /** The history seq the checkpoint covers. */
  logPosition: number
  consumers: string[]
  deadlines: SessionDeadlines
  createdAt: Date
  updatedAt: Date
  destroyedAt?: Date
  closeReason?: string
  /** Fencing token of the engine node that owns the session (NATS mode): its lease's claim revision. */
  fence?: number
  /** Seq of the last event published when the checkpoint was written (a floor for a restore). */
  eventSeq?: number
  /**
   * No event id the owner published passes it (kept ahead of the ids when the event log dies with
   * the process, exact after a clean stop): where a restore numbers on after a crash.
   */
  eventSeqBound?: number
}

/** The journal's record at position 0: the control state as of history seq `seq`. */
export interface ControlRecord {
  seq: number
  control: PersistedControl
}
type JournalValue = HistoryEntry | ControlRecord
const CONTROL = 0

export interface SessionDeadlines {
  idle: number
  tools: number[]
}

/** The session's state as of a history seq: what a restore starts from. */
export interface Checkpoint {
  control: PersistedControl
  conversation: ConversationState
  /** The history seq it covers. */
  logPosition: number
  createdAt: number
  /** When its last history entry was written. */
  updatedAt: number
}

/** A session about to start, with the checkpoint of its opening. */
export interface NewSession {
  sessionId: string
  accountId: string
  crewId: string
  agentId: string
  consumerId: string
  at: number
  /** The opening's checkpoint as JSON text (null: not encodable; the write-behind says so). */
  checkpoint: string | null
  logPosition: number
  idleDeadline: number
  /** Events the opening publishes (`Initialized`, the opening's own, the first state's): the floor of a restore's numbering. */
  eventSeq: number
  /** The bound on the ids the owner will publish before it writes a new one (absent: not kept). */
  eventSeqBound?: number
}

/** What the writer puts in the document at a checkpoint. */
export interface CheckpointWrite {
  state: LiveState
  agentId: string
  /** The Checkpoint as JSON text (encoded by the writer, which tells an unencodable state from a store failure). */
  checkpoint: string
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
  eventSeq: number
  /** No id its owner published passes it (0: not kept). */
  eventSeqBound: number
  checkpoint: Checkpoint
  /** The journal's control record (null: none written yet). */
  control: ControlRecord | null
}

/** A live session found past its idle deadline (the reaper's scan). */
export interface ExpiredSession {
  sessionId: string
  accountId: string
  crewId: string
  idleDeadline: number
}

/** The fencing token of the writing node (NATS mode); undefined in one process. */
export type Fence = number | undefined
const fenced = (fence: Fence): { fence?: number } => (fence === undefined ? {} : { fence })

/**
 * What the actor host asks of the place its sessions persist: the SessionStore below (one
 * process, or a cluster's sessions from before the journal), or a cluster's journaled store
 * (engine/cluster/journaled-session-store.ts: JetStream first, MongoDB behind).
 */
export interface SessionRepository {
  ensureIndexes(): Promise<void>
  insert(session: NewSession, fence: Fence): Promise<void>
  addConsumer(sessionId: string, consumerId: string, keep: number): Promise<void>
  writeJournal(sessionId: string, entries: HistoryEntry[], control: PersistedControl | undefined): Promise<void>
  writeCheckpoint(sessionId: string, write: CheckpointWrite, fence: Fence): Promise<boolean>
  reserveEventIds(sessionId: string, bound: number): Promise<void>
  releaseEventIds(sessionId: string, lastSeq: number): Promise<void>
  takeFence(sessionId: string, token: number): Promise<boolean>
  load(sessionId: string): Promise<PersistedSession | null>
  closeReason(sessionId: string, accountId: string): Promise<string | null>
  entriesAfter(sessionId: string, after: number, limit?: number): Promise<HistoryEntry[]>
  markDestroyed(sessionId: string, close: { reason: string; at: number; idleDeadline?: number }): Promise<boolean>
  deleteLog(sessionId: string): Promise<void>
  /** The session left this node (ended, dropped, handed over): what the repository keeps of it goes. */
  released?(sessionId: string): void
  /** After a restore: whether the session should be checkpointed at once (its journal has no checkpoint yet). */
  checkpointWanted?(sessionId: string): boolean
}

export class SessionStore implements SessionRepository {
  private readonly sessions: Collection<SessionDoc>
  private readonly journal: OrderedLog<JournalValue>

  constructor(private readonly store: Store) {
    this.sessions = store.collection<SessionDoc>(SESSIONS)
    this.journal = store.orderedLog<JournalValue>(SESSION_JOURNAL)
  }

  async ensureIndexes() {
    await this.store.ensureIndexes(SESSIONS, [
      { name: 'account_crew_state', key: { accountId: 1, crewId: 1, state: 1 } },
      // The orphan reaper (engine/host/reaper.ts): live sessions whose idle deadline has passed.
      { name: 'state_idle_deadline', key: { state: 1, 'deadlines.idle': 1 } },
      // Tombstones of destroyed sessions are kept a day (a late call says "destroyed", then 404).
      // Partial: a live session has no entry (no null key written with every new session).
      { name: 'destroyed_ttl', key: { destroyedAt: 1 }, expireAfterSeconds: 86_400, partialFilterExpression: { state: 'destroyed' } },
    ])
    await this.moveLegacyLog()
  }

  /**
   * History entries an earlier version kept as documents (live sessions at the upgrade) go into
   * the journal, a page at a time, before the engine serves.
   */
  private async moveLegacyLog() {
    const legacy = this.store.collection<Doc & { sessionId: string; seq: number; entry: string }>(LEGACY_SESSION_LOG)
    for (;;) {
      const page = await legacy.find({}, { sort: { _id: 1 }, limit: 500 })
      if (page.length === 0) return
      await this.journal.write(page.map(d => ({ stream: d.sessionId, position: d.seq, value: JSON.parse(d.entry) as HistoryEntry })))
      await legacy.deleteMany({ _id: { $in: page.map(d => d._id) } })
    }
  }

  async insert(session: NewSession, fence: Fence) {
    await this.sessions.insertOne({
      _id: session.sessionId,
      accountId: session.accountId,
      crewId: session.crewId,
      state: 'active',
      agentId: session.agentId,
      snapshot: session.checkpoint,
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

  /**
   * One commit of a session's journal: its new history entries and, at position 0, the control
   * state as of the last of them. Throws (writing nothing) when a value cannot be encoded.
   */
  async writeJournal(sessionId: string, entries: HistoryEntry[], control: PersistedControl | undefined) {
    const records: { stream: string; position: number; value: JournalValue }[] = entries.map(entry => ({ stream: sessionId, position: entry.seq, value: entry }))
    const last = entries.at(-1)
    if (control && last) records.push({ stream: sessionId, position: CONTROL, value: { seq: last.seq, control } })
    await this.journal.write(records)
  }

  /** Several sessions' journal writes in one bulk write (a cluster's copy in MongoDB, written behind). */
  async writeJournals(batches: { sessionId: string; entries: HistoryEntry[]; control: PersistedControl | undefined }[]) {
    const records: { stream: string; position: number; value: JournalValue }[] = []
    for (const { sessionId, entries, control } of batches) {
      for (const entry of entries) records.push({ stream: sessionId, position: entry.seq, value: entry })
      const last = entries.at(-1)
      if (control && last) records.push({ stream: sessionId, position: CONTROL, value: { seq: last.seq, control } })
    }
    await this.journal.write(records)
  }

  /** Writes the checkpoint unless the session is destroyed or fenced by a newer owner; answers whether it did. */
  async writeCheckpoint(sessionId: string, write: CheckpointWrite, fence: Fence): Promise<boolean> {
    const written = await this.sessions.updateOne(
      { _id: sessionId, state: { $ne: 'destroyed' }, ...fenced(fence) },
      {
        $set: {
          state: write.state,
          agentId: write.agentId,
          snapshot: write.checkpoint,
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
   * older token can no longer write its checkpoint. False: destroyed, absent or owned by a newer token.
   */
  async takeFence(sessionId: string, token: number): Promise<boolean> {
    const taken = await this.sessions.updateOne(
      { _id: sessionId, state: LIVE, $or: [{ fence: { $exists: false } }, { fence: { $lte: token } }] },
      { $set: { fence: token } },
    )
    return taken.matchedCount > 0
  }

  /** The live session with its checkpoint and journal control; null when destroyed, absent or without a checkpoint. */
  async load(sessionId: string): Promise<PersistedSession | null> {
    const doc = await this.sessions.findOne({ _id: sessionId, state: LIVE })
    if (!doc || !doc.snapshot) return null
    const control = (await this.journal.get(sessionId, CONTROL)) as ControlRecord | undefined
    return {
      accountId: doc.accountId,
      crewId: doc.crewId,
      // Bounded on write; a consumer re-attached may appear twice.
      consumers: [...new Set(doc.consumers)],
      eventSeq: doc.eventSeq ?? 0,
      eventSeqBound: doc.eventSeqBound ?? 0,
      checkpoint: checkpointOf(JSON.parse(doc.snapshot), doc.logPosition, doc.createdAt),
      control: control ?? null,
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
    const records = await this.journal.read(sessionId, Math.max(after, CONTROL), limit)
    return records.map(r => r.value as HistoryEntry)
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

  /** The journal goes: history entries and control. */
  async deleteLog(sessionId: string) {
    await this.journal.drop(sessionId)
  }

  /** An account's live sessions after `after` in id order, with their checkpoint text (an erasure reads what they hold). */
  async liveOfAccount(accountId: string, after: string | null, limit: number): Promise<{ sessionId: string; checkpoint: string | null }[]> {
    const docs = await this.sessions.find(
      { accountId, state: LIVE, ...(after === null ? {} : { _id: { $gt: after } }) },
      { sort: { _id: 1 }, limit, projection: { snapshot: 1 } },
    )
    return docs.map(d => ({ sessionId: d._id, checkpoint: d.snapshot }))
  }

  /** The journal's control record and its entries with seq > after (at most `limit` entries), as stored. */
  async journalPage(sessionId: string, after: number, limit: number): Promise<unknown[]> {
    const [control, records] = await Promise.all([after === 0 ? this.journal.get(sessionId, CONTROL) : undefined, this.journal.read(sessionId, after, limit)])
    return [...(control === undefined ? [] : [control]), ...records.map(r => r.value)]
  }

  /** An account's session as stored: live, destroyed (a tombstone) or absent. */
  async stateOf(sessionId: string, accountId: string): Promise<'live' | 'destroyed' | null> {
    const doc = await this.sessions.findOne({ _id: sessionId, accountId }, { projection: { state: 1 } })
    return doc ? (doc.state === 'destroyed' ? 'destroyed' : 'live') : null
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

/**
 * Another node writes the session now (a cluster's journal refused this node's write): the
 * writer lets the session go without writing anything more.
 */
export class WritesFenced extends Error {
  override name = 'WritesFenced'
}

/**
 * A stored checkpoint, or the persisted XState snapshot an earlier version stored in its place
 * (a live session at the upgrade): its context held the conversation and the control together.
 */
export function checkpointOf(stored: any, logPosition: number, createdAt: Date): Checkpoint {
  if (stored && stored.control && stored.conversation) return stored as Checkpoint
  const c = stored?.context ?? {}
  const generating = typeof stored?.value === 'object' && stored.value?.active === 'generating'
  const context: SessionContext = {
    agentId: c.agentId,
    turnId: c.turnId ?? 0,
    round: generating ? 0 : (c.toolRounds ?? 0),
    replyOwed: generating || !!c.replyOwed,
    pendingTools: c.pendingTools ?? [],
    resolved: c.resolved ?? [],
    transfers: c.transfers ?? 0,
    idleDeadline: c.idleDeadline,
    closed: null,
    terms: { agents: c.agents ?? [c.agentId], idleTimeoutMs: c.idleTimeoutMs, maxToolRounds: c.maxToolRounds ?? 4 },
  }
  const messages = c.messages ?? []
  return {
    control: { value: generating ? { active: 'idle' } : stored.value, context },
    conversation: { messages, digest: c.digest ?? (messages.length ? digestOf(messages) : emptyDigest()), arguments: c.arguments ?? {}, turnAfter: c.turnAfter ?? null },
    logPosition: c.seq ?? logPosition,
    createdAt: c.createdAt ?? createdAt.getTime(),
    updatedAt: c.updatedAt ?? createdAt.getTime(),
  }
}
