// Write-behind of live sessions: off the turn's path and batched. A change only marks its
// session dirty; one WriteBehind per host flushes dirty sessions a batch per macrotask, yielding
// first so streams and turns are served before persistence.
//
// What a batch writes per session:
//   - its new history entries and its control state, in one journal commit (session-store.ts):
//     a turn's durable cost. A user message is acknowledged once its entry is committed;
//   - its checkpoint (control and conversation, session-store.ts), every `entries` entries or
//     when asked (hibernation, hand-over, stop): a restore folds the journal's entries after
//     it, so what is not in it yet is not lost, and the fold stays short;
//   - its report record's counts and last message, `countsMs` after the first entry they do not
//     cover (or with a checkpoint): the listing lags the conversation by that much at most, and a
//     session taking many turns a second costs one record write per window, not one per turn.
// Over NATS, writing stops for good once another node may own the session.
//
// A write that keeps failing is not retried forever: a store error is retried with back-off a
// few times, an entry or state that cannot be encoded is not retried at all; then the session
// is marked unpersisted (logged once, counted, shown by /healthz) and its writer waits for the
// session's next change to try once more (a success clears the mark).
import type { Logger } from '../../platform/logger.js'
import type { Metrics } from '../../platform/metrics.js'
import type { PersistedControl } from '../session/machine.js'
import type { RecordWriter } from './record-writer.js'
import { WritesFenced, type CheckpointWrite, type SessionRepository } from './session-store.js'
import type { HistoryEntry } from '../types.js'

/** What the writer asks the actor host about the session it writes. */
export interface WrittenSession {
  readonly id: string
  /** Ended or let go on this node: pending history is still written, the checkpoint no more. */
  finished(): boolean
  /** The control state as of the last entry appended (undefined: no actor, hibernated). */
  control(): PersistedControl | undefined
  /** The checkpoint to write now (undefined: none can be taken, hibernated). Throws when it cannot be encoded. */
  checkpoint(): CheckpointWrite | undefined
  /** This node's fencing token for the session (undefined: none, or one process). */
  fence(): number | undefined
  /** Another node may own the session now: the host lets it go without touching the store. */
  lost(why: string): void
}

export interface CheckpointPolicy {
  /** Entries after which a checkpoint is due (ENGINE_CHECKPOINT_ENTRIES). */
  entries: number
  /** How long after the first entry the report record does not cover its counts are written (ENGINE_RECORD_FLUSH_MS; 0: with each batch). */
  countsMs: number
}

export const DEFAULT_CHECKPOINTS: CheckpointPolicy = { entries: 60, countsMs: 5_000 }

export interface WriteBehindOptions {
  store: Pick<SessionRepository, 'writeJournal' | 'writeCheckpoint'>
  logger: Logger
  metrics: Metrics
  now: () => number
  /** Engine nodes over NATS: writes need the session's lease and are fenced by its token. */
  fenced: boolean
  /** The host is stopping: a failed write is not retried. */
  stopping(): boolean
  checkpoints?: CheckpointPolicy
  /** Sessions flushed per macrotask (default 64). */
  batch?: number
  /** Attempts of a write the store refuses before the session is marked unpersisted (ENGINE_PERSIST_MAX_FAILURES). */
  maxAttempts?: number
  /** First back-off after a failed write, doubled on each further failure (default 250 ms). */
  retryMs?: number
  /**
   * How long a batch waits for more sessions' changes before it is written (ENGINE_WRITE_WINDOW_MS;
   * 0: the next macrotask; 2 by default). Fewer, larger commits: each costs the store a flush to disk.
   */
  windowMs?: number
}

/** History entries held for a session whose writes fail; beyond this the oldest are dropped (and counted). */
const MAX_PENDING_ENTRIES = 2000

/** Thrown by encoding (an entry or state that is not serialisable): retrying cannot help. */
class EncodingError extends Error {
  override name = 'EncodingError'
}

/** One host's write-behind: the sessions with something to write, flushed in batches. */
export class WriteBehind {
  private readonly dirty = new Set<SessionWriter>()
  private running: Promise<void> | null = null
  private readonly unpersisted = new Map<string, string>()
  /** Sessions with entries their report record does not count yet: looked at by the counts clock. */
  readonly behind = new Set<SessionWriter>()
  private clock: NodeJS.Timeout | null = null
  readonly batch: number
  readonly maxAttempts: number
  readonly retryMs: number
  readonly checkpoints: CheckpointPolicy

  constructor(readonly options: WriteBehindOptions) {
    this.batch = options.batch ?? 64
    this.maxAttempts = options.maxAttempts ?? 8
    this.retryMs = options.retryMs ?? 250
    this.checkpoints = options.checkpoints ?? DEFAULT_CHECKPOINTS
  }

  /** A writer for one live session; `position`: the history seq its stored checkpoint covers. */
  writer(session: WrittenSession, records: RecordWriter, position: number): SessionWriter {
    return new SessionWriter(session, records, this, position)
  }

  /** Writes the report counts that came due in sessions with no batch since. */
  start() {
    if (this.clock || this.checkpoints.countsMs <= 0) return
    this.clock = setInterval(() => {
      const now = this.options.now()
      // A session whose writes were given up on tries again with its next change, not on this clock.
      for (const writer of this.behind) if (!writer.unpersisted && writer.countsDue(now)) writer.schedule()
    }, Math.max(50, this.checkpoints.countsMs / 2))
    this.clock.unref()
  }

  stop() {
    if (this.clock) clearInterval(this.clock)
    this.clock = null
  }

  /** Sessions whose writes failed and were given up on (until a later write succeeds). */
  unpersistedSessions(): { count: number; sessions: string[] } {
    return { count: this.unpersisted.size, sessions: [...this.unpersisted.keys()].slice(0, 20) }
  }

  /** @internal */
  mark(writer: SessionWriter) {
    this.dirty.add(writer)
    if (!this.running) this.kick()
  }

  private kick() {
    this.running = this.run().finally(() => {
      this.running = null
      // Marked after the run's last look at the set (its checkpoints settle after its journal writes).
      if (this.dirty.size > 0) this.kick()
    })
  }

  /** @internal the session's writes are given up on: said once, counted, shown by /healthz. */
  gaveUp(writer: SessionWriter, error: unknown, attempts: number) {
    if (this.unpersisted.has(writer.session.id)) return
    this.unpersisted.set(writer.session.id, error instanceof Error ? error.message : String(error))
    this.options.metrics.sessionsPersistenceStopped.set(this.unpersisted.size)
    this.options.logger.error('session persistence failed; the session goes on but is not persisted (retried on its next change)', {
      sessionId: writer.session.id,
      attempts,
      error,
    })
  }

  /** @internal a write succeeded again, or the session is gone. */
  cleared(writer: SessionWriter, recovered: boolean) {
    if (!this.unpersisted.delete(writer.session.id)) return
    this.options.metrics.sessionsPersistenceStopped.set(this.unpersisted.size)
    if (recovered) this.options.logger.info('session persisted again', { sessionId: writer.session.id })
  }

  private async run() {
    while (this.dirty.size > 0) {
      // Yield first: the turn that made the change, and every stream write, go before its persistence.
      const windowMs = this.options.windowMs ?? 0
      await new Promise(resolve => (windowMs > 0 ? setTimeout(resolve, windowMs) : setImmediate(resolve)))
      const writers: SessionWriter[] = []
      for (const writer of this.dirty) {
        this.dirty.delete(writer)
        writers.push(writer)
        if (writers.length >= this.batch) break
      }
      await this.flush(writers)
    }
  }

  /**
   * One batch: every writer's journal write, all started in this macrotask (lmdb-js commits them
   * in one transaction; each is its own bulk write on MongoDB), then the checkpoints that are due
   * (fenced, per session). The next batch starts once the journal writes are committed: a slow
   * checkpoint of one session does not hold the history writes (and so the acknowledgements)
   * of every other.
   */
  private async flush(writers: SessionWriter[]) {
    const { store, fenced } = this.options
    const journaled: Promise<void>[] = []
    for (const writer of writers) {
      const { session } = writer
      if (fenced && !session.finished() && session.fence() === undefined) {
        // The lease is gone (not renewed in time, or taken over): another node may own the
        // session now, so nothing more is written from here.
        writer.discard()
        session.lost('lease lost')
        writer.settle()
        continue
      }
      const { entries, upTo } = writer.takeEntries()
      const written = entries.length
        ? store.writeJournal(session.id, entries, session.control()).catch(error => {
            // What cannot be encoded is refused before anything is written (TypeError, RangeError).
            throw error instanceof TypeError || error instanceof RangeError ? new EncodingError(`not serialisable: ${error.message}`) : error
          })
        : Promise.resolve()
      journaled.push(
        written.then(
          // Committed: a message waiting for its own entry is acknowledged now, before the checkpoint.
          () => {
            writer.logged()
            void this.afterJournal(writer, upTo)
          },
          error => {
            if (error instanceof WritesFenced) {
              // Another node writes the session now: nothing more from here.
              writer.discard()
              session.lost(error.message)
              writer.settle()
            } else writer.failed(entries, error)
          },
        ),
      )
    }
    await Promise.all(journaled)
  }

  /** The checkpoint, if one is due, then the changes up to `upTo` are settled. */
  private async afterJournal(writer: SessionWriter, upTo: number) {
    try {
      // A checkpoint of this session still being written by an earlier batch: this change is
      // taken up again once that write is done (one checkpoint write per session at a time).
      if ((await writer.writeCheckpoint()) === 'busy') return
      writer.succeeded(upTo)
    } catch (error) {
      writer.failed([], error)
    }
  }
}

function encode<T>(produce: () => T): T {
  try {
    return produce()
  } catch (error) {
    throw new EncodingError(`not serialisable: ${(error as Error).message}`)
  }
}

/** One live session's share of the write-behind. */
export class SessionWriter {
  private pending: HistoryEntry[] = []
  /** Changes asked for / changes written (or given up on): flushed() waits for the latter to catch up. */
  private asked = 0
  private done = 0
  private waiters: { upTo: number; resolve: () => void }[] = []
  /** Entries taken by the batch being written (their commit not yet seen). */
  private taken: HistoryEntry[] = []
  /** entriesWritten() callers, by the history seq they wait for. */
  private seqWaiters: { seq: number; resolve: () => void }[] = []
  private attempts = 0
  /** The first history seq forgotten unwritten by discard() (the session went to another node). */
  private discardedFrom = Number.MAX_SAFE_INTEGER
  private retry: NodeJS.Timeout | null = null
  private givenUp = false
  /** The last history seq appended. */
  private lastSeq: number
  /** The history seq the stored checkpoint covers. */
  private checkpointed: number
  /** Since when the report record lags the history (0: it does not). */
  private countsSince = 0
  /** A checkpoint is asked for regardless of the policy (hibernation, hand-over, stop). */
  private checkpointAsked = false
  private checkpointWriting = false
  private rescheduleAfterCheckpoint = false

  constructor(
    readonly session: WrittenSession,
    readonly records: RecordWriter,
    private readonly owner: WriteBehind,
    position: number,
  ) {
    this.lastSeq = position
    this.checkpointed = position
  }

  /** Takes the session's next history entry (numbered by the caller, in order). */
  append(entry: HistoryEntry) {
    this.pending.push(entry)
    this.lastSeq = entry.seq
    if (this.pending.length > MAX_PENDING_ENTRIES) this.pending.splice(0, this.pending.length - MAX_PENDING_ENTRIES)
    this.records.note(entry)
    if (this.countsSince === 0 && entry.seq > this.checkpointed) {
      this.countsSince = this.owner.options.now()
      this.owner.behind.add(this)
    }
    this.schedule()
  }

  /** Writes what is pending (and the checkpoint when due), soon. */
  schedule() {
    this.asked++
    if (this.retry) return // a back-off is running: the retry takes this change too
    this.owner.mark(this)
  }

  /** A checkpoint is written with the next batch whatever the policy says (hibernation, hand-over, stop). */
  checkpoint() {
    if (this.checkpointed === this.lastSeq && this.countsSince === 0 && !this.givenUp) return
    this.checkpointAsked = true
    this.schedule()
  }

  /** By the policy: enough entries since the checkpoint. */
  checkpointDue(): boolean {
    return this.lastSeq - this.checkpointed >= this.owner.checkpoints.entries
  }

  /** By the policy: the report record has lagged the history long enough. */
  countsDue(now: number): boolean {
    return this.countsSince !== 0 && now - this.countsSince >= this.owner.checkpoints.countsMs
  }

  /** Forgets what is not written yet (the session is owned elsewhere). */
  discard() {
    const first = this.taken[0]?.seq ?? this.pending[0]?.seq
    if (first !== undefined) this.discardedFrom = Math.min(this.discardedFrom, first)
    this.pending = []
    this.taken = []
    this.wakeSeqWaiters(true)
    this.checkpointAsked = false
    this.owner.behind.delete(this)
    if (this.retry) clearTimeout(this.retry)
    this.retry = null
    this.owner.cleared(this, false)
  }

  /** Resolves once everything asked for so far is written (or given up). */
  async flushed() {
    // Also after an earlier give-up: every change since is on its way (schedule() marks it).
    if (this.done < this.asked) {
      const upTo = this.asked
      await new Promise<void>(resolve => this.waiters.push({ upTo, resolve }))
    }
    await this.records.written()
  }

  /**
   * Resolves once the history entries up to `seq` are committed, or given up on (holdsUpTo()
   * then says so), or discarded with the session. What a user message's acknowledgement waits
   * for: the checkpoint and the report record that follow it are not needed to replay it.
   */
  entriesWritten(seq: number): Promise<void> {
    if (!this.unwrittenUpTo(seq)) return Promise.resolve()
    return new Promise(resolve => this.seqWaiters.push({ seq, resolve }))
  }

  private unwrittenUpTo(seq: number): boolean {
    return (this.pending.length > 0 && this.pending[0]!.seq <= seq) || (this.taken.length > 0 && this.taken[0]!.seq <= seq)
  }

  /** Wakes the callers whose entries are written; `all`: every caller (a write was given up on). */
  private wakeSeqWaiters(all = false) {
    if (this.seqWaiters.length === 0) return
    const waiting = this.seqWaiters
    this.seqWaiters = []
    for (const waiter of waiting) {
      if (!all && this.unwrittenUpTo(waiter.seq)) this.seqWaiters.push(waiter)
      else waiter.resolve()
    }
  }

  /** Nothing to write, nothing being written, checkpoint and record current: what the session is now is in the store. */
  quiet(): boolean {
    return this.pending.length === 0 && this.taken.length === 0 && this.checkpointed === this.lastSeq && this.countsSince === 0 && !this.retry && !this.givenUp && this.done >= this.asked
  }

  /** Whether an entry up to `seq` was forgotten unwritten: the session went to another node first. */
  discardedUpTo(seq: number): boolean {
    return this.discardedFrom <= seq
  }

  /** Whether the session's writes were given up on (until a later write succeeds). */
  get unpersisted() {
    return this.givenUp
  }

  /**
   * Whether an entry up to `seq` is still unwritten (held after a failed write). Entries after
   * it (the turn the message started) may be pending and are not its concern.
   */
  holdsUpTo(seq: number): boolean {
    return this.pending.length > 0 && this.pending[0]!.seq <= seq
  }

  /** @internal the entries a batch writes now, and the changes asked for so far (what its success settles). */
  takeEntries(): { entries: HistoryEntry[]; upTo: number } {
    this.taken = this.pending
    this.pending = []
    return { entries: this.taken, upTo: this.asked }
  }

  /** @internal the entries taken by this batch are committed. */
  logged() {
    this.taken = []
    this.wakeSeqWaiters()
  }

  /**
   * @internal after a journal commit: the record's counts and the checkpoint, each if due now;
   * 'busy' when an earlier batch is still writing a checkpoint (this change is scheduled again
   * when it is done).
   */
  async writeCheckpoint(): Promise<'written' | 'skipped' | 'busy'> {
    const { session } = this
    if (this.checkpointWriting) {
      this.rescheduleAfterCheckpoint = true
      return 'busy'
    }
    // Entries not committed yet (appended since, or taken by a later batch): the next batch covers them.
    if (session.finished() || this.pending.length > 0 || this.taken.length > 0) return 'skipped'
    const checkpoint = this.checkpointAsked || this.checkpointDue()
    if (checkpoint || this.countsDue(this.owner.options.now())) {
      // What the record counts is committed: up to the last entry.
      this.records.flushCounts(this.lastSeq)
      this.countsSince = 0
      if (this.checkpointed === this.lastSeq) this.owner.behind.delete(this)
    }
    if (!checkpoint) return 'skipped'
    const write = encode(() => session.checkpoint())
    if (!write) return 'skipped'
    this.checkpointAsked = false
    this.checkpointWriting = true
    try {
      const written = await this.owner.options.store.writeCheckpoint(session.id, write, session.fence())
      if (this.owner.options.fenced && !written && !session.finished()) session.lost('fenced: another node took the session over')
      this.checkpointed = Math.max(this.checkpointed, write.logPosition)
      if (this.checkpointed === this.lastSeq && this.countsSince === 0) this.owner.behind.delete(this)
      return 'written'
    } finally {
      this.checkpointWriting = false
    }
  }

  /** A change that came while a checkpoint was being written is taken up now, unless a retry's back-off will. */
  private resumeAfterCheckpoint() {
    if (!this.rescheduleAfterCheckpoint || this.retry) return
    this.rescheduleAfterCheckpoint = false
    this.owner.mark(this)
  }

  /**
   * @internal the batch that took the changes up to `upTo` is written. Its own bound, not the
   * latest batch's: a later batch may have taken newer entries whose commit is not seen yet
   * (a history read waiting for them would otherwise read the journal without them).
   */
  succeeded(upTo: number) {
    this.attempts = 0
    if (this.givenUp) {
      this.givenUp = false
      this.owner.cleared(this, true)
    }
    this.settle(upTo)
    this.resumeAfterCheckpoint()
  }

  /** @internal the entries go back in front; retried with back-off, or given up on. */
  failed(entries: HistoryEntry[], error: unknown) {
    if (entries.length) this.pending = [...entries, ...this.pending]
    // A failed checkpoint (no entries) leaves alone the entries a later batch may have taken since.
    if (entries === this.taken) this.taken = []
    if (this.pending.length > MAX_PENDING_ENTRIES) this.pending.splice(0, this.pending.length - MAX_PENDING_ENTRIES)
    if (entries.length === 0) this.checkpointAsked = true
    this.attempts++
    const { maxAttempts, retryMs, options } = this.owner
    options.metrics.sessionPersistenceFailures.inc()
    if (error instanceof EncodingError || this.attempts >= maxAttempts || this.givenUp || options.stopping()) {
      // Not retried: the next change of the session tries once more.
      this.owner.gaveUp(this, error, this.attempts)
      this.givenUp = true
      this.wakeSeqWaiters(true)
      this.settle()
      this.resumeAfterCheckpoint()
      return
    }
    options.logger.warn('session write failed; retrying', { sessionId: this.session.id, attempt: this.attempts, error })
    if (this.retry) clearTimeout(this.retry)
    this.retry = setTimeout(() => {
      this.retry = null
      this.owner.mark(this)
    }, retryMs * 2 ** (this.attempts - 1))
    this.retry.unref()
  }

  /** @internal wakes flushed() callers up to `upTo` (default: everything asked so far). */
  settle(upTo = this.asked) {
    this.wakeSeqWaiters()
    this.done = Math.max(this.done, upTo)
    const waiting = this.waiters
    this.waiters = []
    for (const waiter of waiting) {
      if (this.givenUp || waiter.upTo <= this.done) waiter.resolve()
      else this.waiters.push(waiter)
    }
  }

  /** The session ended for good: the unpersisted mark (if any) goes with it. */
  closed() {
    this.owner.behind.delete(this)
    this.owner.cleared(this, false)
  }
}
