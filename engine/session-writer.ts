// Write-behind of live sessions: history entries, then the snapshot that points past them (only
// between turns: a streamed reply costs one snapshot write, not one per step), and the report
// record through a RecordWriter. Off the turn's path and batched: a change only marks its
// session dirty; one WriteBehind per host flushes dirty sessions a batch per macrotask (one
// insert for the log entries of the whole batch), yielding between batches so streams and
// turns are served first. Over NATS, writing stops for good once another node may own the
// session.
//
// A write that keeps failing is not retried forever: a store error is retried with back-off a
// few times, an entry or snapshot that cannot be encoded is not retried at all; then the
// session is marked unpersisted (logged once, counted, shown by /healthz) and its writer waits
// for the session's next change to try once more (a success clears the mark).
import type { Logger } from '../platform/logger.js'
import type { Metrics } from '../platform/metrics.js'
import type { RecordWriter } from './record-writer.js'
import type { LogDoc, SessionStore, SnapshotWrite } from './session-store.js'
import type { HistoryEntry } from './types.js'

/** What the writer asks the actor host about the session it writes. */
export interface WrittenSession {
  readonly id: string
  /** Ended or let go on this node: pending history is still written, the snapshot no more. */
  finished(): boolean
  /** The snapshot to write now; undefined while a reply streams (see turnEnded). Throws when it cannot be encoded. */
  snapshot(): SnapshotWrite | undefined
  /** This node's fencing token for the session (undefined: none, or one process). */
  fence(): number | undefined
  /** Another node may own the session now: the host lets it go without touching the store. */
  lost(why: string): void
}

export interface WriteBehindOptions {
  store: SessionStore
  logger: Logger
  metrics: Metrics
  /** Engine nodes over NATS: writes need the session's lease and are fenced by its token. */
  fenced: boolean
  /** The host is stopping: a failed write is not retried. */
  stopping(): boolean
  /** Sessions flushed per macrotask (default 64). */
  batch?: number
  /** Attempts of a write the store refuses before the session is marked unpersisted (ENGINE_PERSIST_MAX_FAILURES). */
  maxAttempts?: number
  /** First back-off after a failed write, doubled on each further failure (default 250 ms). */
  retryMs?: number
}

/** History entries held for a session whose writes fail; beyond this the oldest are dropped (and counted). */
const MAX_PENDING_ENTRIES = 2000

/** Thrown by encoding (an entry or snapshot that is not serialisable): retrying cannot help. */
class EncodingError extends Error {
  override name = 'EncodingError'
}

/** One host's write-behind: the sessions with something to write, flushed in batches. */
export class WriteBehind {
  private readonly dirty = new Set<SessionWriter>()
  private running: Promise<void> | null = null
  private readonly unpersisted = new Map<string, string>()
  readonly batch: number
  readonly maxAttempts: number
  readonly retryMs: number

  constructor(readonly options: WriteBehindOptions) {
    this.batch = options.batch ?? 64
    this.maxAttempts = options.maxAttempts ?? 8
    this.retryMs = options.retryMs ?? 250
  }

  /** A writer for one live session. */
  writer(session: WrittenSession, records: RecordWriter): SessionWriter {
    return new SessionWriter(session, records, this)
  }

  /** Sessions whose writes failed and were given up on (until a later write succeeds). */
  unpersistedSessions(): { count: number; sessions: string[] } {
    return { count: this.unpersisted.size, sessions: [...this.unpersisted.keys()].slice(0, 20) }
  }

  /** @internal */
  mark(writer: SessionWriter) {
    this.dirty.add(writer)
    if (!this.running) this.running = this.run().finally(() => (this.running = null))
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
      await new Promise(resolve => setImmediate(resolve))
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
   * One batch: every writer's log entries in one insert, then each snapshot (fenced writes are per
   * session). The next batch starts once the insert is committed: a slow snapshot write of one
   * session does not hold the history writes (and so the acknowledgements) of every other.
   */
  private async flush(writers: SessionWriter[]) {
    const { store, fenced } = this.options
    const taken: { writer: SessionWriter; entries: HistoryEntry[]; upTo: number; docs: LogDoc[] }[] = []
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
      try {
        taken.push({ writer, entries, upTo, docs: encode(() => store.logDocs(session.id, entries)) })
      } catch (error) {
        writer.failed(entries, error)
      }
    }
    const docs = taken.flatMap(t => t.docs)
    let logError: unknown = null
    if (docs.length) {
      try {
        await store.insertLogDocs(docs)
      } catch (error) {
        logError = error
      }
    }
    // The entries are committed: a message waiting for its own entry is acknowledged now, not
    // after the snapshot and report writes that follow.
    if (!logError) for (const { writer } of taken) writer.logged()
    // Not awaited: each writer's failures are handled in it (failed() retries or gives up).
    void Promise.all(
      taken.map(async ({ writer, entries, upTo }) => {
        if (logError && entries.length) return writer.failed(entries, logError)
        try {
          // A snapshot of this session still being written by an earlier batch: this change is
          // taken up again once that write is done (one snapshot write per session at a time).
          if ((await writer.writeSnapshot()) === 'busy') return
          writer.succeeded(upTo)
        } catch (error) {
          writer.failed([], error)
        }
      }),
    )
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
  /** A snapshot write waits for the reply in progress to finish (snapshots are per turn). */
  private snapshotDue = false
  private snapshotWanted = false
  /** Changes asked for / changes written (or given up on): flushed() waits for the latter to catch up. */
  private asked = 0
  private done = 0
  private waiters: { upTo: number; resolve: () => void }[] = []
  /** A snapshot write of this session is in flight; a batch meanwhile leaves the next one for later. */
  private snapshotWriting = false
  private rescheduleAfterSnapshot = false
  /** Entries taken by the batch being written (their insert not yet committed). */
  private taken: HistoryEntry[] = []
  /** entriesWritten() callers, by the history seq they wait for. */
  private seqWaiters: { seq: number; resolve: () => void }[] = []
  /** The changes (asked) the stored document already holds: the session's insert carried its snapshot. */
  private storedUpTo = -1
  private attempts = 0
  private retry: NodeJS.Timeout | null = null
  private givenUp = false

  constructor(
    readonly session: WrittenSession,
    readonly records: RecordWriter,
    private readonly owner: WriteBehind,
  ) {}

  /** Takes the session's next history entry. */
  append(entry: HistoryEntry) {
    this.pending.push(entry)
    if (this.pending.length > MAX_PENDING_ENTRIES) this.pending.splice(0, this.pending.length - MAX_PENDING_ENTRIES)
    this.records.note(entry)
    this.schedule()
  }

  /** Writes what is pending and the snapshot, soon. */
  schedule() {
    this.asked++
    this.snapshotWanted = true
    if (this.retry) return // a back-off is running: the retry takes this change too
    this.owner.mark(this)
  }

  /**
   * The store already holds the snapshot as of every change asked for so far (the new session's
   * document was inserted with it): the next batch writes the entries, and the snapshot only if
   * the session changed since.
   */
  snapshotStored() {
    this.storedUpTo = this.asked
  }

  /** The session is between turns again: a snapshot skipped during the reply is written now. */
  turnEnded() {
    if (!this.snapshotDue) return
    this.snapshotDue = false
    this.schedule()
  }

  /** Forgets what is not written yet (the session is owned elsewhere). */
  discard() {
    this.pending = []
    this.taken = []
    this.wakeSeqWaiters(true)
    this.snapshotWanted = false
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
   * for: the snapshot and the report record that follow it are not needed to replay it.
   */
  entriesWritten(seq: number): Promise<void> {
    if (!this.unwrittenUpTo(seq)) return Promise.resolve()
    return new Promise(resolve => this.seqWaiters.push({ seq, resolve }))
  }

  private unwrittenUpTo(seq: number): boolean {
    return this.pending.some(entry => entry.seq <= seq) || this.taken.some(entry => entry.seq <= seq)
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

  /** Nothing to write, nothing being written: what the session is now is in the store. */
  quiet(): boolean {
    return this.pending.length === 0 && !this.snapshotWanted && !this.snapshotDue && !this.retry && !this.givenUp && this.done >= this.asked
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
    return this.pending.some(entry => entry.seq <= seq)
  }

  /** @internal the entries a batch writes now, and the changes asked for so far (what its success settles). */
  takeEntries(): { entries: HistoryEntry[]; upTo: number } {
    this.taken = this.pending.splice(0)
    return { entries: this.taken, upTo: this.asked }
  }

  /** @internal the entries taken by this batch are committed. */
  logged() {
    this.taken = []
    this.wakeSeqWaiters()
  }

  /**
   * @internal writes the snapshot if one is wanted now (log entries are already written); 'busy'
   * when an earlier batch is still writing one (this change is scheduled again when it is done).
   */
  async writeSnapshot(): Promise<'written' | 'skipped' | 'busy'> {
    const { session } = this
    if (this.snapshotWriting) {
      this.rescheduleAfterSnapshot = true
      return 'busy'
    }
    if (!this.snapshotWanted || session.finished()) return 'skipped'
    if (this.storedUpTo === this.asked) {
      // Nothing changed since the insert. Any change since, even one whose entries a later batch
      // takes, moved `asked`, and the snapshot below then includes it. The record's counters still go now.
      this.snapshotWanted = false
      this.records.flushCounts()
      return 'written'
    }
    const snapshot = encode(() => session.snapshot())
    if (!snapshot) {
      this.snapshotDue = true
      return 'skipped'
    }
    this.snapshotWanted = false
    // The record's counters go with the snapshot: one write per turn.
    this.records.flushCounts()
    this.snapshotWriting = true
    try {
      const written = await this.owner.options.store.writeSnapshot(session.id, snapshot, session.fence())
      if (this.owner.options.fenced && !written && !session.finished()) session.lost('fenced: another node took the session over')
      return 'written'
    } finally {
      this.snapshotWriting = false
    }
  }

  /** A change that came while a snapshot was being written is taken up now, unless a retry's back-off will. */
  private resumeAfterSnapshot() {
    if (!this.rescheduleAfterSnapshot || this.retry) return
    this.rescheduleAfterSnapshot = false
    this.owner.mark(this)
  }

  /**
   * @internal the batch that took the changes up to `upTo` is written. Its own bound, not the
   * latest batch's: a later batch may have taken newer entries whose insert is not committed yet
   * (a history read waiting for them would otherwise read the log without them).
   */
  succeeded(upTo: number) {
    this.attempts = 0
    if (this.givenUp) {
      this.givenUp = false
      this.owner.cleared(this, true)
    }
    this.settle(upTo)
    this.resumeAfterSnapshot()
  }

  /** @internal the entries go back in front; retried with back-off, or given up on. */
  failed(entries: HistoryEntry[], error: unknown) {
    if (entries.length) this.pending.unshift(...entries)
    // A failed snapshot (no entries) leaves alone the entries a later batch may have taken since.
    if (entries === this.taken) this.taken = []
    if (this.pending.length > MAX_PENDING_ENTRIES) this.pending.splice(0, this.pending.length - MAX_PENDING_ENTRIES)
    this.snapshotWanted = true
    this.attempts++
    const { maxAttempts, retryMs, options } = this.owner
    options.metrics.sessionPersistenceFailures.inc()
    if (error instanceof EncodingError || this.attempts >= maxAttempts || this.givenUp || options.stopping()) {
      // Not retried: the next change of the session tries once more.
      this.owner.gaveUp(this, error, this.attempts)
      this.givenUp = true
      this.wakeSeqWaiters(true)
      this.settle()
      this.resumeAfterSnapshot()
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
    this.owner.cleared(this, false)
  }
}
