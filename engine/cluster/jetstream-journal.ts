// A session's durable journal in a cluster: the JetStream stream SB_SESSION_JOURNAL, one subject
// per session (`sb.journal.<id>.log`). It is the one write a turn waits for: a user message is
// acknowledged once the batch holding its entry is stored (with the stream's replicas, R3 in
// production), and a restore on any node reads it back. MongoDB follows behind
// (engine/cluster/journaled-session-store.ts), off the turn's path.
//
// A session's log: a `checkpoint` record (the opening, then one every few dozen entries: what a
// restore starts from), `batch` records (history entries and the machine's control state as of
// the last of them), `consumer` records (a consumer id joined), `owner` marks (a node took the
// session over) and at last `closed`. Where the latest checkpoint record is goes to a second
// subject (`sb.journal.<id>.cp`), so a restore reads only the log after it.
//
// Fencing: every record is published with `Nats-Expected-Last-Subject-Sequence` = the last
// record this node stored or read on the subject. A node taking the session over appends an
// owner mark the same way; from then on the previous owner's appends are refused
// (JournalFenced) and it lets the session go. Appends of one session are chained, one at a time.
import type { NatsConnection } from '@nats-io/transport-node'
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  jetstream,
  jetstreamManager,
  StorageType,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream'
import { isWrongLastSequence, nanos, openStream } from './jetstream-streams.js'
import { NatsRequests } from '../../platform/bus/nats-requests.js'
import { Unavailable } from '../../platform/errors.js'
import type { Logger } from '../../platform/logger.js'
import type { Wire } from '../../platform/wire.js'
import type { PersistedControl } from '../session/machine.js'
import { WritesFenced, type CheckpointWrite } from '../persistence/session-store.js'
import type { HistoryEntry } from '../types.js'

export const JOURNAL_STREAM = 'SB_SESSION_JOURNAL'
export const journalSubject = (sessionId: string) => `sb.journal.${sessionId}.log`
export const pointerSubject = (sessionId: string) => `sb.journal.${sessionId}.cp`

/** What a checkpoint record says of the session beside its state (what the document held). */
export interface JournalSessionMeta {
  accountId: string
  crewId: string
  consumers: string[]
  createdAt: number
}

export type JournalRecord =
  /** `behind`: MongoDB lacked some of the session's writes when it was taken (a new owner copies the whole log). */
  | { kind: 'checkpoint'; session: JournalSessionMeta; write: CheckpointWrite; epoch: number; behind?: boolean }
  | { kind: 'batch'; entries: HistoryEntry[]; control?: PersistedControl; epoch: number }
  | { kind: 'consumer'; consumerId: string; epoch: number }
  | { kind: 'owner'; epoch: number }
  | { kind: 'closed'; reason: string; epoch: number }

/** A record as read back, with its stream sequence. */
export interface StoredRecord {
  seq: number
  record: JournalRecord
}

/** A session's log from (at most a few records before) its latest checkpoint record on. */
export interface JournalRead {
  /** Stream sequence of the subject's last record (0: none). */
  lastSeq: number
  /** In log order; the latest checkpoint among them is where a restore starts. */
  records: StoredRecord[]
}

/** Another node appended to the session's log: this node no longer owns it. */
export class JournalFenced extends WritesFenced {
  override name = 'JournalFenced'
}

export interface JetStreamJournalOptions {
  replicas: number
  /** How long records are kept (ENGINE_JOURNAL_RETENTION_MS): longer than a session can stay quiet. */
  retentionMs: number
  logger: Logger
  wire: Wire
  /** Attempts of one append whose acknowledgement did not come (a timeout, a reconnect). */
  attempts?: number
}

/** This node's place in one session's log. */
interface Tail {
  /** Stream sequence of the last record stored or read (what the next append expects). */
  last: number
  /** The epoch this node appends with. */
  epoch: number
  /** Appends of the session, one after the other. */
  chain: Promise<unknown>
  /** An append gave up without knowing whether it was stored: the next one reads the subject's end first. */
  uncertain: boolean
  /** The last batches stored: [seq of their last history entry, stream sequence]. */
  batches: [number, number][]
}

/** Batches remembered per session: a checkpoint is taken a few batches after the entries it covers at most. */
const REMEMBERED_BATCHES = 32
/** How long an append waits for the stream's acknowledgement (what js.publish waits by default). */
const APPEND_TIMEOUT_MS = 5_000
const newTail = (last: number, epoch: number): Tail => ({ last, epoch, chain: Promise.resolve(), uncertain: false, batches: [] })

export class JetStreamJournal {
  private readonly tails = new Map<string, Tail>()
  private readonly attempts: number
  private readonly requests: NatsRequests

  private constructor(
    nc: NatsConnection,
    private readonly jsm: JetStreamManager,
    private readonly js: JetStreamClient,
    private readonly options: JetStreamJournalOptions,
  ) {
    this.attempts = options.attempts ?? 3
    this.requests = NatsRequests.of(nc)
  }

  /** Opens (creating it when missing) the stream; an existing one is used as it is. */
  static async open(nc: NatsConnection, options: JetStreamJournalOptions): Promise<JetStreamJournal> {
    const jsm = await jetstreamManager(nc)
    await openStream(jsm, {
      name: JOURNAL_STREAM,
      subjects: ['sb.journal.*.log', 'sb.journal.*.cp'],
      storage: StorageType.File,
      discard: DiscardPolicy.Old,
      max_age: nanos(options.retentionMs),
      duplicate_window: nanos(2 * 60_000),
      num_replicas: options.replicas,
    })
    return new JetStreamJournal(nc, jsm, jetstream(nc), options)
  }

  /** A new session's log starts here (nothing may be on its subject yet). */
  begin(sessionId: string, epoch: number) {
    this.tails.set(sessionId, newTail(0, epoch))
  }

  /** Whether this node appends to the session's log. */
  holds(sessionId: string): boolean {
    return this.tails.has(sessionId)
  }

  /**
   * Appends after the last record this node knows of; answers the record's stream sequence.
   * JournalFenced: another node appended since (it owns the session now).
   */
  append(sessionId: string, record: JournalRecord): Promise<number> {
    const tail = this.tails.get(sessionId)
    if (!tail) return Promise.reject(new JournalFenced(`session ${sessionId} is not held by this node`))
    const appended = tail.chain.then(() => this.store(sessionId, tail, record))
    tail.chain = appended.catch(() => {})
    return appended
  }

  /**
   * Appends a checkpoint record, then points at where a restore reads from: the first batch whose
   * entries it does not cover (a batch stored between the checkpoint's taking and its append), or
   * the record itself. The pointer is a plain publish: without it a restore reads further back.
   */
  checkpoint(sessionId: string, record: Extract<JournalRecord, { kind: 'checkpoint' }>): Promise<number> {
    const tail = this.tails.get(sessionId)
    return this.append(sessionId, record).then(seq => {
      const after = tail?.batches.find(([entry]) => entry > record.write.logPosition)
      const logSeq = after ? Math.min(after[1], seq) : seq
      this.js.publish(pointerSubject(sessionId), this.options.wire.encode({ logSeq, epoch: record.epoch })).catch(error => {
        this.options.logger.warn('journal pointer not stored', { sessionId, error })
      })
      return seq
    })
  }

  private async store(sessionId: string, tail: Tail, record: JournalRecord): Promise<number> {
    if (this.tails.get(sessionId) !== tail) throw new JournalFenced(`session ${sessionId} left this node`)
    if (tail.uncertain) await this.resync(sessionId, tail)
    const data = this.options.wire.encode(record)
    // The same id on every attempt: a retry of a publish that was stored is stored once.
    const msgID = `${sessionId}:${tail.epoch}:${tail.last}`
    for (let attempt = 1; ; attempt++) {
      try {
        const ack = await this.requests.publish(journalSubject(sessionId), data, { msgID, lastSubjectSequence: tail.last, timeoutMs: APPEND_TIMEOUT_MS })
        tail.last = ack.seq
        const lastEntry = record.kind === 'batch' ? record.entries.at(-1) : undefined
        if (lastEntry) {
          tail.batches.push([lastEntry.seq, ack.seq])
          if (tail.batches.length > REMEMBERED_BATCHES) tail.batches.shift()
        }
        return ack.seq
      } catch (error) {
        if (isWrongLastSequence(error)) {
          this.tails.delete(sessionId)
          throw new JournalFenced(`session ${sessionId}: another node appended to its journal`)
        }
        if (attempt >= this.attempts) {
          tail.uncertain = true
          throw error
        }
      }
    }
  }

  /**
   * After an append whose outcome is unknown: the subject's last record tells. Ours (this epoch):
   * it was stored, and the writer's retry carries its entries again (readers skip entries they
   * have). Another epoch's: fenced.
   */
  private async resync(sessionId: string, tail: Tail) {
    const last = await this.jsm.streams.getMessage(JOURNAL_STREAM, { last_by_subj: journalSubject(sessionId) })
    const seq = last?.seq ?? 0
    if (seq !== tail.last) {
      const id = last?.header?.get('Nats-Msg-Id') ?? ''
      if (!id.startsWith(`${sessionId}:${tail.epoch}:`)) {
        this.tails.delete(sessionId)
        throw new JournalFenced(`session ${sessionId}: another node appended to its journal`)
      }
      tail.last = seq
    }
    tail.uncertain = false
  }

  /** The log from where its latest checkpoint points on (this node's place in it is not changed). */
  async read(sessionId: string): Promise<JournalRead> {
    const pointer = await this.pointer(sessionId)
    const read = await this.readFrom(sessionId, pointer)
    // The pointer's record aged out or is missing: from the start of what is kept.
    if (pointer > 1 && !read.records.some(r => r.record.kind === 'checkpoint')) return this.readFrom(sessionId, 1)
    return read
  }

  /** The whole log as kept (a history read while MongoDB's copy is behind). */
  readAll(sessionId: string): Promise<JournalRead> {
    return this.readFrom(sessionId, 1)
  }

  /**
   * A node taking the session over (restore after a failover, a drain, a wake elsewhere): reads
   * the log and appends its owner mark right after what it read, so the previous owner's next
   * append is refused. Its own appends follow the mark.
   */
  async takeOver(sessionId: string, epoch: number): Promise<JournalRead> {
    for (let attempt = 0; ; attempt++) {
      const read = await this.read(sessionId)
      try {
        const ack = await this.js.publish(journalSubject(sessionId), this.options.wire.encode({ kind: 'owner', epoch }), {
          msgID: `${sessionId}:${epoch}:owner:${read.lastSeq}`,
          expect: { lastSubjectSequence: read.lastSeq },
        })
        this.tails.set(sessionId, newTail(ack.seq, epoch))
        return read
      } catch (error) {
        // A late append of the previous owner landed after the read: read again.
        if (attempt >= 5 || !isWrongLastSequence(error)) throw error
      }
    }
  }

  /** The session left this node: its place in the log is forgotten. */
  release(sessionId: string) {
    this.tails.delete(sessionId)
  }

  /** The session ended and MongoDB holds its close: its records go. */
  async remove(sessionId: string) {
    this.tails.delete(sessionId)
    await this.jsm.streams.purge(JOURNAL_STREAM, { filter: journalSubject(sessionId) })
    await this.jsm.streams.purge(JOURNAL_STREAM, { filter: pointerSubject(sessionId) })
  }

  private async pointer(sessionId: string): Promise<number> {
    const message = await this.jsm.streams.getMessage(JOURNAL_STREAM, { last_by_subj: pointerSubject(sessionId) })
    if (!message) return 1
    const decoded = this.options.wire.decode<{ logSeq: number }>('session.journal.pointer', message.data, { stream: JOURNAL_STREAM, subject: pointerSubject(sessionId) })
    return decoded.ok ? Math.max(1, decoded.message.logSeq) : 1
  }

  private async readFrom(sessionId: string, from: number): Promise<JournalRead> {
    const consumer = await this.jsm.consumers.add(JOURNAL_STREAM, {
      filter_subject: journalSubject(sessionId),
      ack_policy: AckPolicy.None,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: from,
      mem_storage: true,
      num_replicas: 1,
      inactive_threshold: nanos(30_000), // removed by the server if this reader dies mid-read
    })
    const read: JournalRead = { lastSeq: 0, records: [] }
    try {
      if (consumer.num_pending === 0) {
        read.lastSeq = (await this.jsm.streams.getMessage(JOURNAL_STREAM, { last_by_subj: journalSubject(sessionId) }))?.seq ?? 0
        return read
      }
      const messages = await (await this.js.consumers.get(JOURNAL_STREAM, consumer.name)).fetch({ max_messages: consumer.num_pending, expires: 5_000 })
      for await (const msg of messages) {
        read.lastSeq = msg.seq
        const decoded = this.options.wire.decode<JournalRecord>('session.journal', msg.data, { stream: JOURNAL_STREAM, subject: msg.subject })
        // A record this build cannot read stops the restore: a session rebuilt without it would be wrong.
        if (!decoded.ok) throw new Unavailable('WIRE_REFUSED', `The journal of session ${sessionId} holds a record this process cannot read (see its log)`, {}, { retryAfterSeconds: 1 })
        read.records.push({ seq: msg.seq, record: decoded.message })
        if (msg.info.pending === 0) break
      }
      return read
    } finally {
      this.jsm.consumers.delete(JOURNAL_STREAM, consumer.name).catch(() => {})
    }
  }
}

