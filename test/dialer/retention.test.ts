// Retention of the dialer's data over HTTP, on a manual clock: a finished batch dates its
// contacts (done ones: the TTL field; active ones: none, the pass removes them when the batch's
// retention ends), a batch started again is not finished, attempts expire after 90 days, finished
// batches 90 days after they finished, the batch log after 365. On the embedded store the test
// moves the service clock and runs the store's sweep; MongoDB's TTL monitor runs on the server's
// own clock, so there the test reads the TTL indexes it declared.
import t from 'tap'
import { MongoClient } from 'mongodb'
import { call, STORES } from '../support/harness.js'
import { contact, createBatch, load, startBatch, startDialingService } from '../support/dialer.js'
import { COLLECTIONS, type ContactDoc } from '../../dialer/collections.js'
import { retentionOf } from '../../dialer/index.js'
import type { BatchDoc } from '../../dialer/batches.js'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import type { Platform } from '../../platform/index.js'

const DAY = 86_400_000

const answered = (n: number) => contact(n, { customFields: { simulatedOutcomes: 'answered' } })
const noAnswer = (n: number) => contact(n, { customFields: { simulatedOutcomes: 'no_answer' } })

/** Sweeps the embedded store until nothing more expires (one sweep takes a bounded number). */
async function sweep(platform: Platform) {
  const store = platform.store as LmdbStore
  while ((await store.sweep()) > 0);
}

for (const store of STORES) {
  t.test(`dialer retention on the ${store} store`, async t => {
    const { base, service, clock, cycle, mongoUrl } = await startDialingService(t, store, { DIALER_SIM_OUTCOMES: 'answered=100' })
    const { platform } = service
    const retention = retentionOf(platform)
    const contacts = platform.store.collection<ContactDoc>(COLLECTIONS.contacts)
    const batches = platform.store.collection<BatchDoc>(COLLECTIONS.batches)
    const attempts = platform.store.collection(COLLECTIONS.attempts)
    const logs = platform.store.collection(COLLECTIONS.logs)
    const stamps = async (batchId: string) =>
      new Map((await contacts.find({ batchId })).map(c => [c.identifier, c.batchFinishedAt?.getTime() ?? null]))

    // Completed: every contact answered. Running: a contact still to call back. Archived while
    // created: its contacts were never dialed (still pending). Started again after completing.
    const completed = await createBatch(base, { name: 'completed' })
    const running = await createBatch(base, { name: 'running', rules: { maxAttempts: 5 } })
    const archived = await createBatch(base, { name: 'archived' })
    await load(base, completed, { contacts: [answered(1), answered(2)] })
    await load(base, running, { contacts: [noAnswer(3)] })
    await load(base, archived, { contacts: [answered(4)] })
    await startBatch(base, completed)
    await startBatch(base, running)
    const dialedAt = clock.now()
    await cycle()
    await cycle()
    const archive = await call(base, 'POST', `/dialer/v1/batches/${archived}/archive`)
    t.equal(archive.status, 202)
    await retention.pass()

    t.test('a finished batch dates its contacts that are done; active ones and unfinished batches get no date', async t => {
      const view = (await call(base, 'GET', `/dialer/v1/batches/${completed}`)).json
      t.equal(view.status, 'completed')
      t.equal(view.finishedAt, new Date(dialedAt).toISOString(), 'finishedAt: when it completed')
      t.same(await stamps(completed), new Map([['c1', dialedAt], ['c2', dialedAt]]), 'done contacts carry it')
      t.same(await stamps(running), new Map([['c3', null]]), 'a running batch: none')
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${running}`)).json.finishedAt, null)
      const archivedView = (await call(base, 'GET', `/dialer/v1/batches/${archived}`)).json
      t.equal(archivedView.finishedAt, new Date(dialedAt).toISOString(), 'archived: finished')
      t.same(await stamps(archived), new Map([['c4', null]]), 'a pending contact keeps no date (it is in the account cap)')
      t.equal(await batches.countDocuments({ stampsWanted: true }), 0, 'every request handled')
    })

    t.test('started again: not finished, dates taken off; finished again: dated anew', async t => {
      const again = await createBatch(base, { name: 'again' })
      await load(base, again, { contacts: [answered(5)] })
      await startBatch(base, again)
      await cycle()
      await cycle()
      await retention.pass()
      const first = clock.now()
      t.same(await stamps(again), new Map([['c5', first]]))
      clock.advance(DAY)
      await load(base, again, { contacts: [{ ...answered(5), onDuplicate: 'recontact' }] })
      await retention.pass()
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${again}`)).json.finishedAt, new Date(clock.now()).toISOString(), 'a load into it: its retention counts from the load')
      t.same(await stamps(again), new Map([['c5', null]]), 'recontacted (active again): no date')
      await startBatch(base, again)
      await retention.pass()
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${again}`)).json.finishedAt, null, 'running: not finished')
      await cycle()
      await cycle()
      await retention.pass()
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${again}`)).json.status, 'completed')
      t.same(await stamps(again), new Map([['c5', clock.now()]]), 'completed again: the new date')
      await call(base, 'DELETE', `/dialer/v1/batches/${again}`)
    })

    if (store === 'memory') {
      t.test('expiry on the service clock: attempts after 90 days, finished batches with their contacts, the batch log after a year', async t => {
        t.ok((await attempts.countDocuments({ batchId: running })) > 0 && (await attempts.countDocuments({ batchId: completed })) > 0, 'attempts before')
        clock.set(dialedAt + 89 * DAY)
        await sweep(platform)
        t.ok((await attempts.countDocuments({ batchId: completed })) > 0, 'attempts at 89 days: kept')
        t.equal(await contacts.countDocuments({ batchId: completed }), 2, 'contacts of a batch finished 89 days ago: kept')

        clock.set(dialedAt + 90 * DAY + 1)
        await sweep(platform)
        t.equal(await attempts.countDocuments({ batchId: completed }), 0, 'attempts past 90 days: gone')
        t.equal(await attempts.countDocuments({ startedAt: { $lte: new Date(clock.now() - 90 * DAY) } }), 0, 'none older anywhere')
        t.ok((await attempts.countDocuments({ batchId: running })) > 0, 'the running batch`s later ones are kept')
        t.equal(await contacts.countDocuments({ batchId: completed }), 0, 'the done contacts of the completed batch: gone')
        t.equal(await contacts.countDocuments({ batchId: archived }), 1, 'the pending one of the archived batch waits for the pass')
        t.equal(await contacts.countDocuments({ batchId: running }), 1, 'a running batch keeps its contacts')
        const pass = await retention.pass()
        t.equal(pass.purged, 2, 'the pass removed what the two finished batches left')
        t.equal(await contacts.countDocuments({ batchId: archived }), 0)
        t.equal((await call(base, 'GET', `/dialer/v1/batches/${completed}`)).status, 200, 'the batch itself outlives its contacts a day')

        clock.set(dialedAt + 91 * DAY + 1)
        await sweep(platform)
        t.equal((await call(base, 'GET', `/dialer/v1/batches/${completed}`)).status, 404, 'then it goes')
        t.equal((await call(base, 'GET', `/dialer/v1/batches/${archived}`)).status, 404)
        t.equal((await call(base, 'GET', `/dialer/v1/batches/${running}`)).status, 200, 'a running batch stays')
        t.equal(await contacts.countDocuments({ batchId: running }), 1)
        t.ok((await logs.countDocuments({ batchId: completed })) > 0, 'the batch log of a gone batch is kept (audit)')

        clock.set(dialedAt + 365 * DAY + 1)
        await sweep(platform)
        t.equal(await logs.countDocuments({ batchId: { $in: [completed, archived] } }), 0, 'the batch log after a year: gone')
        t.equal((await call(base, 'GET', `/dialer/v1/batches/${running}`)).status, 200)
      })
    } else {
      t.test('MongoDB: TTL indexes with the retention of each kind', async t => {
        const client = await MongoClient.connect(mongoUrl!)
        t.teardown(() => client.close())
        const db = client.db()
        const ttl = async (collection: string, name: string) => {
          const index = (await db.collection(collection).listIndexes().toArray()).find(i => i.name === name)
          return index && { key: index.key, expireAfterSeconds: index.expireAfterSeconds, partialFilterExpression: index.partialFilterExpression }
        }
        t.same(await ttl(COLLECTIONS.attempts, 'started_ttl'), { key: { startedAt: 1 }, expireAfterSeconds: 90 * 86_400, partialFilterExpression: undefined })
        t.same(await ttl(COLLECTIONS.logs, 'created_ttl'), { key: { createdAt: 1 }, expireAfterSeconds: 365 * 86_400, partialFilterExpression: undefined })
        t.same(await ttl(COLLECTIONS.batches, 'finished_ttl'), { key: { finishedAt: 1 }, expireAfterSeconds: 91 * 86_400, partialFilterExpression: undefined }, 'a day after its contacts')
        t.same(await ttl(COLLECTIONS.contacts, 'batch_finished_ttl'), { key: { batchFinishedAt: 1 }, expireAfterSeconds: 90 * 86_400, partialFilterExpression: { batchFinished: true } })
        t.same(await ttl(COLLECTIONS.importErrors, 'batch_finished_ttl'), { key: { batchFinishedAt: 1 }, expireAfterSeconds: 90 * 86_400, partialFilterExpression: { batchFinished: true } })
      })
    }
  })
}

t.test('retention settings: another number of days, or 0 to keep forever', async t => {
  const { service, mongoUrl } = await startDialingService(t, 'mongo', { ATTEMPT_RETENTION_DAYS: '30', BATCH_LOG_RETENTION_DAYS: '0' })
  t.same(service.platform.config.retention, { sessionRecordsDays: 400, reportBlocksDays: 1095, attemptsDays: 30, batchLogsDays: 0, finishedBatchesDays: 90 })
  const client = await MongoClient.connect(mongoUrl!)
  t.teardown(() => client.close())
  const indexes = async (collection: string) => (await client.db().collection(collection).listIndexes().toArray()).map(i => [i.name, i.expireAfterSeconds ?? null])
  t.match(await indexes(COLLECTIONS.attempts), [['_id_', null], ['batch_started', null], ['batch_outcome', null], ['contact_started', null], ['account_started', null], ['started_ttl', 30 * 86_400]])
  t.same((await indexes(COLLECTIONS.logs)).find(([name]) => name === 'created_ttl'), ['created_ttl', null], 'kept forever: the index without a TTL')
})
