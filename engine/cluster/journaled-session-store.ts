// Where an engine node's sessions persist: the session journal on JetStream first
// (engine/cluster/jetstream-journal.ts), MongoDB behind it (engine/cluster/mongo-mirror.ts).
//
//   a turn      its entries are one journal append; the user's `201` waits for that alone. The
//               copy in MongoDB (history for reports and for reads of closed sessions) follows.
//   an open     the opening's checkpoint record is the journal's first; the session document
//               in MongoDB follows.
//   checkpoint  a record in the journal (what a restore starts from) and the document's
//               checkpoint in MongoDB (listings, the orphan reaper's deadlines), behind.
//   restore     the journal's latest checkpoint and what follows it, read from JetStream: a node
//               takes a session over, or wakes one, while MongoDB is unreachable. A session the
//               journal does not know (kept by an earlier version) is read from MongoDB.
//   close       a `closed` record in the journal, then the tombstone in MongoDB (waited for: the
//               crew slot is freed once), then the journal's records go.
import type { Logger } from '../../platform/logger.js'
import {
  checkpointOf,
  type CheckpointWrite,
  type Fence,
  type NewSession,
  type PersistedSession,
  type SessionRepository,
  type SessionStore,
} from '../persistence/session-store.js'
import type { PersistedControl } from '../session/machine.js'
import type { HistoryEntry } from '../types.js'
import { JournalFenced, type JetStreamJournal, type JournalRead, type JournalRecord, type JournalSessionMeta } from './jetstream-journal.js'
import type { MirrorStatus, MongoMirror } from './mongo-mirror.js'

/** What this node keeps of a session it writes: what its checkpoint records say beside its state. */
interface Held extends JournalSessionMeta {
  epoch: number
  /** Restored from MongoDB (its journal had no checkpoint): checkpoint it into the journal at once. */
  seedless: boolean
}

/** A restore's read of the journal, kept for the entries the restore asks for next. */
interface Restored {
  persisted: PersistedSession
  entries: HistoryEntry[]
  /** The journal's checkpoint record it starts from (absent: read from MongoDB). */
  checkpoint?: CheckpointRecord
}

type CheckpointRecord = Extract<JournalRecord, { kind: 'checkpoint' }>

export interface JournaledSessionStoreOptions {
  journal: () => JetStreamJournal
  /** The sessions' documents and history copy in MongoDB. */
  mongo: SessionStore
  mirror: MongoMirror
  logger: Logger
}

export class JournaledSessionStore implements SessionRepository {
  private readonly held = new Map<string, Held>()
  private readonly restored = new Map<string, Restored>()

  constructor(private readonly options: JournaledSessionStoreOptions) {}

  private get journal() {
    return this.options.journal()
  }

  /** How far MongoDB is behind the journal (/healthz, metrics). */
  status(): MirrorStatus {
    return this.options.mirror.status()
  }

  ensureIndexes() {
    return this.options.mongo.ensureIndexes()
  }

  async insert(session: NewSession, fence: Fence) {
    const epoch = fence ?? 0
    const held: Held = { accountId: session.accountId, crewId: session.crewId, consumers: [session.consumerId], createdAt: session.at, epoch, seedless: false }
    this.journal.begin(session.sessionId, epoch)
    this.held.set(session.sessionId, held)
    const write: CheckpointWrite = {
      state: 'active',
      agentId: session.agentId,
      checkpoint: session.checkpoint ?? 'null',
      logPosition: session.logPosition,
      eventSeq: session.eventSeq,
      deadlines: { idle: session.idleDeadline, tools: [] },
      updatedAt: session.at,
    }
    await this.journal.append(session.sessionId, { kind: 'checkpoint', session: metaOf(held), write, epoch })
    this.options.mirror.push(session.sessionId, { kind: 'insert', session, fence })
  }

  async addConsumer(sessionId: string, consumerId: string, keep: number) {
    const held = this.held.get(sessionId)
    if (held) held.consumers = [...held.consumers.filter(c => c !== consumerId), consumerId].slice(-keep)
    await this.journal.append(sessionId, { kind: 'consumer', consumerId, epoch: held?.epoch ?? 0 })
    this.options.mirror.push(sessionId, { kind: 'consumer', consumerId, keep })
  }

  async writeJournal(sessionId: string, entries: HistoryEntry[], control: PersistedControl | undefined) {
    const epoch = this.held.get(sessionId)?.epoch ?? 0
    await this.journal.append(sessionId, { kind: 'batch', entries, ...(control ? { control } : {}), epoch })
    this.options.mirror.push(sessionId, { kind: 'journal', entries, control })
  }

  async writeCheckpoint(sessionId: string, write: CheckpointWrite, fence: Fence): Promise<boolean> {
    const held = this.held.get(sessionId)
    if (!held) return false
    const behind = !this.options.mirror.caughtUp(sessionId)
    try {
      await this.journal.checkpoint(sessionId, { kind: 'checkpoint', session: metaOf(held), write, epoch: held.epoch, ...(behind ? { behind } : {}) })
    } catch (error) {
      if (error instanceof JournalFenced) return false
      throw error
    }
    held.seedless = false
    this.options.mirror.push(sessionId, { kind: 'checkpoint', write, fence })
    return true
  }

  // Event ids are numbered from the JetStream event log in a cluster: these are not asked for.
  reserveEventIds(sessionId: string, bound: number) {
    return this.options.mongo.reserveEventIds(sessionId, bound)
  }

  releaseEventIds(sessionId: string, lastSeq: number) {
    return this.options.mongo.releaseEventIds(sessionId, lastSeq)
  }

  /** Takes the session over: its journal gets this node's owner mark, and it is read for the restore that follows. */
  async takeFence(sessionId: string, token: number): Promise<boolean> {
    const read = await this.journal.takeOver(sessionId, token)
    const restored = restoredOf(read)
    if (restored === 'closed') {
      this.journal.release(sessionId)
      return false
    }
    if (restored) {
      this.keep(sessionId, restored, token, false)
      this.copyToMongo(sessionId, restored, token)
      return true
    }
    // A session the journal does not know: kept by MongoDB alone (an earlier version wrote it).
    if (!(await this.options.mongo.takeFence(sessionId, token))) {
      this.journal.release(sessionId)
      return false
    }
    const persisted = await this.options.mongo.load(sessionId)
    if (!persisted) return false
    const entries = await this.options.mongo.entriesAfter(sessionId, persisted.checkpoint.logPosition)
    this.keep(sessionId, { persisted, entries }, token, true)
    return true
  }

  async load(sessionId: string): Promise<PersistedSession | null> {
    const taken = this.restored.get(sessionId)
    if (taken) return taken.persisted
    // A wake from hibernation on the node that holds it.
    const restored = restoredOf(await this.journal.read(sessionId))
    if (restored === 'closed') return null
    if (!restored) return this.options.mongo.load(sessionId)
    this.keep(sessionId, restored, this.held.get(sessionId)?.epoch ?? 0, false)
    return restored.persisted
  }

  /**
   * A restore's entries come from the read that loaded it. A history page: from MongoDB once it
   * holds everything the session wrote, else from the journal.
   */
  async entriesAfter(sessionId: string, after: number, limit?: number): Promise<HistoryEntry[]> {
    const restored = this.restored.get(sessionId)
    if (restored && limit === undefined) {
      this.restored.delete(sessionId)
      return restored.entries.filter(entry => entry.seq > after)
    }
    if (this.options.mirror.caughtUp(sessionId)) return this.options.mongo.entriesAfter(sessionId, after, limit)
    const entries = entriesOf((await this.journal.readAll(sessionId)).records, after)
    return limit === undefined ? entries : entries.slice(0, limit)
  }

  closeReason(sessionId: string, accountId: string) {
    return this.options.mongo.closeReason(sessionId, accountId)
  }

  async markDestroyed(sessionId: string, close: { reason: string; at: number; idleDeadline?: number }): Promise<boolean> {
    const held = this.held.get(sessionId)
    if (held && this.journal.holds(sessionId)) {
      try {
        await this.journal.append(sessionId, { kind: 'closed', reason: close.reason, epoch: held.epoch })
      } catch (error) {
        if (error instanceof JournalFenced) return false
        throw error
      }
    }
    // Waited for: whoever turns the document into a tombstone frees the crew slot, once.
    return this.options.mirror.run1(sessionId, { kind: 'destroy', close })
  }

  /** Behind, as the rest: the tombstone is written, nothing reads the history of a live session any more. */
  async deleteLog(sessionId: string) {
    this.options.mirror.push(sessionId, { kind: 'deleteLog' })
    this.journal.remove(sessionId).catch(error => this.options.logger.warn('session journal not purged (it ages out)', { sessionId, error }))
  }

  released(sessionId: string) {
    this.held.delete(sessionId)
    this.restored.delete(sessionId)
    this.journal.release(sessionId)
    this.options.mirror.forget(sessionId)
  }

  checkpointWanted(sessionId: string): boolean {
    return this.held.get(sessionId)?.seedless ?? false
  }

  /**
   * A node taking a session over writes behind what its previous owner may not have got into
   * MongoDB (it died with writes queued, or MongoDB was away): the document (from the checkpoint
   * record, if it was never inserted), this node's fence, the entries after the checkpoint and
   * the checkpoint itself; all of the log when the checkpoint says MongoDB was behind then.
   * Every one of these writes is idempotent.
   */
  private copyToMongo(sessionId: string, restored: Restored, token: number) {
    const { mirror } = this.options
    const { persisted, entries, checkpoint } = restored
    if (!checkpoint) return
    const { write, session } = checkpoint
    mirror.push(sessionId, {
      kind: 'insert',
      session: {
        sessionId,
        accountId: session.accountId,
        crewId: session.crewId,
        agentId: write.agentId,
        consumerId: session.consumers[0] ?? 'unknown',
        at: session.createdAt,
        checkpoint: write.checkpoint,
        logPosition: write.logPosition,
        idleDeadline: write.deadlines.idle,
        eventSeq: write.eventSeq,
      },
      fence: token,
    })
    mirror.push(sessionId, { kind: 'fence', token })
    for (const consumerId of persisted.consumers.slice(1)) mirror.push(sessionId, { kind: 'consumer', consumerId, keep: persisted.consumers.length })
    if (entries.length) mirror.push(sessionId, { kind: 'journal', entries, control: persisted.control?.control })
    mirror.push(sessionId, { kind: 'checkpoint', write, fence: token })
    if (!checkpoint.behind) return
    void this.journal
      .readAll(sessionId)
      .then(read => {
        const all = entriesOf(read.records, 0)
        if (all.length) mirror.push(sessionId, { kind: 'journal', entries: all, control: undefined })
      })
      .catch(error => this.options.logger.warn('session history not copied to MongoDB after a takeover (its journal keeps it)', { sessionId, error }))
  }

  private keep(sessionId: string, restored: Restored, epoch: number, seedless: boolean) {
    const { persisted } = restored
    this.restored.set(sessionId, restored)
    this.held.set(sessionId, { accountId: persisted.accountId, crewId: persisted.crewId, consumers: persisted.consumers, createdAt: persisted.checkpoint.createdAt, epoch, seedless })
  }
}

const metaOf = (held: Held): JournalSessionMeta => ({ accountId: held.accountId, crewId: held.crewId, consumers: held.consumers, createdAt: held.createdAt })

/** The history entries of a log's batches with seq > after, each once, in order. */
export function entriesOf(records: JournalRead['records'], after: number): HistoryEntry[] {
  const entries: HistoryEntry[] = []
  let last = after
  for (const { record } of records) {
    if (record.kind !== 'batch') continue
    for (const entry of record.entries) {
      // A batch stored again after an append whose answer was lost repeats entries: once each.
      if (entry.seq <= last) continue
      entries.push(entry)
      last = entry.seq
    }
  }
  return entries
}

/** The session as its journal holds it: null when the journal has no checkpoint of it, 'closed' once it ended. */
function restoredOf(read: JournalRead): Restored | 'closed' | null {
  const { records } = read
  if (records.some(r => r.record.kind === 'closed')) return 'closed'
  let at = -1
  for (let i = records.length - 1; i >= 0; i--) {
    if (records[i]!.record.kind === 'checkpoint') {
      at = i
      break
    }
  }
  if (at < 0) return null
  const checkpoint = records[at]!.record as CheckpointRecord
  const { write, session } = checkpoint
  const stored = JSON.parse(write.checkpoint)
  if (!stored) return null // the opening could not be encoded: MongoDB's document is what there is
  const consumers = [...session.consumers]
  let control: PersistedSession['control'] = null
  for (const { record } of records) {
    if (record.kind === 'consumer' && !consumers.includes(record.consumerId)) consumers.push(record.consumerId)
    if (record.kind === 'batch' && record.control && record.entries.length) control = { seq: record.entries.at(-1)!.seq, control: record.control }
  }
  return {
    persisted: {
      accountId: session.accountId,
      crewId: session.crewId,
      consumers,
      eventSeq: write.eventSeq,
      eventSeqBound: 0,
      checkpoint: checkpointOf(stored, write.logPosition, new Date(session.createdAt)),
      control,
    },
    entries: entriesOf(records, write.logPosition),
    checkpoint,
  }
}
