// Retention of the reports' data over HTTP, on both stores, on a service clock set years ahead
// (the MongoDB test server's TTL monitor runs on its own clock, so nothing expires there behind
// the test's back): a range that reaches back past what is kept answers 410 DATA_EXPIRED with
// the first instant still kept, never zeros; aggregates outlive the records on the 15-minute
// grid; a lengthened retention does not make deleted ranges read as empty; records and blocks
// written before they carried their TTL dates get them; the embedded store's sweep expires them.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { rmSync } from 'node:fs'
import { MongoClient } from 'mongodb'
import { call, mongoUrlFor, STORES, startTestService, eventually, type StoreKind } from '../support/harness.js'
import { ManualClock } from '../../dialer/scheduler/index.js'
import { LmdbStore, embeddedStorePath } from '../../platform/store/lmdb-store.js'
import { MongoStore } from '../../platform/store/mongo-store.js'
import type { Store } from '../../platform/store/index.js'
import { SESSION_RECORDS, type SessionRecordDoc } from '../../reports/index.js'
import { SLOT_COUNTS, SLOT_STATS, SLOT_STATS_OPTIONS } from '../../reports/slots.js'
import { ER, query, SD, seed, sessionRecord } from './support.js'

const DAY = 86_400_000
const MIN = 60_000
// A Monday at midnight UTC, years ahead of the real date.
const NOW = Date.parse('2036-03-03T00:00:00Z')
const REPORT = `${ER}/sessions-overview`

async function sweep(store: Store) {
  if (store instanceof LmdbStore) while ((await store.sweep()) > 0);
}

/** Two services in a row on one database: the data directory or MongoDB database is given to both. */
async function sharedDatabase(t: Parameters<typeof startTestService>[0], store: StoreKind) {
  const dataDir = `/tmp/switchboard-test-${randomUUID()}`
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const mongoUrl = store === 'mongo' ? await mongoUrlFor(t) : undefined
  // The test sweeps when it means to: a background sweep on the clock set years ahead would expire the seeds early.
  return { DATA_DIR: dataDir, STORE_TTL_SWEEP_MS: '0', ...(mongoUrl ? { MONGO_URL: mongoUrl } : {}) }
}

for (const store of STORES) {
  t.test(`report retention on the ${store} store`, async t => {
    const clock = new ManualClock(NOW)
    const shared = await sharedDatabase(t, store)
    const first = await startTestService(t, { store, clock, env: shared })
    const get = (path: string, params: Record<string, string | number>, base = first.base) =>
      call(base, 'GET', path + query({ crew_id: 'crew-1', page: 0, pageSize: 100, timeZone: 'UTC', ...params }))
    await seed(first.service.platform.store, [
      sessionRecord({ _id: 'old-500', start_time: NOW - 500 * DAY + 7 * MIN }),
      sessionRecord({ _id: 'old-1100', start_time: NOW - 1100 * DAY + 7 * MIN }),
      sessionRecord({ _id: 'recent', start_time: NOW - 10 * DAY + 7 * MIN }),
    ])
    const records = first.service.platform.store.collection<SessionRecordDoc>(SESSION_RECORDS)
    // The kept horizon is written a minute ahead of the TTLs it follows (reports/retention.ts).
    const recordsFrom = NOW - 400 * DAY + MIN
    const blocksFrom = NOW - 1095 * DAY + MIN

    t.test('sessions-detail: a range before the records kept is 410 DATA_EXPIRED, never an empty page', async t => {
      const gone = await get(SD, { start_ts: NOW - 501 * DAY, end_ts: NOW })
      t.equal(gone.status, 410)
      t.match(gone.json, { code: 'DATA_EXPIRED', parameter: 'start_ts', retainedFrom: recordsFrom, details: [{ parameter: 'start_ts', code: 'DATA_EXPIRED' }] })
      t.match(gone.json.message, /SESSION_RECORD_RETENTION_DAYS/)
      const kept = await get(SD, { start_ts: recordsFrom, end_ts: NOW })
      t.equal(kept.status, 200)
      t.same(kept.json.data.map((r: any) => r.session_id), ['recent'])
    })

    t.test('the embedded store`s sweep, or MongoDB`s TTL indexes: records after 400 days, blocks after 1095', async t => {
      t.same((await records.find({}, { sort: { _id: 1 } })).map(r => [r._id, r.started_at?.getTime()]), [
        ['old-1100', NOW - 1100 * DAY + 7 * MIN],
        ['old-500', NOW - 500 * DAY + 7 * MIN],
        ['recent', NOW - 10 * DAY + 7 * MIN],
      ], 'each record carries its start as a Date')
      const counts = first.service.platform.store.collection(SLOT_COUNTS)
      const stats = first.service.platform.store.collection(SLOT_STATS, SLOT_STATS_OPTIONS)
      const level0 = await stats.findOne({ level: 0, slot: NOW - 500 * DAY })
      t.ok(level0?.slot_at instanceof Date && level0.slot_at.getTime() === NOW - 500 * DAY, 'a block carries its start as a Date')
      if (store === 'memory') {
        await sweep(first.service.platform.store)
        t.same((await records.find({})).map(r => r._id), ['recent'], 'records older than 400 days: gone')
        t.equal(await counts.countDocuments({ slot: { $lt: NOW - 1095 * DAY } }), 0, 'blocks older than 1095 days: gone')
        t.equal(await stats.countDocuments({ slot: { $lt: NOW - 1095 * DAY } }), 0)
        t.ok((await stats.countDocuments({ slot: { $lt: NOW - 400 * DAY } })) > 0, 'younger blocks stay: the counts outlive the records')
      } else {
        const client = await MongoClient.connect(shared.MONGO_URL!)
        t.teardown(() => client.close())
        const ttl = async (collection: string, name: string) => {
          const index = (await client.db().collection(collection).listIndexes().toArray()).find(i => i.name === name)
          return index && [index.key, index.expireAfterSeconds]
        }
        t.same(await ttl(SESSION_RECORDS, 'started_ttl'), [{ started_at: 1 }, 400 * 86_400])
        t.same(await ttl(SLOT_COUNTS, 'slot_ttl'), [{ slot_at: 1 }, 1095 * 86_400])
        t.same(await ttl(SLOT_STATS, 'slot_ttl'), [{ slot_at: 1 }, 1095 * 86_400])
      }
    })

    t.test('execute-report: whole quarters past the records come from the blocks; an end off the grid there, or a range past the blocks, is 410', async t => {
      const range = { start_ts: NOW - 501 * DAY, end_ts: NOW - 499 * DAY }
      const old = await get(REPORT, range)
      t.equal(old.status, 200, 'on the quarter grid: answered from the blocks')
      t.same(old.json.data.map((r: any) => r.metrics.sessions), [1], 'the session of 500 days ago is still counted')
      const offGrid = await get(REPORT, { ...range, start_ts: range.start_ts + 1 })
      t.equal(offGrid.status, 410)
      t.match(offGrid.json, { code: 'DATA_EXPIRED', parameter: 'start_ts', retainedFrom: recordsFrom })
      t.match(offGrid.json.message, /quarter hour/)
      t.match((await get(REPORT, { ...range, end_ts: range.end_ts - 1 })).json, { code: 'DATA_EXPIRED', parameter: 'end_ts' })
      const tooOld = await get(REPORT, { start_ts: NOW - 1200 * DAY, end_ts: NOW, groupByTime: 'month' })
      t.equal(tooOld.status, 410)
      t.match(tooOld.json, { code: 'DATA_EXPIRED', parameter: 'start_ts', retainedFrom: blocksFrom })
      t.match(tooOld.json.message, /REPORT_BLOCK_RETENTION_DAYS/)
      const recent = await get(REPORT, { start_ts: NOW - 11 * DAY + 1, end_ts: NOW - 1 })
      t.equal(recent.status, 200, 'off the grid within the records kept: fine')
      t.same(recent.json.data.map((r: any) => r.metrics.sessions), [1])
    })

    t.test('a retention lengthened later does not make the deleted range read as empty', async t => {
      await first.close()
      const second = await startTestService(t, { store, clock, env: { ...shared, SESSION_RECORD_RETENTION_DAYS: '800' } })
      const again = await get(SD, { start_ts: NOW - 501 * DAY, end_ts: NOW }, second.base)
      t.equal(again.status, 410, 'still gone: deleted under the shorter retention')
      t.equal(again.json.retainedFrom, recordsFrom)
      clock.advance(DAY)
      t.equal((await get(SD, { start_ts: recordsFrom, end_ts: NOW }, second.base)).status, 200, 'what was kept still answers')
      await second.close()
    })
  })

  t.test(`records and blocks written before their TTL dates get them (${store} store)`, async t => {
    const env = await sharedDatabase(t, store)
    const legacy: Store = store === 'mongo' ? await MongoStore.connect(env.MONGO_URL!) : new LmdbStore({ path: embeddedStorePath(env.DATA_DIR), sweepIntervalMs: 0 })
    await seed(legacy, [sessionRecord({ _id: 'legacy', start_time: NOW - 20 * DAY })])
    // As an older version wrote them: no started_at, no slot_at.
    await legacy.collection(SESSION_RECORDS).updateMany({}, { $unset: { started_at: '' } })
    await legacy.collection(SLOT_COUNTS).updateMany({}, { $unset: { slot_at: '' } })
    await legacy.collection(SLOT_STATS, SLOT_STATS_OPTIONS).updateMany({}, { $unset: { slot_at: '' } })
    t.equal(await legacy.collection(SLOT_STATS, SLOT_STATS_OPTIONS).countDocuments({ slot_at: { $exists: true } }), 0)
    await legacy.close()

    const { service } = await startTestService(t, { store, clock: new ManualClock(NOW), env })
    const s = service.platform.store
    const dated = await eventually(
      async () => [
        await s.collection(SESSION_RECORDS).countDocuments({ started_at: { $exists: false } }),
        await s.collection(SLOT_COUNTS).countDocuments({ slot_at: { $exists: false } }),
        await s.collection(SLOT_STATS, SLOT_STATS_OPTIONS).countDocuments({ slot_at: { $exists: false } }),
      ],
      undated => undated.every(n => n === 0),
    )
    t.same(dated, [0, 0, 0], 'every record and block dated')
    t.equal((await s.collection(SESSION_RECORDS).findOne({ _id: 'legacy' }))!.started_at.getTime(), NOW - 20 * DAY)
    t.equal(await s.collection(SLOT_COUNTS).countDocuments({}), 5, 'one block per level, none added')
  })
}
