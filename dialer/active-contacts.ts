// The account cap's count of active contacts (pending or in progress), never counted over every
// contact on each load request.
//
// On a store that keeps counted indexes (the embedded one: Store.keepsCounts), it is read from
// the numbers of `account_state`, which every contact write moves inside its own transaction:
// nothing to reconcile, nothing a crash can leave behind. The rest of this module is for MongoDB,
// where a count over that index reads an entry per active contact: a counter per account.
//
// Each contact carries `capCounted`: whether it is in its account's counter. After any write that
// may move contacts in or out of the active states, the writer reconciles those contacts: a
// conditional update flips `capCounted` where it disagrees with the state, and the counter moves
// by exactly the number of flips it made. A flip is one atomic single-document update, so of any
// number of writers reconciling the same contact (concurrent loads, a redelivered chunk replaying
// its plan, the scheduler finishing an attempt meanwhile) exactly one moves the counter for it,
// whatever the order: a contact inserted and dialed to `done` before its load reconciles it is
// never counted, one counted and then cancelled is taken out once. Reconciling again is a no-op,
// so a chunk redelivered after a failure anywhere lands on the same counter.
//
// Not covered: a process killed between a flip and its counter update loses that update (two
// documents, no transaction); contacts written before the counter existed are added once at
// start, in slices (until then the cap counts contacts, as it did before).
import type { Collection, Store } from '../platform/store/index.js'
import type { Logger } from '../platform/logger.js'
import { ACTIVE_CONTACT_STATES, COLLECTIONS, type ContactDoc } from './collections.js'
import { Migrations } from './migrations.js'

export const ACCOUNT_COUNTERS = 'dialer_account_counters'
const MIGRATION_ID = 'active-contacts-v1'
const SLICE = 500

interface CounterDoc {
  _id: string
  activeContacts: number
}

const INACTIVE = { $nin: ACTIVE_CONTACT_STATES }
const ACTIVE = { $in: ACTIVE_CONTACT_STATES }

export class ActiveContacts {
  private readonly contacts: Collection<ContactDoc>
  private readonly counters: Collection<CounterDoc>
  /** The store answers the count from account_state's numbers: no counter is kept. */
  private readonly keptByStore: boolean
  private migrated = false
  private stopped = false
  private migration: Promise<void> | undefined

  constructor(private readonly store: Store) {
    this.contacts = store.collection<ContactDoc>(COLLECTIONS.contacts)
    this.counters = store.collection<CounterDoc>(ACCOUNT_COUNTERS)
    this.keptByStore = store.keepsCounts
  }

  /** The account's active contacts: the store's numbers, the counter, or a count until older contacts are in it. */
  async count(accountId: string): Promise<number> {
    if (this.keptByStore || !this.migrated) return this.contacts.countDocuments({ accountId, state: ACTIVE })
    return (await this.counters.findOne({ _id: accountId }))?.activeContacts ?? 0
  }

  /** Brings the counter in line with these contacts' states (any subset of one account's contacts). */
  async reconcile(accountId: string, scope: { ids: string[] } | { batchId: string; identifiers: string[] }) {
    if (this.keptByStore) return
    // One id as a plain value: the embedded store looks that up directly.
    const which =
      'ids' in scope
        ? { _id: scope.ids.length === 1 ? scope.ids[0] : { $in: scope.ids } }
        : { batchId: scope.batchId, identifier: { $in: scope.identifiers } }
    const [entered, left] = await Promise.all([
      this.contacts.updateMany({ ...which, state: ACTIVE, capCounted: false }, { $set: { capCounted: true } }),
      this.contacts.updateMany({ ...which, state: INACTIVE, capCounted: true }, { $set: { capCounted: false } }),
    ])
    await this.move(accountId, entered.modifiedCount - left.modifiedCount)
  }

  /**
   * Deletes a batch's contacts, taking the counted ones out of the counter first. A contact a
   * concurrent reconcile counts meanwhile survives the delete and is taken out on the next round.
   */
  async deleteBatch(accountId: string, batchId: string) {
    for (let round = 0; round < 10; round++) {
      if (this.keptByStore) {
        await this.contacts.deleteMany({ batchId })
        if ((await this.contacts.countDocuments({ batchId })) === 0) return
        continue
      }
      const uncounted = await this.contacts.updateMany({ batchId, capCounted: true }, { $set: { capCounted: false } })
      await this.move(accountId, -uncounted.modifiedCount)
      await this.contacts.deleteMany({ batchId, capCounted: { $ne: true } })
      if ((await this.contacts.countDocuments({ batchId })) === 0) return
    }
    throw new Error(`contacts of batch ${batchId} kept being counted while it was deleted`)
  }

  /** Deletes these contacts of the account (an erasure), taking the counted ones out of the counter first, as deleteBatch does. */
  async deleteContacts(accountId: string, ids: string[]): Promise<number> {
    if (ids.length === 0) return 0
    const which = { accountId, _id: { $in: ids } }
    let deleted = 0
    for (let round = 0; round < 10; round++) {
      if (this.keptByStore) deleted += await this.contacts.deleteMany(which)
      else {
        const uncounted = await this.contacts.updateMany({ ...which, capCounted: true }, { $set: { capCounted: false } })
        await this.move(accountId, -uncounted.modifiedCount)
        deleted += await this.contacts.deleteMany({ ...which, capCounted: { $ne: true } })
      }
      if ((await this.contacts.countDocuments(which)) === 0) return deleted
    }
    throw new Error(`contacts of account ${accountId} kept being counted while they were erased`)
  }

  private async move(accountId: string, by: number) {
    if (by !== 0) await this.counters.updateOne({ _id: accountId }, { $inc: { activeContacts: by } }, { upsert: true })
  }

  /**
   * Adds contacts written before the counter existed, once (marked done in the store): the first
   * slice before returning, the rest in the background, a slice at a time.
   */
  async start(logger: Logger) {
    if (this.keptByStore) return
    if (await new Migrations(this.store).done(MIGRATION_ID)) {
      this.migrated = true
      return
    }
    const next = await this.migrateSlice(null)
    if (next === null) return this.finishMigration()
    logger.info('dialer: adding earlier contacts to the account counters; the cap counts contacts until then')
    this.migration = (async () => {
      let after: string | null = next
      let failures = 0
      while (after !== null && !this.stopped) {
        await new Promise(resolve => setImmediate(resolve))
        try {
          after = await this.migrateSlice(after)
          failures = 0
        } catch (error) {
          // Bounded: the cap keeps counting contacts (exact, slower) until the next start.
          if (++failures >= 5) return logger.error('dialer: giving up adding earlier contacts to the account counters', { error })
          await new Promise(resolve => setTimeout(resolve, 200 * 2 ** failures).unref())
        }
      }
      if (after === null) await this.finishMigration()
    })()
  }

  async stop() {
    this.stopped = true
    await this.migration
  }

  private async finishMigration() {
    await new Migrations(this.store).record(MIGRATION_ID)
    this.migrated = true
  }

  /** One slice of contacts without `capCounted`, in _id order: flipped (and counted) once each. */
  private async migrateSlice(after: string | null): Promise<string | null> {
    const page = await this.contacts.find(after === null ? {} : { _id: { $gt: after } }, { sort: { _id: 1 }, limit: SLICE })
    const byAccount = new Map<string, string[]>()
    for (const c of page) {
      if (c.capCounted !== undefined) continue
      let ids = byAccount.get(c.accountId)
      if (!ids) byAccount.set(c.accountId, (ids = []))
      ids.push(c._id)
    }
    for (const [accountId, ids] of byAccount) {
      const [entered] = await Promise.all([
        this.contacts.updateMany({ _id: { $in: ids }, capCounted: { $exists: false }, state: ACTIVE }, { $set: { capCounted: true } }),
        this.contacts.updateMany({ _id: { $in: ids }, capCounted: { $exists: false }, state: INACTIVE }, { $set: { capCounted: false } }),
      ])
      await this.move(accountId, entered.modifiedCount)
    }
    return page.length === SLICE ? page[page.length - 1]!._id : null
  }
}
