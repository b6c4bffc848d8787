// On the embedded store (LMDB) a selection cycle reads a batch's due contacts in selection order
// from the index declared for it (dialer/collections.ts, batch_state_rank_next /
// batch_state_next_rank) and stops after the room pacing leaves: the documents it reads grow
// with the room, not with the batch.
import t from 'tap'
import { contact, createBatch, load, startBatch, startDialingService } from '../support/dialer.js'
import type { LmdbStore } from '../../platform/store/lmdb-store.js'

for (const priorityOrder of ['contactPriority', 'scheduledAt'] as const) {
  t.test(`a cycle over 10,000 due contacts with room for 20 (priorityOrder ${priorityOrder})`, async t => {
    const { base, service, cycle } = await startDialingService(t, 'memory')
    const store = service.platform.store as LmdbStore
    t.equal(store.kind, 'lmdb')
    const batchId = await createBatch(base, { rules: { maxInFlight: 20, priorityOrder } })
    for (let l = 0; l < 10; l++) {
      // Priorities 1..5 and unset: the selection order is not the load order.
      await load(base, batchId, { contacts: Array.from({ length: 1000 }, (_, i) => contact(l * 1000 + i, (l * 1000 + i) % 6 ? { contactPriority: ((l * 1000 + i) % 6) } : {})) })
    }
    await startBatch(base, batchId)
    const before = { ...store.reads }
    const report = await cycle()
    t.equal(report.claimed, 20, 'the room is filled')
    const documents = store.reads.documents - before.documents
    const keys = store.reads.keys - before.keys
    t.ok(documents < 1000, `documents read by the cycle: ${documents} (10,000 contacts pending)`)
    t.ok(keys < 1000, `index entries read by the cycle: ${keys}`)
  })
}
