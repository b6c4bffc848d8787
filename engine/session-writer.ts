// One live session's write-behind: its history entries are written as they come (a burst
// coalesces into one insert), then the snapshot that points past them, but only between turns
// (a streamed reply costs one snapshot write, not one per step), and its report record through
// a RecordWriter. Over NATS, writing stops for good once another node may own the session.
import type { Logger } from '../platform/logger.js'
import type { RecordWriter } from './record-writer.js'
import type { SessionStore, SnapshotWrite } from './session-store.js'
import type { HistoryEntry } from './types.js'

/** What the writer asks the actor host about the session it writes. */
export interface WrittenSession {
  readonly id: string
  /** Ended or let go on this node: pending history is still written, the snapshot no more. */
  finished(): boolean
  /** The snapshot to write now; undefined while a reply streams (see turnEnded). */
  snapshot(): SnapshotWrite | undefined
  /** This node's fencing token for the session (undefined: none, or one process). */
  fence(): number | undefined
  /** Another node may own the session now: the host lets it go without touching the store. */
  lost(why: string): void
  /** Writing kept failing and has stopped: the host marks the session and says so. */
  persistenceStopped(error: unknown): void
}

export interface SessionWriterOptions {
  store: SessionStore
  records: RecordWriter
  logger: Logger
  /** Engine nodes over NATS: writes need the session's lease and are fenced by its token. */
  fenced: boolean
  /** The host is stopping: a failed write is not retried. */
  stopping(): boolean
  /** Consecutive failed writes after which the writer stops (backoff doubles from 250 ms, ≤ 10 s). */
  maxFailures: number
  /** Counts each failed write (a metric). */
  onFailure(): void
}

const FIRST_RETRY_MS = 250
const MAX_RETRY_MS = 10_000

export class SessionWriter {
  private pending: HistoryEntry[] = []
  private dirty = false
  private flushing: Promise<void> | null = null
  /** A snapshot write waits for the reply in progress to finish (snapshots are per turn). */
  private snapshotDue = false
  private failures = 0
  /** Gave up after maxFailures: nothing more is written for this session. */
  private stopped = false

  constructor(
    private readonly session: WrittenSession,
    private readonly options: SessionWriterOptions,
  ) {}

  get records(): RecordWriter {
    return this.options.records
  }

  /** Takes the session's next history entry. */
  append(entry: HistoryEntry) {
    this.pending.push(entry)
    this.options.records.note(entry)
    this.schedule()
  }

  /** Writes what is pending and the snapshot, soon. */
  schedule() {
    if (this.stopped) return
    this.dirty = true
    if (!this.flushing) this.flushing = this.persist().finally(() => (this.flushing = null))
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
  }

  /** Resolves once everything asked for so far is written (or given up). */
  async flushed() {
    while (this.flushing) await this.flushing
    await this.options.records.written()
  }

  /** Writes pending log entries, then the snapshot that points past them; coalesces bursts. */
  private async persist() {
    const { session } = this
    const { store, records, logger, fenced } = this.options
    await new Promise(resolve => setImmediate(resolve))
    while (this.dirty) {
      if (fenced && !session.finished() && session.fence() === undefined) {
        // The lease is gone (not renewed in time, or taken over): another node may own the
        // session now, so nothing more is written from here.
        session.lost('lease lost')
        return
      }
      this.dirty = false
      const entries = this.pending.splice(0)
      try {
        if (entries.length) await store.appendLog(session.id, entries)
        if (session.finished()) continue
        const snapshot = session.snapshot()
        if (!snapshot) {
          this.snapshotDue = true
          continue
        }
        // The record's counters go with the snapshot: one write per turn.
        records.flushCounts()
        const written = await store.writeSnapshot(session.id, snapshot, session.fence())
        if (fenced && !written && !session.finished()) {
          session.lost('fenced: another node took the session over')
          return
        }
        this.failures = 0
      } catch (error) {
        this.options.onFailure()
        this.failures++
        this.pending.unshift(...entries)
        if (this.failures >= this.options.maxFailures) {
          // A store that refuses the same write this often will not take it on the next try
          // either (or is down for longer than a session should wait): stop, and say so once.
          this.stopped = true
          this.dirty = false
          this.pending = []
          logger.error('session persistence stopped after repeated failures', { sessionId: session.id, failures: this.failures, error })
          session.persistenceStopped(error)
          return
        }
        if (this.failures === 1) logger.warn('session persistence failed; retrying', { sessionId: session.id, error })
        this.dirty = true
        await new Promise(resolve => setTimeout(resolve, Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** (this.failures - 1))))
        if (this.options.stopping()) return
      }
    }
  }
}
