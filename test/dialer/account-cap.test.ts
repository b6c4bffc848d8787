// The account cap never counts every active contact (dialer/active-contacts.ts): on MongoDB it
// reads a counter kept as contacts enter and leave the active states, on the embedded store the
// numbers of the counted index account_state. Through the API and the real chunk worker on both
// stores: the cap's `currentActive` (and on MongoDB the stored counter) equal a count of the
// active contacts, read from the documents, after concurrent loads with overlapping identifiers,
// chunks delivered twice, raced and crashed mid-way, recontacts, dialing to done, cancel,
// reschedule and a batch delete.
import t from 'tap'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { contact, createBatch, load, startBatch, startDialingService, stopBatch, waitForOperation } from '../support/dialer.js'
import { ACCOUNT_COUNTERS, ActiveContacts } from '../../dialer/active-contacts.js'
import { ACTIVE_CONTACT_STATES, COLLECTIONS } from '../../dialer/collections.js'
import { ContactLoads, type ChunkMessage } from '../../dialer/loads.js'
import { queuedContacts } from '../../dialer/load-chunks.js'
import { Batches } from '../../dialer/batches.js'
import { Operations } from '../../dialer/operations.js'
import { BatchLog } from '../../dialer/batch-log.js'
import type { Platform } from '../../platform/index.js'
import type { Store } from '../../platform/store/index.js'

const CAP = 40

/** The store, except that the first `method` call on `collection` fails (a crash at that point). */
function failFirst(store: Store, collection: string, method: string): Store {
  let armed = true
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop !== 'collection') return Reflect.get(target, prop, receiver)
      return (name: string) => {
        const inner = target.collection(name)
        if (name !== collection) return inner
        return new Proxy(inner, {
          get(c, p) {
            const value = Reflect.get(c, p)
            if (typeof value !== 'function') return value
            if (p !== method || !armed) return value.bind(c)
            return () => {
              armed = false
              return Promise.reject(new Error(`simulated crash in ${collection}.${method}`))
            }
          },
        })
      }
    },
  })
}

/** The 400 a load one contact over the cap gets, whose currentActive is the cap's reading. */
async function currentActive(base: string, batchId: string) {
  const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: { contacts: Array.from({ length: CAP + 1 }, (_, i) => contact(9000 + i)) } })
  if (res.status !== 400) throw new Error(`expected the cap: ${res.status} ${res.text}`)
  return res.json.currentActive as number
}

/**
 * The active contacts counted from the documents themselves (a find: no counted index, no
 * counter), and what the cap reads: the counter on a store without numbers of its own, else the
 * store's numbers.
 */
async function truth(store: Store) {
  const [docs, counter, read] = await Promise.all([
    store.collection(COLLECTIONS.contacts).find({ accountId: 'acme', state: { $in: ACTIVE_CONTACT_STATES } }, { projection: { _id: 1 } }),
    store.collection(ACCOUNT_COUNTERS).findOne({ _id: 'acme' }),
    new ActiveContacts(store).count('acme'),
  ])
  return { counted: docs.length, counter: store.keepsCounts ? read : (counter?.activeContacts ?? 0) }
}

for (const store of STORES) {
  t.test(`the account cap on the ${store} store`, async t => {
    const { base, service, cycle } = await startDialingService(t, store, { DIALER_MAX_ACTIVE_CONTACTS: String(CAP) })
    const platform = service.platform
    const s = platform.store
    const check = async (expected: number, what: string) => {
      t.same(await truth(s), { counted: expected, counter: expected }, `${what}: counter = count`)
    }

    t.test('concurrent loads with overlapping identifiers, recontacts', async t => {
      const batchId = await createBatch(base, { duplicateStrategy: 'merge' })
      await Promise.all([
        load(base, batchId, { contacts: Array.from({ length: 12 }, (_, i) => contact(i)) }),
        load(base, batchId, { contacts: Array.from({ length: 12 }, (_, i) => contact(i + 6)) }),
        load(base, batchId, { contacts: Array.from({ length: 12 }, (_, i) => contact(i + 3, { onDuplicate: 'recontact' })) }),
      ])
      await check(18, 'c0..c17 once each')
    })

    t.test('chunks delivered twice, raced, and crashed between apply and count, count once', async t => {
      // MongoDB: the worker's store fails the first reconcile (right after a chunk's contacts are
      // written): the chunk fails, is delivered again, and its replayed plan reconciles them. The
      // embedded store has no reconcile (the numbers move with the insert): it fails the insert.
      const crashing = failFirst(s, COLLECTIONS.contacts, s.keepsCounts ? 'bulkWrite' : 'updateMany')
      const p = { ...platform, store: crashing } as Platform
      const batches = new Batches(crashing, platform.clock)
      const operations = new Operations(crashing, platform.clock)
      const loads = new ContactLoads(p, batches, operations, new BatchLog(crashing, platform.clock))
      const batch = await batches.create({ accountId: 'acme', name: 'direct', channel: 'phone', source: 'api', duplicateStrategy: 'merge', rules: {}, tempCsvKey: null, createdBy: { id: 'system' } })
      const op = await operations.createLoad({ accountId: 'acme', batchId: batch._id, type: 'contacts.insert', requestedCount: 10, totalChunks: 2, sealed: true, actor: { id: 'system' } })
      const chunk = (index: number): ChunkMessage => ({
        operationId: op._id, accountId: 'acme', batchId: batch._id, index, rejected: [],
        contacts: JSON.stringify(queuedContacts(Array.from({ length: 5 }, (_, i) => contact(500 + index * 5 + i)))),
      })
      await t.rejects(loads.process(chunk(0)), /simulated crash/)
      if (s.keepsCounts) t.same(await truth(s), { counted: 18, counter: 18 }, 'the crashed chunk wrote nothing')
      else t.same(await truth(s), { counted: 23, counter: 18 }, 'the crashed chunk is written, not counted yet')
      await Promise.all([loads.process(chunk(0)), loads.process(chunk(0)), loads.process(chunk(1))])
      await loads.process(chunk(1))
      await loads.process(chunk(0))
      t.equal((await operations.find('acme', op._id))!.status, 'succeeded')
      await check(28, '10 more, once each')
      t.equal(await currentActive(base, batch._id), 28, 'the cap reads it')
    })

    t.test('dialing to done, cancel and reschedule move it; a batch delete takes its contacts out', async t => {
      const batchId = await createBatch(base)
      await load(base, batchId, {
        contacts: [
          contact(700, { customFields: { simulatedOutcomes: 'answered' } }),
          contact(701, { customFields: { simulatedOutcomes: 'answered' } }),
          contact(702, { scheduledAt: new Date(platform.clock.now() + 86_400_000).toISOString() }),
          contact(703, { scheduledAt: new Date(platform.clock.now() + 86_400_000).toISOString() }),
        ],
      })
      await check(32, 'loaded')
      await startBatch(base, batchId)
      await cycle()
      await check(30, 'two answered: done')
      const contacts = (await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts?limit=10`)).json.data
      const byIdentifier = new Map<string, any>(contacts.map((c: any) => [c.identifier, c]))
      const id = (n: number) => byIdentifier.get(`c${n}`).contactId
      t.equal((await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts/${id(702)}/cancel`)).status, 200)
      t.equal((await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts/${id(702)}/cancel`)).status, 200, 'cancelled twice')
      await check(29, 'one cancelled')
      const at = new Date(platform.clock.now() + 3_600_000).toISOString()
      t.equal((await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts/${id(700)}/reschedule`, { body: { scheduledAt: at } })).status, 200)
      t.equal((await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts/${id(702)}/reschedule`, { body: { scheduledAt: at } })).status, 200)
      await check(31, 'two back to pending')
      t.equal(await currentActive(base, batchId), 31)
      await stopBatch(base, batchId)
      const del = await call(base, 'DELETE', `/dialer/v1/batches/${batchId}`)
      await waitForOperation(base, del.json.operationId)
      await check(28, 'its 3 active contacts gone')
      t.equal(await currentActive(base, (await createBatch(base))), 28)
    })

    t.test('contacts from before the counter are added once at start (MongoDB; the embedded store reads its numbers at once)', async t => {
      const fresh = await startTestService(t, { store, env: { DIALER_MAX_ACTIVE_CONTACTS: String(CAP) } })
      const fs = fresh.service.platform.store
      const batchId = await createBatch(fresh.base)
      await load(fresh.base, batchId, { contacts: Array.from({ length: 7 }, (_, i) => contact(i)) })
      // As the old writer left them: no capCounted, no counter, no migration mark.
      await fs.collection(COLLECTIONS.contacts).updateMany({}, { $unset: { capCounted: '' } })
      await fs.collection(ACCOUNT_COUNTERS).deleteMany({})
      await fs.collection('dialer_migrations').deleteMany({})
      const active = new ActiveContacts(fs)
      t.equal(await active.count('acme'), 7, fs.keepsCounts ? "the store's numbers" : 'counts contacts until migrated')
      await active.start(fresh.service.platform.logger)
      await active.stop()
      t.same(await truth(fs), { counted: 7, counter: 7 })
      t.equal(await active.count('acme'), 7, 'then reads the counter')
    })
  })
}
