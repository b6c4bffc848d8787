// How long the dialer keeps what it writes (README "Retention"; Config.retention, 0 = forever).
//
// Attempts and batch-log entries expire by TTL indexes on the dates they already carry
// (startedAt, createdAt): MongoDB's TTL monitor, or the embedded store's bounded sweep.
//
// A finished batch (completed, archived, deleted) goes with its contacts and import errors
// FINISHED_BATCH_RETENTION_DAYS after it finished. Nothing in a contact says when its batch
// finished, so the batch carries `finishedAt` (set by the move that finishes it, cleared when a
// completed batch is started again, moved on by a load into it) and asks, with `stampsPending`,
// for its contacts to be brought in line; a pass here then writes `batchFinishedAt` into the
// batch's contacts that are no longer active, and into its import errors: the TTL field.
//
// Contacts still active (pending or in progress: an archived batch that was stopped, contacts
// loaded into a completed batch that was never started again) get no stamp: on MongoDB they are
// in the account's active-contacts counter (active-contacts.ts), which a TTL deletion would leave
// counting them for good. When the batch's retention ends, this pass removes what is left of its
// contacts through ActiveContacts.deleteBatch, which takes them out of the counter; the batch
// document itself expires a day after its contacts, so the pass always finds it first.
import type { Config } from '../platform/config.js'
import type { Clock } from '../platform/clock.js'
import type { Logger } from '../platform/logger.js'
import type { Collection, IndexSpec, Store } from '../platform/store/index.js'
import { ActiveContacts } from './active-contacts.js'
import type { BatchDoc, BatchStatus } from './batches.js'
import { ACTIVE_CONTACT_STATES, COLLECTIONS, type ContactDoc } from './collections.js'
import { Migrations } from './migrations.js'

const DAY_S = 86_400
const DAY_MS = DAY_S * 1000
/** How long a finished batch's document outlives its contacts (the pass removes what they left first). */
const BATCH_GRACE_S = DAY_S
/** Statuses of a finished batch. */
export const FINISHED_STATUSES: BatchStatus[] = ['completed', 'archived', 'deleting', 'deleted']
/** Batches one pass handles at most per step (each may mean a write per contact). */
const PAGE = 20
const MIGRATION_ID = 'batch-retention-v1'
/** How often worker processes run a pass (moves in this process ask for one at once). */
export const RETENTION_PASS_MS = 60_000

const ttl = (days: number, extraSeconds = 0) => (days > 0 ? { expireAfterSeconds: days * DAY_S + extraSeconds } : {})

/**
 * The TTL indexes of the dialer's retention. A kind kept forever (0) keeps its index without a
 * TTL: turning retention on or off again only changes the declaration (platform/store).
 */
export function retentionIndexes(retention: Config['retention']): Record<string, IndexSpec[]> {
  // Partial: only stamped documents have an entry, so loading contacts writes none.
  const stamped: IndexSpec = { name: 'batch_finished_ttl', key: { batchFinishedAt: 1 }, partialFilterExpression: { batchFinished: true }, ...ttl(retention.finishedBatchesDays) }
  return {
    [COLLECTIONS.attempts]: [{ name: 'started_ttl', key: { startedAt: 1 }, ...ttl(retention.attemptsDays) }],
    [COLLECTIONS.logs]: [{ name: 'created_ttl', key: { createdAt: 1 }, ...ttl(retention.batchLogsDays) }],
    [COLLECTIONS.batches]: [
      { name: 'finished_ttl', key: { finishedAt: 1 }, ...ttl(retention.finishedBatchesDays, BATCH_GRACE_S) },
      { name: 'stamps_pending', key: { stampsPending: 1 }, partialFilterExpression: { stampsWanted: true } },
    ],
    [COLLECTIONS.contacts]: [stamped],
    [COLLECTIONS.importErrors]: [stamped],
  }
}

interface StampedDoc {
  _id: string
  batchId: string
  batchFinished?: true
  batchFinishedAt?: Date
}

export interface RetentionPass {
  /** Batches whose contacts' stamps were brought in line with their finishedAt. */
  stamped: number
  /** Batches past their retention whose remaining contacts were removed. */
  purged: number
}

export class BatchRetention {
  private readonly batches: Collection<BatchDoc>
  private readonly contacts: Collection<ContactDoc>
  private readonly importErrors: Collection<StampedDoc>
  private readonly active: ActiveContacts
  private timer?: NodeJS.Timeout
  private running: Promise<RetentionPass> | undefined
  private again = false
  private stopped = false

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly days: number,
  ) {
    this.batches = store.collection<BatchDoc>(COLLECTIONS.batches)
    this.contacts = store.collection<ContactDoc>(COLLECTIONS.contacts)
    this.importErrors = store.collection<StampedDoc>(COLLECTIONS.importErrors)
    this.active = new ActiveContacts(store)
  }

  /** Worker processes: batches finished before this version get their finishedAt, then a pass every intervalMs. */
  start(intervalMs = RETENTION_PASS_MS) {
    this.stopped = false
    const tick = async () => {
      await this.pass().catch(error => this.logger.warn('dialer retention pass failed; the next one goes on', { error }))
      if (!this.stopped) this.timer = setTimeout(tick, intervalMs).unref()
    }
    void this.migrate()
      .catch(error => this.logger.warn('dialer retention: finished batches not dated yet; the next start goes on', { error }))
      .then(() => {
        if (!this.stopped) this.timer = setTimeout(tick, 0).unref()
      })
  }

  async stop() {
    this.stopped = true
    clearTimeout(this.timer)
    await this.running?.catch(() => undefined)
  }

  /** A batch finished or started again here: a pass soon (one at a time; one asked for meanwhile runs after). */
  kick() {
    if (this.stopped) return
    if (this.running) {
      this.again = true
      return
    }
    void this.pass().catch(error => this.logger.warn('dialer retention pass failed; the next one goes on', { error }))
  }

  /** One pass: stamps where batches asked for them, then what retention ended. Answers what it did. */
  pass(): Promise<RetentionPass> {
    if (this.running) {
      this.again = true
      return this.running
    }
    const run = (async () => {
      const done: RetentionPass = { stamped: 0, purged: 0 }
      do {
        this.again = false
        done.stamped += await this.stampAll()
        done.purged += await this.purgeAll()
      } while (this.again && !this.stopped)
      return done
    })().finally(() => (this.running = undefined))
    this.running = run
    return run
  }

  private async stampAll(): Promise<number> {
    let stamped = 0
    // Bounded: a batch asked for again meanwhile is left for the next pass.
    for (let page = 0; page < 50 && !this.stopped; page++) {
      const pending = await this.batches.find({ stampsWanted: true }, { limit: PAGE, projection: { status: 1, finishedAt: 1, stampsPending: 1 } })
      for (const batch of pending) {
        await this.stamp(batch)
        stamped++
        await new Promise(resolve => setImmediate(resolve))
      }
      if (pending.length < PAGE) break
    }
    return stamped
  }

  /** Brings the batch's contacts and import errors in line with its finishedAt; clears the request it read. */
  private async stamp(batch: Pick<BatchDoc, '_id' | 'status' | 'finishedAt' | 'stampsPending'>) {
    const at = batch.finishedAt ?? null
    const unstamp = { $unset: { batchFinished: '', batchFinishedAt: '' } }
    if (at && FINISHED_STATUSES.includes(batch.status)) {
      const stamp = { $set: { batchFinished: true, batchFinishedAt: at } }
      await this.contacts.updateMany({ batchId: batch._id, state: { $nin: ACTIVE_CONTACT_STATES }, batchFinishedAt: { $ne: at } }, stamp)
      // Active again (recontacted): in the account's counter, so not to be expired by a TTL.
      await this.contacts.updateMany({ batchId: batch._id, state: { $in: ACTIVE_CONTACT_STATES }, batchFinished: true }, unstamp)
      await this.importErrors.updateMany({ batchId: batch._id, batchFinishedAt: { $ne: at } }, stamp)
    } else {
      await this.contacts.updateMany({ batchId: batch._id, batchFinished: true }, unstamp)
      await this.importErrors.updateMany({ batchId: batch._id, batchFinished: true }, unstamp)
    }
    // Only the request read: one made meanwhile stays for the next pass.
    await this.batches.updateOne({ _id: batch._id, stampsPending: batch.stampsPending }, { $unset: { stampsPending: '', stampsWanted: '' } })
  }

  private async purgeAll(): Promise<number> {
    if (this.days === 0) return 0
    let purged = 0
    for (let page = 0; page < 50 && !this.stopped; page++) {
      const horizon = new Date(this.clock.now() - this.days * DAY_MS)
      const due = await this.batches.find({ finishedAt: { $lte: horizon }, purgedAt: { $exists: false } }, { limit: PAGE, projection: { accountId: 1, finishedAt: 1 } })
      for (const batch of due) {
        await this.active.deleteBatch(batch.accountId, batch._id)
        await this.importErrors.deleteMany({ batchId: batch._id })
        await this.batches.updateOne({ _id: batch._id, finishedAt: batch.finishedAt }, { $set: { purgedAt: new Date(this.clock.now()) } })
        purged++
        await new Promise(resolve => setImmediate(resolve))
      }
      if (due.length < PAGE) break
    }
    return purged
  }

  /** Batches that finished before finishedAt existed take the time of their last move (updatedAt), once per database. */
  async migrate() {
    const migrations = new Migrations(this.store)
    if (await migrations.done(MIGRATION_ID)) return
    for (;;) {
      if (this.stopped) return
      const page = await this.batches.find({ status: { $in: FINISHED_STATUSES }, finishedAt: { $exists: false } }, { limit: 200, projection: { updatedAt: 1 } })
      for (const batch of page) {
        await this.batches.updateOne({ _id: batch._id, finishedAt: { $exists: false } }, { $set: { finishedAt: batch.updatedAt, stampsWanted: true }, $inc: { stampsPending: 1 } })
      }
      if (page.length < 200) break
      await new Promise(resolve => setImmediate(resolve))
    }
    await migrations.record(MIGRATION_ID)
  }
}
