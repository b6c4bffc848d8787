// MongoDB behind a cluster's session journal: what sessions leave in MongoDB (their documents for
// listings, tombstones and the orphan reaper; the copy of their history that reports and reads of
// closed sessions use; their checkpoints) is written here, in batches, after the journal on
// JetStream acknowledged it. A turn never waits for MongoDB, so a database that stalls, elects a
// new primary or is gone for a while does not stop a conversation.
//
// One queue for every session of the node, in order. Every `windowMs` (50) the queued writes go out in
// phases (new documents, fences, history in one bulk write, consumers, checkpoints, closes), so a
// session's writes land in the order it made them. A phase that fails goes back to the front of
// the queue with the phases after it and is retried with back-off (capped, for as long as the
// process runs); each write is idempotent (upserts by key, conditional updates), so a retry of one
// that did land changes nothing. While it fails, /healthz and a metric say the store is behind.
import type { Logger } from '../../platform/logger.js'
import type { Metrics } from '../../platform/metrics.js'
import { DuplicateKeyError } from '../../platform/store/index.js'
import type { CheckpointWrite, NewSession, SessionStore } from '../persistence/session-store.js'
import type { PersistedControl } from '../session/machine.js'
import type { HistoryEntry } from '../types.js'

type Fence = number | undefined

export type MirrorWrite =
  | { kind: 'insert'; session: NewSession; fence: Fence }
  | { kind: 'fence'; token: number }
  | { kind: 'journal'; entries: HistoryEntry[]; control: PersistedControl | undefined }
  | { kind: 'consumer'; consumerId: string; keep: number }
  | { kind: 'checkpoint'; write: CheckpointWrite; fence: Fence }
  | { kind: 'destroy'; close: { reason: string; at: number; idleDeadline?: number } }
  | { kind: 'deleteLog' }

/** History records per bulk write. */
const JOURNAL_SLICE = 200

const PHASES: MirrorWrite['kind'][] = ['insert', 'fence', 'journal', 'consumer', 'checkpoint', 'destroy', 'deleteLog']

interface Queued {
  sessionId: string
  write: MirrorWrite
  /** Told the write's outcome once it landed (a close answers whether this call closed it). */
  done?: (result: boolean) => void
  /** Landed (a phase that fails after some of its slices is retried without them). */
  settled?: boolean
}

export interface MongoMirrorOptions {
  store: SessionStore
  logger: Logger
  metrics: Pick<Metrics, 'storeWritesBehind' | 'storeBehind'>
  /** How long writes gather before a batch goes out. */
  windowMs?: number
  /** A phase that has not answered after this long is taken as failed and tried again. */
  phaseTimeoutMs?: number
  /** First back-off after a failed batch; doubled each time, up to `maxRetryMs`. */
  retryMs?: number
  maxRetryMs?: number
  /** Writes held at most; past it the oldest history copies are dropped (the journal still holds them). */
  maxQueued?: number
}

export interface MirrorStatus {
  /** Writes not yet in MongoDB. */
  behind: number
  /** Since when writes fail (null: they do not). */
  failingSince: number | null
  lastError: string | null
}

export class MongoMirror {
  private queue: Queued[] = []
  /** The batch being written. */
  private writing = 0
  private readonly pending = new Map<string, number>()
  /** Sessions whose history copy in MongoDB lost writes (dropped past maxQueued): read from the journal. */
  private readonly incomplete = new Set<string>()
  private running: Promise<void> | null = null
  private failures = 0
  private failingSince: number | null = null
  private lastError: string | null = null
  private stopped = false
  private wake: (() => void) | null = null

  constructor(private readonly options: MongoMirrorOptions) {}

  /** Queues a write of the session; `done` hears its outcome. */
  push(sessionId: string, write: MirrorWrite, done?: (result: boolean) => void) {
    this.queue.push({ sessionId, write, done })
    this.pending.set(sessionId, (this.pending.get(sessionId) ?? 0) + 1)
    if (this.queue.length > (this.options.maxQueued ?? 200_000)) this.shed()
    this.options.metrics.storeWritesBehind.set(this.queue.length + this.writing)
    if (!this.running && !this.stopped) this.running = this.run().finally(() => (this.running = null))
  }

  /** A write whose outcome the caller waits for (a close: whether this call closed the session). */
  run1(sessionId: string, write: MirrorWrite): Promise<boolean> {
    return new Promise(resolve => this.push(sessionId, write, resolve))
  }

  /** Whether everything the session wrote is in MongoDB. */
  caughtUp(sessionId: string): boolean {
    return !this.pending.has(sessionId) && !this.incomplete.has(sessionId)
  }

  forget(sessionId: string) {
    if (!this.pending.has(sessionId)) this.incomplete.delete(sessionId)
  }

  status(): MirrorStatus {
    return { behind: this.queue.length + this.writing, failingSince: this.failingSince, lastError: this.lastError }
  }

  /** Writes what is queued, for at most `timeoutMs`; what is left stays in the journal. */
  async stop(timeoutMs: number) {
    const deadline = Date.now() + timeoutMs
    while (this.queue.length > 0 && Date.now() < deadline) {
      this.wake?.()
      await new Promise(resolve => setTimeout(resolve, 20))
    }
    this.stopped = true
    this.wake?.()
    // Nobody waits for ever on a write that will not be made by this process.
    for (const queued of this.queue) queued.done?.(false)
    if (this.queue.length) this.options.logger.warn('MongoDB writes left behind at stop (the session journal holds them)', { behind: this.queue.length })
  }

  private async run() {
    while (this.queue.length > 0 && !this.stopped) {
      await this.sleep(this.failures === 0 ? (this.options.windowMs ?? 50) : this.backoff())
      if (this.stopped) return
      const batch = this.queue
      this.queue = []
      this.writing = batch.length
      const left = await this.flush(batch)
      this.writing = 0
      if (left.length === 0) {
        if (this.failures > 0) this.options.logger.info('MongoDB writes caught up', { after: this.failures })
        this.failures = 0
        this.failingSince = null
        this.lastError = null
        this.options.metrics.storeBehind.set(0)
      } else {
        this.queue = [...left, ...this.queue]
      }
      this.options.metrics.storeWritesBehind.set(this.queue.length + this.writing)
    }
  }

  private backoff() {
    const { retryMs = 250, maxRetryMs = 5_000 } = this.options
    return Math.min(maxRetryMs, retryMs * 2 ** Math.min(16, this.failures - 1))
  }

  private sleep(ms: number) {
    return new Promise<void>(resolve => {
      const timer = setTimeout(() => {
        this.wake = null
        resolve()
      }, ms)
      this.wake = () => {
        clearTimeout(timer)
        this.wake = null
        resolve()
      }
    })
  }

  /** One batch, phase by phase; answers what is left (the failed phase and those after it). */
  private async flush(batch: Queued[]): Promise<Queued[]> {
    const byPhase = new Map<MirrorWrite['kind'], Queued[]>()
    for (const queued of batch) {
      const phase = byPhase.get(queued.write.kind)
      if (phase) phase.push(queued)
      else byPhase.set(queued.write.kind, [queued])
    }
    for (let i = 0; i < PHASES.length; i++) {
      const writes = byPhase.get(PHASES[i]!)
      if (!writes) continue
      try {
        await this.within(this.apply(PHASES[i]!, writes))
      } catch (error) {
        this.failed(error)
        // This phase and the later ones, in their order, but what landed.
        return PHASES.slice(i).flatMap(kind => (byPhase.get(kind) ?? []).filter(queued => !queued.settled))
      }
    }
    return []
  }

  private failed(error: unknown) {
    this.failures++
    this.failingSince ??= Date.now()
    this.lastError = error instanceof Error ? error.message : String(error)
    this.options.metrics.storeBehind.set(1)
    // Said once per outage, then every 20th attempt.
    if (this.failures === 1 || this.failures % 20 === 0) {
      this.options.logger.warn('MongoDB writes behind the session journal are failing; retrying', { attempts: this.failures, behind: this.queue.length, error })
    }
  }

  private within<T>(work: Promise<T>): Promise<T> {
    const ms = this.options.phaseTimeoutMs ?? 10_000
    let timer: NodeJS.Timeout
    return Promise.race([
      work,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`MongoDB did not answer within ${ms} ms`)), ms)
      }),
    ]).finally(() => clearTimeout(timer))
  }

  private async apply(kind: MirrorWrite['kind'], writes: Queued[]) {
    const { store } = this.options
    if (kind === 'journal') {
      // One bulk write; a session's control record once (its latest), its entries all.
      const bySession = new Map<string, { sessionId: string; entries: HistoryEntry[]; control: PersistedControl | undefined }>()
      for (const { sessionId, write } of writes) {
        if (write.kind !== 'journal') continue
        const batch = bySession.get(sessionId)
        if (batch) {
          batch.entries.push(...write.entries)
          batch.control = write.control ?? batch.control
        } else bySession.set(sessionId, { sessionId, entries: [...write.entries], control: write.control })
      }
      // In slices: encoding a window's history in one go would hold the event loop (and every
      // live turn of the node) for milliseconds; between slices the loop serves them.
      let slice: { sessionId: string; entries: HistoryEntry[]; control: PersistedControl | undefined }[] = []
      let records = 0
      const write = async () => {
        await store.writeJournals(slice)
        const written = new Set(slice.map(batch => batch.sessionId))
        for (const queued of writes) if (written.has(queued.sessionId)) this.landed(queued, true)
        slice = []
        records = 0
      }
      for (const batch of bySession.values()) {
        slice.push(batch)
        records += batch.entries.length + 1
        if (records >= JOURNAL_SLICE) await write()
      }
      if (slice.length) await write()
      return
    }
    // The others, one request each (each names its own document), a slice at a time.
    for (let i = 0; i < writes.length; i += JOURNAL_SLICE) {
      const slice = writes.slice(i, i + JOURNAL_SLICE)
      const results = await Promise.all(slice.map(queued => this.applyOne(queued)))
      slice.forEach((queued, k) => this.landed(queued, results[k]!))
    }
  }

  private async applyOne({ sessionId, write }: Queued): Promise<boolean> {
    const { store } = this.options
    switch (write.kind) {
      case 'insert':
        try {
          await store.insert(write.session, write.fence)
        } catch (error) {
          if (!(error instanceof DuplicateKeyError)) throw error // landed before: a retry
        }
        return true
      case 'fence':
        return store.takeFence(sessionId, write.token)
      case 'consumer':
        await store.addConsumer(sessionId, write.consumerId, write.keep)
        return true
      case 'checkpoint':
        return store.writeCheckpoint(sessionId, write.write, write.fence)
      case 'destroy':
        return store.markDestroyed(sessionId, write.close)
      case 'deleteLog':
        await store.deleteLog(sessionId)
        return true
      default:
        return true
    }
  }

  private landed(queued: Queued, result: boolean) {
    if (queued.settled) return
    queued.settled = true
    const left = (this.pending.get(queued.sessionId) ?? 1) - 1
    if (left > 0) this.pending.set(queued.sessionId, left)
    else this.pending.delete(queued.sessionId)
    queued.done?.(result)
  }

  /** Past maxQueued: the oldest history copies go (the journal on JetStream still has them). */
  private shed() {
    const excess = this.queue.length - (this.options.maxQueued ?? 200_000)
    let shed = 0
    this.queue = this.queue.filter(queued => {
      if (shed >= excess || queued.write.kind !== 'journal') return true
      shed++
      this.incomplete.add(queued.sessionId)
      this.landed(queued, false)
      return false
    })
    if (shed) this.options.logger.warn('MongoDB history copies dropped: too many writes behind (the session journal still holds them)', { dropped: shed })
  }
}
