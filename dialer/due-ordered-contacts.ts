// Contacts written before `dueOrdered` existed (dialer/collections.ts) are not in the due-time
// selection index, so a batch with rules.priorityOrder = scheduledAt would never select them.
// Once per database, before the scheduler starts, the contacts of every such batch are marked,
// a slice at a time in identifier order (the unique index serves the pages). Databases without
// such batches (and new ones) pay one query. Several processes starting together mark the same
// contacts; marking and recording are idempotent.
import { yieldToLoop } from '../platform/background.js'
import type { Logger } from '../platform/logger.js'
import type { Store } from '../platform/store/index.js'
import type { BatchDoc } from './batches.js'
import { COLLECTIONS, type ContactDoc } from './collections.js'
import { Migrations } from './migrations.js'

const MIGRATION_ID = 'due-ordered-contacts-v1'
const SLICE = 1000

/** Answers how many contacts it marked (0 when the migration was already done). */
export async function markDueOrderedContacts(store: Store, logger: Logger): Promise<number> {
  const migrations = new Migrations(store)
  if (await migrations.done(MIGRATION_ID)) return 0
  const batches = await store
    .collection<BatchDoc>(COLLECTIONS.batches)
    .find({ 'rules.priorityOrder': 'scheduledAt' }, { projection: { _id: 1 } })
  const contacts = store.collection<ContactDoc>(COLLECTIONS.contacts)
  let marked = 0
  if (batches.length > 0) logger.info('dialer: marking the contacts of batches selected by due time', { batches: batches.length })
  for (const batch of batches) {
    let after: string | null = null
    for (;;) {
      const page: ContactDoc[] = await contacts.find(
        after === null ? { batchId: batch._id } : { batchId: batch._id, identifier: { $gt: after } },
        { sort: { identifier: 1 }, limit: SLICE, projection: { identifier: 1, dueOrdered: 1 } },
      )
      const unmarked = page.filter(c => c.dueOrdered !== true).map(c => c._id)
      if (unmarked.length > 0) marked += (await contacts.updateMany({ _id: { $in: unmarked } }, { $set: { dueOrdered: true } })).modifiedCount
      if (page.length < SLICE) break
      after = page[page.length - 1]!.identifier
      await yieldToLoop()
    }
  }
  await migrations.record(MIGRATION_ID)
  return marked
}
