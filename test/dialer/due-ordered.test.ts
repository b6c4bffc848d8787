// A batch's selection order decides which selection index holds its contacts: a default batch's
// contacts are only in the priority index (one index write per claim, requeue or insert), a
// batch selected by due time also in the due-time one. Contacts stored before `dueOrdered`
// existed are marked once at start (dialer/due-ordered-contacts.ts) and selected as before.
import t from 'tap'
import { markDueOrderedContacts } from '../../dialer/due-ordered-contacts.js'
import { COLLECTIONS } from '../../dialer/collections.js'
import type { LmdbStore } from '../../platform/store/lmdb-store.js'
import { STORES } from '../support/harness.js'
import { contact, createBatch, load, startBatch, startDialingService } from '../support/dialer.js'

t.test('on the embedded store, only a due-time batch has entries in the due-time index', async t => {
  const { base, service } = await startDialingService(t, 'memory')
  const store = service.platform.store as LmdbStore
  const byPriority = await createBatch(base, {})
  const byDueTime = await createBatch(base, { rules: { priorityOrder: 'scheduledAt' } })
  await load(base, byPriority, { contacts: Array.from({ length: 30 }, (_, i) => contact(i)) })
  await load(base, byDueTime, { contacts: Array.from({ length: 20 }, (_, i) => contact(100 + i)) })
  await store.settled()
  t.equal(store.servingIndexDb(COLLECTIONS.contacts, 'batch_state_next_rank').getCount(), 20, 'due-time index: the due-time batch only')
  t.equal(store.servingIndexDb(COLLECTIONS.contacts, 'batch_state_rank_next').getCount(), 50, 'priority index: every pending contact')
})

for (const kind of STORES) {
  t.test(`contacts stored before the mark are marked once and dialed (${kind} store)`, async t => {
    const { base, service, cycle } = await startDialingService(t, kind)
    const store = service.platform.store
    const contacts = store.collection(COLLECTIONS.contacts)
    const byPriority = await createBatch(base, {})
    const byDueTime = await createBatch(base, { rules: { priorityOrder: 'scheduledAt' } })
    // More than one slice of the migration (1,000), so its pages are followed.
    await load(base, byDueTime, { contacts: Array.from({ length: 1000 }, (_, i) => contact(i)) })
    await load(base, byDueTime, { contacts: Array.from({ length: 100 }, (_, i) => contact(1000 + i)) })
    await load(base, byPriority, { contacts: Array.from({ length: 5 }, (_, i) => contact(5000 + i)) })
    t.equal(await contacts.countDocuments({ batchId: byDueTime, dueOrdered: true }), 1100, 'new contacts carry the mark')
    t.equal(await contacts.countDocuments({ batchId: byPriority, dueOrdered: true }), 0)

    // As an earlier build left them: no mark, no migration recorded.
    await contacts.updateMany({}, { $unset: { dueOrdered: '' } })
    await store.collection(COLLECTIONS.migrations).deleteOne({ _id: 'due-ordered-contacts-v1' })
    await startBatch(base, byDueTime)
    t.equal((await cycle()).claimed, 0, 'unmarked contacts of a due-time batch are not selected')

    t.equal(await markDueOrderedContacts(store, service.platform.logger), 1100)
    t.equal(await contacts.countDocuments({ batchId: byDueTime, dueOrdered: true }), 1100)
    t.equal(await contacts.countDocuments({ batchId: byPriority, dueOrdered: true }), 0, 'other batches are left alone')
    t.equal(await markDueOrderedContacts(store, service.platform.logger), 0, 'recorded: not run again')
    t.equal((await cycle()).claimed, 50, 'selected once marked (the room: DIALER_MAX_IN_FLIGHT_PER_BATCH)')
  })
}
