// The embedded store's writes, as lmdb-js transaction callbacks.
//
// lmdb-js runs every callback queued before its write thread takes LMDB's lock in one
// transaction, back to back. Writing a collection's counted moves (a read and a put per moved
// key) at the end of each write would repeat them: a dialer claim and its settlement move the
// same four keys of the contacts' counted indexes, so a transaction of 500 claims would read and
// write them 500 times. So the work queued for one transaction runs in a single callback, in the
// order it was queued, and the counted moves of all of it are written once at its end.
//
// What a reader sees: reads outside a write transaction see only what is
// committed, and the moves are written before the commit. Inside the transaction nothing reads
// a counted index except an index build, which writes moves due first (LmdbCollection).
import type { RootDatabase } from 'lmdb'
import type { WriteHolds } from './write-holds.js'
import { StoreUnavailableError } from './types.js'

/** What has counted moves to write before the transaction commits. */
export interface PendingCounts {
  flushCounts(): void
}

type Settled = { value: unknown } | { error: unknown }

interface Queued {
  work: () => unknown
  queuedAt: number | undefined
}

export class WriteBatches {
  /** Work for the transaction callback lmdb-js has not run yet (null: the next write queues a new one). */
  private queued: Queued[] | null = null
  private committed: Promise<Settled[]> | null = null
  private readonly pending = new Set<PendingCounts>()
  private ran = 0
  /**
   * The transaction callback running now (0: none). Within it no other writer can change what
   * is stored (LMDB has one writer at a time): a collection checks its index declarations once
   * per callback, and again only after it changed them itself.
   */
  running = 0

  constructor(
    private readonly env: RootDatabase,
    private readonly holds: WriteHolds,
    private readonly ended: () => boolean = () => false,
  ) {}

  /**
   * Runs `work` inside a write transaction (timed by WriteHolds, given when it was queued) and
   * resolves with its result once that transaction is committed; its throw rejects (the
   * transaction's other work is not affected: work throws before it writes).
   */
  run<R>(work: () => R, queuedAt?: number): Promise<R> {
    if (this.ended()) return Promise.reject(new StoreUnavailableError('the embedded store is closed'))
    let committed = this.committed
    let index = 0
    if (this.queued && committed) {
      index = this.queued.push({ work, queuedAt }) - 1
    } else {
      const batch: Queued[] = (this.queued = [{ work, queuedAt }])
      // Already inside a write transaction of this thread, lmdb-js runs the callback at once
      // and answers its result, not a promise.
      committed = this.committed = Promise.resolve(this.env.transaction(() => this.runBatch(batch)) as Settled[] | Promise<Settled[]>)
    }
    return committed.then(settled => {
      const outcome = settled[index]!
      if ('error' in outcome) throw outcome.error
      return outcome.value as R
    })
  }

  /** `owner` moved counts in the running transaction: written at its end. */
  moved(owner: PendingCounts) {
    this.pending.add(owner)
  }

  private runBatch(batch: Queued[]): Settled[] {
    // Work queued from here on goes to the next callback (lmdb-js queues it for the next transaction).
    if (this.queued === batch) {
      this.queued = null
      this.committed = null
    }
    const settled: Settled[] = []
    this.running = ++this.ran
    try {
      for (const { work, queuedAt } of batch) {
        try {
          settled.push({ value: this.holds.run(work, queuedAt) })
        } catch (error) {
          settled.push({ error })
        }
      }
      // A failure here (the map full) rejects every write of the callback; what was not
      // written stays pending for the next one.
      this.holds.run(() => {
        for (const owner of this.pending) {
          owner.flushCounts()
          this.pending.delete(owner)
        }
      })
    } finally {
      this.running = 0
    }
    return settled
  }
}
