// The store contract: MemoryStore (mingo, in-process), LmdbStore (the embedded default: LMDB in
// a temporary directory, mingo over ordered indexes) and MongoStore (the official driver, here
// against the MongoDB wire-protocol test server, a fresh database per run) must answer alike for
// everything the repositories rely on. Every subtest runs on every store; a difference is a bug
// in one of them. The one deliberate difference is noted where it shows: an upsert whose filter
// and $setOnInsert give no _id gets a generated one (a UUID string here, an ObjectId from mongod);
// repositories always give the _id. 'lmdb-thread' is LmdbStore seen through OffLoopStore (its
// writes run in the store's write thread, reads on this loop): every read after a write must see it.
import t from 'tap'
import fc from 'fast-check'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import { MemoryStore } from '../../platform/store/memory-store.js'
import { MongoStore } from '../../platform/store/mongo-store.js'
import { type Doc, DuplicateKeyError, type Store, UpdateRefusedError } from '../../platform/store/types.js'
import { UnsafeUpdatePathError } from '../../platform/store/update-paths.js'
import { OffLoopStore } from '../../platform/store/write-thread.js'
import { startMongoTestServer, type MongoTestServer } from '../support/mongo-server.js'
import { bucketKey, bucketKeyExpression, HOUR, offsetSegments } from '../../reports/time-buckets.js'

type Kind = 'memory' | 'lmdb' | 'lmdb-thread' | 'mongo'

let server: MongoTestServer | undefined
t.teardown(() => server?.stop())

async function open(kind: Kind): Promise<Store> {
  if (kind === 'memory') return new MemoryStore()
  if (kind === 'lmdb' || kind === 'lmdb-thread') {
    const dir = mkdtempSync(join(tmpdir(), 'sb-contract-'))
    t.teardown(() => rmSync(dir, { recursive: true, force: true }))
    const store = new LmdbStore({ path: dir })
    if (kind === 'lmdb') return store
    const offLoop = new OffLoopStore(store)
    // Closing it releases the thread's handle; the store is closed after.
    const release = offLoop.close.bind(offLoop)
    return Object.assign(offLoop, { close: () => release().then(() => store.close()) })
  }
  server ??= await startMongoTestServer()
  const url = new URL(server.url)
  url.pathname = `/contract_${randomUUID().replace(/-/g, '')}`
  return MongoStore.connect(url.toString())
}

/** The error a promise rejects with (or null when it resolves). */
const failure = (p: Promise<unknown>) => p.then(() => null, (e: unknown) => e)

const at = (iso: string) => new Date(iso)
/** Group rows in key order ($group returns them in no particular order). */
const byKey = <T extends { _id: number }>(rows: T[]) => [...rows].sort((a, b) => a._id - b._id)
const ids = (docs: Doc[]) => docs.map(d => d._id)

/**
 * Strings around the lengths where the embedded store's keys change how they hold one (64, and
 * the cut at 100), sharing long prefixes, then characters keys treat apart (U+0000 to U+0006,
 * the byte 27, astral ones) or any code point outside U+E000..U+FFFF: mongod and the LMDB keys
 * sort those after astral characters (code-point order), mingo before them (UTF-16 order), a
 * difference of the memory store that is not under test here.
 */
const codePoint = (from: number, to: number) => fc.integer({ min: from, max: to }).map(c => String.fromCodePoint(c))
const stringUnit = fc.oneof(
  { weight: 2, arbitrary: fc.constantFrom('\0', '\u0001', '\u0004', '\u0005', '\u0006', '\u001b', '\u001c', 'a', 'p', 'q', '\u00e9', '\u4e00', '\u{1f600}', '\u{10ffff}') },
  { weight: 1, arbitrary: fc.oneof(codePoint(0, 0xd7ff), codePoint(0x10000, 0x10ffff)) },
)
const anyString = fc
  .tuple(fc.constantFrom(0, 1, 63, 64, 99, 100, 101, 160), fc.array(stringUnit, { maxLength: 5 }))
  .map(([n, tail]) => 'p'.repeat(n) + tail.join(''))
/** mongod's string order: by code point (UTF-8 bytes). */
const byCodePoint = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b))

async function waitFor(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const until = Date.now() + ms
  for (;;) {
    if (await check()) return true
    if (Date.now() > until) return false
    await new Promise(r => setTimeout(r, 100))
  }
}

for (const kind of ['memory', 'lmdb', 'lmdb-thread', 'mongo'] as const) {
  t.test(`${kind} store`, async t => {
    const store = await open(kind)
    t.teardown(() => store.close())
    let serial = 0
    /** A new, empty collection per subtest. */
    const fresh = (label: string) => {
      const name = `${label}_${++serial}`
      return [store.collection<Doc>(name), name] as const
    }

    t.test('insertOne: a second _id is a DuplicateKeyError', async t => {
      const [c] = fresh('insert')
      await c.insertOne({ _id: 'a', n: 1 })
      const error = await failure(c.insertOne({ _id: 'a', n: 2 }))
      t.ok(error instanceof DuplicateKeyError, 'DuplicateKeyError')
      t.equal((error as DuplicateKeyError).code, 11000)
      t.same(await c.findOne({ _id: 'a' }), { _id: 'a', n: 1 }, 'the first stays')
    })

    t.test('unique compound index: a second owner of a key is rejected', async t => {
      const [c, name] = fresh('unique')
      await store.ensureIndexes(name, [{ name: 'batch_identifier_unique', key: { batchId: 1, identifier: 1 }, unique: true }])
      await c.insertOne({ _id: 'c1', batchId: 'b1', identifier: 'x' })
      t.ok((await failure(c.insertOne({ _id: 'c2', batchId: 'b1', identifier: 'x' }))) instanceof DuplicateKeyError)
      await c.insertOne({ _id: 'c3', batchId: 'b2', identifier: 'x' })
      await c.insertOne({ _id: 'c4', batchId: 'b1', identifier: 'y' })
      t.equal(await c.countDocuments({}), 3)

      // Updating a document into a taken key fails and leaves it as it was.
      t.ok((await failure(c.updateOne({ _id: 'c3' }, { $set: { batchId: 'b1', note: 'moved' } }))) instanceof DuplicateKeyError)
      t.same(await c.findOne({ _id: 'c3' }), { _id: 'c3', batchId: 'b2', identifier: 'x' }, 'unchanged')
      t.ok((await failure(c.updateMany({ _id: 'c4' }, { $set: { identifier: 'x' } }))) instanceof DuplicateKeyError)
      t.same(await c.findOne({ _id: 'c4' }), { _id: 'c4', batchId: 'b1', identifier: 'y' }, 'unchanged')
      t.ok((await failure(c.findOneAndUpdate({ _id: 'c4' }, { $set: { identifier: 'x' } }))) instanceof DuplicateKeyError)
      t.same(await c.findOne({ _id: 'c4' }), { _id: 'c4', batchId: 'b1', identifier: 'y' }, 'unchanged')

      // A key freed by an update or a delete can be taken again; ensureIndexes twice is harmless.
      await c.updateOne({ _id: 'c1' }, { $set: { identifier: 'z' } })
      await c.insertOne({ _id: 'c5', batchId: 'b1', identifier: 'x' })
      await c.deleteOne({ _id: 'c5' })
      await c.insertOne({ _id: 'c6', batchId: 'b1', identifier: 'x' })
      await store.ensureIndexes(name, [{ name: 'batch_identifier_unique', key: { batchId: 1, identifier: 1 }, unique: true }])
      t.ok((await failure(c.insertOne({ _id: 'c7', batchId: 'b1', identifier: 'x' }))) instanceof DuplicateKeyError)
    })

    t.test('insertMany: ordered:false skips duplicates, ordered:true stops at the first', async t => {
      const [c, name] = fresh('insert_many')
      await store.ensureIndexes(name, [{ name: 'identity_unique', key: { accountId: 1, address: 1 }, unique: true }])
      await c.insertOne({ _id: 'a', accountId: 'acme', address: 'a@x' })
      const loose = await c.insertMany(
        [
          { _id: 'a', accountId: 'acme', address: 'other@x' }, // _id taken
          { _id: 'b', accountId: 'acme', address: 'b@x' },
          { _id: 'c', accountId: 'acme', address: 'a@x' }, // unique key taken
          { _id: 'b', accountId: 'acme', address: 'b2@x' }, // repeat within the request
          { _id: 'd', accountId: 'other', address: 'a@x' },
        ],
        { ordered: false },
      )
      t.equal(loose.insertedCount, 2)
      t.same(loose.duplicateKeyIndexes, [0, 2, 3])
      t.same(ids(await c.find({}, { sort: { _id: 1 } })), ['a', 'b', 'd'], 'the rest landed')
      t.equal((await c.findOne({ _id: 'b' }))!.address, 'b@x')

      const strict = await c.insertMany(
        [
          { _id: 'e', accountId: 'acme', address: 'e@x' },
          { _id: 'a', accountId: 'acme', address: 'f@x' },
          { _id: 'g', accountId: 'acme', address: 'g@x' },
        ],
        { ordered: true },
      )
      t.equal(strict.insertedCount, 1)
      t.same(strict.duplicateKeyIndexes, [1])
      t.same(ids(await c.find({}, { sort: { _id: 1 } })), ['a', 'b', 'd', 'e'], 'nothing after the duplicate')

      const empty = await c.insertMany([], { ordered: false })
      t.equal(empty.insertedCount, 0)
    })

    t.test('find / findOne: filters, sort, skip, limit, projection', async t => {
      const [c] = fresh('find')
      await c.insertMany([
        { _id: 'r1', group: 'a', n: 5, at: at('2026-01-01T00:00:00Z'), meta: { tier: 'gold', score: 10 }, tags: ['x', 'y'], end_time: null,
          addresses: [{ type: 'phone', value: '1' }, { type: 'email', value: 'a@x' }] },
        { _id: 'r2', group: 'a', n: 2, at: at('2026-01-02T00:00:00Z'), meta: { tier: 'silver', score: 20 }, tags: ['y'], end_time: 7,
          addresses: [{ type: 'phone', value: '2' }] },
        { _id: 'r3', group: 'b', n: 9, at: at('2026-01-03T00:00:00Z'), meta: { tier: 'gold', score: 30 }, tags: [] },
        { _id: 'r4', group: 'b', n: 2, at: at('2026-01-04T00:00:00Z'), meta: { tier: 'bronze', score: 40 }, tags: ['z'], extra: 3 },
        { _id: 'r5', group: 'c', n: 7.5, at: at('2026-01-05T00:00:00Z'), meta: { tier: 'gold', score: 50 }, tags: ['x'], end_time: 9 },
      ])
      const q = async (filter: Record<string, any>, options = {}) => ids(await c.find(filter, { sort: { _id: 1 }, ...options }))

      t.same(await q({ group: { $in: ['a', 'c'] } }), ['r1', 'r2', 'r5'], '$in')
      t.same(await q({ group: { $nin: ['a', 'c'] } }), ['r3', 'r4'], '$nin')
      t.same(await q({ group: { $ne: 'a' } }), ['r3', 'r4', 'r5'], '$ne')
      t.same(await q({ extra: { $ne: 3 } }), ['r1', 'r2', 'r3', 'r5'], '$ne matches a missing field')
      t.same(await q({ tags: { $ne: 'x' } }), ['r2', 'r3', 'r4'], '$ne on an array: no element equals')
      t.same(await q({ tags: { $nin: ['x', 'z'] } }), ['r2', 'r3'], '$nin on an array')
      t.same(await q({ tags: 'y' }), ['r1', 'r2'], 'equality matches an array element')
      t.same(await q({ n: { $gt: 2, $lte: 7.5 } }), ['r1', 'r5'], '$gt/$lte on numbers')
      t.same(await q({ at: { $gt: at('2026-01-02T00:00:00Z'), $lte: at('2026-01-04T00:00:00Z') } }), ['r3', 'r4'], '$gt/$lte on Dates')
      t.same(await q({ at: at('2026-01-03T00:00:00Z') }), ['r3'], 'equality on a Date')
      t.same(await q({ 'meta.tier': 'gold', 'meta.score': { $gte: 30 } }), ['r3', 'r5'], 'nested paths')
      t.same(await q({ end_time: null }), ['r1', 'r3', 'r4'], 'null matches null and missing')
      t.same(await q({ end_time: { $ne: null } }), ['r2', 'r5'], '$ne null: present and not null')
      t.same(await q({ end_time: { $exists: true } }), ['r1', 'r2', 'r5'], '$exists: a stored null exists')
      t.same(await q({ end_time: { $exists: false } }), ['r3', 'r4'], '$exists false: only absent fields')
      t.same(await q({ end_time: { $nin: [null, 9] } }), ['r2'], '$nin with null excludes null and missing')
      t.same(ids(await c.find({ _id: 'r4', group: { $ne: 'a' } })), ['r4'], 'one _id with a $ne (a guarded single-document write)')
      t.same(ids(await c.find({ _id: 'r1', group: { $ne: 'a' } })), [], 'and the guard refusing')
      t.same(await q({ 'addresses.type': 'email' }), ['r1'], 'a dotted path through an array of objects')
      t.same(await q({ 'addresses.type': 'phone', group: 'a' }), ['r1', 'r2'])
      t.same(await q({ tags: ['x', 'y'] }), ['r1'], 'equality with a whole array')
      t.same(await q({ meta: { tier: 'gold', score: 30 } }), ['r3'], 'equality with an embedded document')
      t.same(await q({ at: { $in: [at('2026-01-02T00:00:00Z'), at('2026-01-05T00:00:00Z')] } }), ['r2', 'r5'], '$in with Dates')
      t.same(await q({ group: 'a', $or: [{ n: { $gt: 3 } }, { n: 2, _id: { $gt: 'r1' } }] }), ['r1', 'r2'], '$or (the keyset seek)')
      t.same(await q({ _id: { $in: ['r2', 'r4', 'nope'] } }), ['r2', 'r4'], '_id $in')
      // Plain equalities without sort or skip (a shortcut of the memory store), counted and found.
      for (const [filter, expected] of [
        [{ 'addresses.type': 'email' }, ['r1']],
        [{ 'addresses.type': 'phone', group: 'a' }, ['r1', 'r2']],
        [{ 'addresses.type': null }, ['r3', 'r4', 'r5']],
        [{ 'meta.tier': 'gold', group: 'b' }, ['r3']],
        [{ end_time: null, group: 'b' }, ['r3', 'r4']],
        [{ tags: 'x', group: 'a' }, ['r1']],
      ] as const) {
        t.equal(await c.countDocuments(filter), expected.length, `count ${JSON.stringify(filter)}`)
        t.same(ids(await c.find(filter)).sort(), expected, `find ${JSON.stringify(filter)}`)
        t.equal((await c.findOne(filter))?._id, expected[0], `findOne ${JSON.stringify(filter)}`)
      }
      t.same(await q({ group: 'zzz' }), [], 'no match')

      t.same(ids(await c.find({}, { sort: { group: -1, n: 1, _id: 1 } })), ['r5', 'r4', 'r3', 'r2', 'r1'], 'multi-key sort')
      t.same(ids(await c.find({}, { sort: { n: 1, _id: -1 } })), ['r4', 'r2', 'r1', 'r5', 'r3'], 'ties broken by the second key')
      t.same(ids(await c.find({}, { sort: { at: -1 } })), ['r5', 'r4', 'r3', 'r2', 'r1'], 'sort by Date')
      t.same(ids(await c.find({}, { sort: { end_time: 1, _id: 1 } })), ['r1', 'r3', 'r4', 'r2', 'r5'], 'null and missing sort first')
      t.same(ids(await c.find({}, { sort: { n: 1, _id: 1 }, skip: 1, limit: 2 })), ['r4', 'r1'], 'skip + limit')
      t.same(ids(await c.find({ group: 'b' }, { sort: { _id: 1 }, skip: 5 })), [], 'skip past the end')

      t.same(await c.find({ _id: 'r1' }, { projection: { n: 1, 'meta.tier': 1 } }), [{ _id: 'r1', n: 5, meta: { tier: 'gold' } }], 'inclusion keeps _id')
      t.same(await c.findOne({ _id: 'r2' }, { projection: { _id: 0, group: 1 } }), { group: 'a' }, '_id excluded')
      t.same(await c.findOne({ _id: 'r4' }, { projection: { meta: 0, tags: 0, at: 0 } }), { _id: 'r4', group: 'b', n: 2, extra: 3 }, 'exclusion')
      t.same(await c.find({ group: 'a' }, { sort: { _id: 1 }, projection: { n: 1, end_time: 1, missing: 1 } }), [{ _id: 'r1', n: 5, end_time: null }, { _id: 'r2', n: 2, end_time: 7 }], 'top-level inclusion over several documents; a missing field is left out')
      t.same(await c.findOne({ _id: 'r4' }, { projection: { _id: 1 } }), { _id: 'r4' }, 'only _id')
      t.same(await c.findOne({ _id: 'r4' }, { projection: { _id: 0, meta: 0, tags: 0, at: 0 } }), { group: 'b', n: 2, extra: 3 }, 'exclusion with _id')
      t.same(await c.findOne({ _id: 'r4' }, { projection: {} }), await c.findOne({ _id: 'r4' }), 'an empty projection is the whole document')

      t.equal((await c.findOne({ group: 'b' }, { sort: { n: -1 } }))!._id, 'r3', 'findOne honours sort')
      t.equal((await c.findOne({ group: 'b' }, { sort: { n: 1 } }))!._id, 'r4')
      t.equal(await c.findOne({ group: 'zzz' }), null, 'findOne: null when nothing matches')
    })

    t.test('countDocuments', async t => {
      const [c] = fresh('count')
      await c.insertMany(Array.from({ length: 12 }, (_, i) => ({ _id: `d${i}`, state: ['pending', 'in_progress', 'done'][i % 3], n: i })))
      t.equal(await c.countDocuments({}), 12)
      t.equal(await c.countDocuments({ state: { $in: ['pending', 'in_progress'] } }), 8)
      t.equal(await c.countDocuments({ state: 'done', n: { $gte: 5 } }), 3)
      t.equal(await c.countDocuments({ state: 'nope' }), 0)
    })

    t.test('indexed filters stay right as documents move, and after the index is added', async t => {
      const [c, name] = fresh('indexed')
      await c.insertOne({ _id: 'early', accountId: 'acme', crew_id: 'a', start_time: 1, tags: ['x'] })
      await store.ensureIndexes(name, [
        { name: 'account_crew_start', key: { accountId: 1, crew_id: 1, start_time: 1, _id: 1 }, partitionFields: 2 },
        { name: 'tags', key: { tags: 1 } },
      ])
      await c.insertMany([
        { _id: 's1', accountId: 'acme', crew_id: 'a', start_time: 2, tags: ['x', 'y'] },
        { _id: 's2', accountId: 'acme', crew_id: 'b', start_time: 3, tags: 'x' },
        { _id: 's3', accountId: 'other', crew_id: 'a', start_time: 4 },
        { _id: 's4', accountId: 'acme', start_time: 5 },
      ])
      const q = async (filter: Record<string, any>) => ids(await c.find(filter)).sort()
      t.same(await q({ accountId: 'acme', crew_id: 'a' }), ['early', 's1'])
      t.same(await q({ accountId: 'acme', crew_id: { $in: ['a', 'b'] }, start_time: { $gte: 2 } }), ['s1', 's2'])
      t.same(await q({ accountId: 'acme', crew_id: null }), ['s4'], 'a missing field is null')
      t.same(await q({ tags: 'x' }), ['early', 's1', 's2'], 'an indexed array field matches its elements')
      await c.updateOne({ _id: 's1' }, { $set: { crew_id: 'b' } })
      await c.deleteOne({ _id: 'early' })
      await c.updateMany({ accountId: 'other' }, { $set: { accountId: 'acme' } })
      t.same(await q({ accountId: 'acme', crew_id: 'a' }), ['s3'])
      t.same(await q({ accountId: 'acme', crew_id: 'b' }), ['s1', 's2'])
      t.equal(await c.countDocuments({ accountId: 'acme', crew_id: { $in: ['a', 'b'] } }), 3)
      t.same(await c.aggregate([{ $match: { accountId: 'acme', crew_id: 'b' } }, { $group: { _id: '$crew_id', n: { $sum: 1 } } }]), [{ _id: 'b', n: 2 }])
    })

    t.test('countBy and countDocuments over a counted index follow every kind of write (and agree with the documents)', async t => {
      const [c, name] = fresh('counted')
      type Row = { values: unknown[]; n: number }
      const sorted = (rows: Row[]) => [...rows].sort((a, b) => JSON.stringify(a.values).localeCompare(JSON.stringify(b.values)))
      /** The groups counted from the documents themselves (find is proven by the tests above). */
      const fromDocs = async (match: Record<string, unknown>, fields: string[]) => {
        const groups = new Map<string, Row>()
        for (const doc of await c.find(match)) {
          const values = fields.map(f => doc[f] ?? null)
          const row = groups.get(JSON.stringify(values)) ?? { values, n: 0 }
          row.n++
          groups.set(JSON.stringify(values), row)
        }
        return sorted([...groups.values()])
      }
      const check = async (step: string) => {
        for (const batchId of ['b1', 'b2', 'none']) {
          t.same(sorted(await c.countBy({ batchId }, ['state', 'outcome'])), await fromDocs({ batchId }, ['state', 'outcome']), `${step}: ${batchId} by state and outcome`)
          t.same(sorted(await c.countBy({ batchId, state: 'done' }, ['outcome'])), await fromDocs({ batchId, state: 'done' }, ['outcome']), `${step}: ${batchId} done by outcome`)
          t.equal(await c.countDocuments({ batchId }), (await c.find({ batchId })).length, `${step}: ${batchId} count`)
          for (const state of ['pending', 'in_progress', 'done']) t.equal(await c.countDocuments({ batchId, state }), (await c.find({ batchId, state })).length, `${step}: ${batchId} ${state} count`)
          const active = { batchId, state: { $in: ['pending', 'in_progress', 'pending'] } }
          t.equal(await c.countDocuments(active), (await c.find(active)).length, `${step}: ${batchId} count of a $in (a value repeated)`)
        }
        const both = { batchId: { $in: ['b1', 'b2'] }, state: 'done', outcome: null }
        t.equal(await c.countDocuments(both), (await c.find(both)).length, `${step}: two batches, done without an outcome (missing or null)`)
      }
      const contact = (id: string, batchId: string, state: string, outcome?: string | null) => ({ _id: id, batchId, state, ...(outcome === undefined ? {} : { outcome }) })
      // Some documents before the index is declared: it starts from them.
      await c.insertMany([contact('a1', 'b1', 'pending'), contact('a2', 'b1', 'done', 'answered'), contact('a3', 'b2', 'done', null)])
      await store.ensureIndexes(name, [{ name: 'batch_state_outcome', key: { batchId: 1, state: 1, outcome: 1 }, counted: true }])
      await check('declared')
      await c.insertMany([contact('a4', 'b1', 'pending'), contact('a5', 'b1', 'pending'), contact('a6', 'b2', 'in_progress'), contact('a7', 'b1', 'done', 'busy')])
      await check('inserted')
      await c.updateOne({ _id: 'a1' }, { $set: { state: 'in_progress' } })
      await c.findOneAndUpdate({ _id: 'a6', state: 'in_progress' }, { $set: { state: 'done', outcome: 'answered' } }, { returnDocument: 'before' })
      await c.updateOne({ _id: 'a7' }, { $unset: { outcome: '' } })
      await c.updateOne({ _id: 'a2' }, { $set: { note: 'not a counted field' } })
      await check('updated one by one')
      await c.updateMany({ batchId: 'b1', state: 'pending' }, { $set: { state: 'done', outcome: 'no_answer' } })
      await check('updateMany')
      await c.bulkWrite([
        { insertOne: { document: contact('a8', 'b2', 'pending') } },
        { updateOne: { filter: { _id: 'a3' }, update: { $set: { state: 'pending' } } } },
        { updateOne: { filter: { _id: 'a9' }, update: { $set: { batchId: 'b2', state: 'done', outcome: 'busy' } }, upsert: true } },
        { deleteOne: { filter: { _id: 'a4' } } },
      ])
      await check('bulkWrite')
      t.ok(await failure(c.insertOne(contact('a8', 'b1', 'done', 'answered'))), 'a duplicate _id is refused')
      await check('a refused insert moves nothing')
      await c.updateOne({ _id: 'a5' }, { $set: { batchId: 'b2' } })
      await c.deleteMany({ batchId: 'b2', state: 'pending' })
      await check('moved and deleted')
      t.same(await c.countBy({ batchId: 'b1' }, []), [{ values: [], n: await c.countDocuments({ batchId: 'b1' }) }], 'no fields: one row')
    })

    t.test('a partial index follows every kind of write, and queries answer alike whether or not they can use it', async t => {
      const [c, name] = fresh('partial')
      const contact = (id: string, batchId: string, state: string, rank: number) => ({ _id: id, batchId, state, rank })
      // Declared plain first, as an older version of the service did; declared partial below.
      await store.ensureIndexes(name, [{ name: 'batch_state_rank', key: { batchId: 1, state: 1, rank: 1, _id: 1 } }])
      await c.insertMany([contact('p1', 'b1', 'pending', 3), contact('p2', 'b1', 'done', 1), contact('p3', 'b2', 'pending', 2)])
      await store.ensureIndexes(name, [{ name: 'batch_state_rank', key: { batchId: 1, state: 1, rank: 1, _id: 1 }, partialFilterExpression: { state: 'pending' } }])
      await store.ensureIndexes(name, [{ name: 'batch_state_rank', key: { batchId: 1, state: 1, rank: 1, _id: 1 }, partialFilterExpression: { state: 'pending' } }])
      type Row = { _id: string; batchId: string; state: string; rank: number }
      const check = async (step: string) => {
        const all = (await c.find({})) as Row[]
        const expect = (keep: (d: Row) => boolean) => all.filter(keep).sort((a, b) => a.rank - b.rank || a._id.localeCompare(b._id)).map(d => d._id)
        const sort = { rank: 1 as const, _id: 1 as const }
        for (const batchId of ['b1', 'b2']) {
          t.same(ids(await c.find({ batchId, state: 'pending' }, { sort })), expect(d => d.batchId === batchId && d.state === 'pending'), `${step}: ${batchId} pending, in order (the partial index)`)
          t.same(ids(await c.find({ batchId, state: 'pending' }, { sort, limit: 1 })), expect(d => d.batchId === batchId && d.state === 'pending').slice(0, 1), `${step}: ${batchId} first pending`)
          t.same(ids(await c.find({ batchId, state: 'done' }, { sort })), expect(d => d.batchId === batchId && d.state === 'done'), `${step}: ${batchId} done (not in the index)`)
          t.same(ids(await c.find({ batchId, state: { $in: ['pending', 'done'] } }, { sort })), expect(d => d.batchId === batchId && ['pending', 'done'].includes(d.state)), `${step}: ${batchId} a $in the index cannot answer alone`)
          t.same(ids(await c.find({ batchId }, { sort })), expect(d => d.batchId === batchId), `${step}: ${batchId} every state`)
          t.equal(await c.countDocuments({ batchId, state: 'pending' }), expect(d => d.batchId === batchId && d.state === 'pending').length, `${step}: ${batchId} pending count`)
          t.equal(await c.countDocuments({ batchId, state: { $ne: 'pending' } }), expect(d => d.batchId === batchId && d.state !== 'pending').length, `${step}: ${batchId} count of the others`)
        }
      }
      await check('declared over documents present')
      await c.insertMany([contact('p4', 'b1', 'pending', 1), contact('p5', 'b1', 'in_progress', 0)])
      await c.updateOne({ _id: 'p1' }, { $set: { state: 'in_progress' } })
      await c.findOneAndUpdate({ _id: 'p5', state: 'in_progress' }, { $set: { state: 'pending', rank: 9 } }, { returnDocument: 'after' })
      await c.updateOne({ _id: 'p4' }, { $set: { rank: 5 } })
      await check('moved in, out and within')
      await c.updateMany({ batchId: 'b1', state: 'pending' }, { $set: { state: 'done' } })
      await c.bulkWrite([
        { insertOne: { document: contact('p6', 'b2', 'pending', 0) } },
        { updateOne: { filter: { _id: 'p2' }, update: { $set: { state: 'pending' } } } },
        { updateOne: { filter: { _id: 'p7' }, update: { $set: { batchId: 'b2', state: 'pending', rank: 4 } }, upsert: true } },
        { deleteOne: { filter: { _id: 'p3' } } },
      ])
      await c.updateOne({ _id: 'p6' }, { $unset: { state: '' } })
      await check('updateMany, bulkWrite and a field removed')
      await c.deleteMany({ state: 'pending' })
      await check('deleted')
      t.ok(await failure(store.ensureIndexes(name, [{ name: 'bad', key: { batchId: 1 }, partialFilterExpression: { state: { $in: ['a'] } as never } }])), 'an operator in the partial filter is refused')
      t.ok(await failure(store.ensureIndexes(name, [{ name: 'bad', key: { batchId: 1 }, unique: true, partialFilterExpression: { state: 'a' } }])), 'a unique partial index is refused')
    })

    t.test('updateOne: operators and counts', async t => {
      const [c] = fresh('update')
      const created = at('2026-02-01T10:00:00Z')
      await c.insertOne({ _id: 'u', status: 'pending', meta: { a: 1, b: 2 }, counts: { x: 1 }, list: [1, 2], set: ['a'], createdAt: created, gone: true })

      t.same(await c.updateOne({ _id: 'u' }, { $set: { 'meta.a': 10, 'deep.er.path': 'new', status: 'running' } }), { matchedCount: 1, modifiedCount: 1, upsertedId: null })
      t.same(await c.updateOne({ _id: 'u' }, { $unset: { gone: '' }, $inc: { 'counts.x': 2, 'counts.y': 5, total: 1 } }), { matchedCount: 1, modifiedCount: 1, upsertedId: null })
      t.same(await c.updateOne({ _id: 'u' }, { $push: { list: { $each: [3, 4, 5], $slice: 4 } } }), { matchedCount: 1, modifiedCount: 1, upsertedId: null })
      t.same(await c.updateOne({ _id: 'u' }, { $addToSet: { set: 'b' } }), { matchedCount: 1, modifiedCount: 1, upsertedId: null })
      t.same(await c.updateOne({ _id: 'u' }, { $push: { agents: 'first' } }), { matchedCount: 1, modifiedCount: 1, upsertedId: null }, '$push creates the array')
      t.same(await c.findOne({ _id: 'u' }), {
        _id: 'u',
        status: 'running',
        meta: { a: 10, b: 2 },
        counts: { x: 3, y: 5 },
        list: [1, 2, 3, 4],
        set: ['a', 'b'],
        createdAt: created,
        deep: { er: { path: 'new' } },
        total: 1,
        agents: ['first'],
      })

      // Matched but not modified: the same value, a present $addToSet element, an absent $unset.
      const same = { matchedCount: 1, modifiedCount: 0, upsertedId: null }
      t.same(await c.updateOne({ _id: 'u' }, { $set: { status: 'running', 'meta.a': 10 } }), same, '$set to the same value')
      t.same(await c.updateOne({ _id: 'u' }, { $set: { createdAt: new Date(created.getTime()) } }), same, '$set to the same Date')
      t.same(await c.updateOne({ _id: 'u' }, { $set: { meta: { a: 10, b: 2 } } }), same, '$set to an equal object')
      t.same(await c.updateOne({ _id: 'u' }, { $addToSet: { set: 'a' } }), same, '$addToSet of a present element')
      t.same(await c.updateOne({ _id: 'u' }, { $unset: { missing: '' } }), same, '$unset of a missing field')
      t.same(await c.updateOne({ _id: 'u' }, { $inc: { total: 0 } }), same, '$inc by 0')
      await c.updateOne({ _id: 'u' }, { $set: { stamp: created.toISOString() } })
      t.same(await c.updateOne({ _id: 'u' }, { $set: { stamp: created } }), { matchedCount: 1, modifiedCount: 1, upsertedId: null }, 'a Date is not its ISO string')
      t.ok((await c.findOne({ _id: 'u' }))!.stamp instanceof Date)
      t.same(await c.updateOne({ _id: 'nope' }, { $set: { a: 1 } }), { matchedCount: 0, modifiedCount: 0, upsertedId: null }, 'no match')

      // The guarded transition closeLoad relies on: only the first caller modifies.
      t.equal((await c.updateOne({ _id: 'u', status: { $in: ['pending', 'running'] } }, { $set: { status: 'succeeded' } })).modifiedCount, 1)
      t.equal((await c.updateOne({ _id: 'u', status: { $in: ['pending', 'running'] } }, { $set: { status: 'failed' } })).modifiedCount, 0)
      // The lock take-over idempotency relies on: equality on a Date.
      t.equal((await c.updateOne({ _id: 'u', createdAt: new Date(created.getTime()) }, { $set: { taken: true } })).modifiedCount, 1)
    })

    t.test('updates mongod refuses are refused, and change nothing', async t => {
      const [c] = fresh('refused')
      const doc = { _id: 'r', none: null, text: 'x', five: 5, when: at('2026-02-01T10:00:00Z'), kept: 1 }
      await c.insertOne(doc)
      for (const [update, why] of [
        [{ $inc: { none: 1 } }, 'null'],
        [{ $inc: { text: 1 } }, 'a string'],
        [{ $inc: { when: 1 } }, 'a Date'],
        [{ $inc: { kept: 1, text: 1 } }, 'a string, after a field it could count'],
      ] as const) {
        const error = await failure(c.updateOne({ _id: 'r' }, update))
        t.ok(error instanceof UpdateRefusedError, `$inc of ${why}: refused (${(error as Error)?.message})`)
        t.equal((error as UpdateRefusedError).code, 14, 'TypeMismatch')
      }
      t.ok((await failure(c.updateMany({ _id: 'r' }, { $inc: { none: 1 } }))) instanceof UpdateRefusedError, 'updateMany alike')
      t.ok((await failure(c.findOneAndUpdate({ _id: 'r' }, { $inc: { none: 1 } }))) instanceof UpdateRefusedError, 'findOneAndUpdate alike')
      t.same(await c.findOne({ _id: 'r' }), doc, 'the document is as it was')
      t.same(await c.updateOne({ _id: 'r' }, { $inc: { missing: 2 } }), { matchedCount: 1, modifiedCount: 1, upsertedId: null }, 'a missing field counts from 0')
      // mongod also refuses a field created inside a value that is not an embedded document
      // (PathNotViable, code 28); the wire-protocol test server does not, so only the embedded
      // stores are held to it here.
      if (kind !== 'mongo') {
        for (const update of [{ $set: { 'five.b': 1 } }, { $inc: { 'text.b': 1 } }, { $set: { 'none.b': 1 } }]) {
          const error = await failure(c.updateOne({ _id: 'r' }, update))
          t.ok(error instanceof UpdateRefusedError && error.code === 28, `${JSON.stringify(update)}: refused (${(error as Error)?.message})`)
        }
        t.same(await c.updateOne({ _id: 'r' }, { $unset: { 'five.b': '' } }), { matchedCount: 1, modifiedCount: 0, upsertedId: null }, '$unset there changes nothing')
        t.same(await c.findOne({ _id: 'r' }), { ...doc, missing: 2 })
      }
    })

    t.test('updateOne upsert: $setOnInsert with _id, filter equalities copied', async t => {
      const [c, name] = fresh('upsert')
      await store.ensureIndexes(name, [{ name: 'batch_identifier_unique', key: { batchId: 1, identifier: 1 }, unique: true }])
      const when = at('2026-03-01T00:00:00Z')
      const key = { batchId: 'b1', identifier: 'x' }
      const insert = { $setOnInsert: { _id: 'contact-1', accountId: 'acme', state: 'pending', attempts: 0, createdAt: when, addressAttempts: {} } }

      t.same(await c.updateOne(key, insert, { upsert: true }), { matchedCount: 0, modifiedCount: 0, upsertedId: 'contact-1' })
      t.same(await c.findOne({ _id: 'contact-1' }), { _id: 'contact-1', batchId: 'b1', identifier: 'x', accountId: 'acme', state: 'pending', attempts: 0, createdAt: when, addressAttempts: {} })
      t.same(await c.updateOne(key, { $setOnInsert: { ...insert.$setOnInsert, _id: 'contact-2' } }, { upsert: true }), { matchedCount: 1, modifiedCount: 0, upsertedId: null }, 'a second upsert only matches')
      t.equal(await c.countDocuments({}), 1)

      t.ok((await failure(c.updateOne({ batchId: 'b2', identifier: 'x' }, insert, { upsert: true }))) instanceof DuplicateKeyError, 'an upsert whose new document takes a taken _id')
      t.equal(await c.countDocuments({ batchId: 'b2' }), 0)
    })

    t.test('updateOne upsert: _id and equalities from the filter', async t => {
      const [c] = fresh('upsert_filter')
      // _id from the filter (the session recorder's upsert).
      t.same(await c.updateOne({ _id: 's1' }, { $setOnInsert: { start_time: 1000, end_time: null } }, { upsert: true }), { matchedCount: 0, modifiedCount: 0, upsertedId: 's1' })
      t.same(await c.findOne({ _id: 's1' }), { _id: 's1', start_time: 1000, end_time: null })

      // $set / $inc apply to the new document too; operator conditions are not copied.
      const r = await c.updateOne({ _id: 'k', kind: 'load', n: { $gt: 5 }, tier: { $eq: 'gold' } }, { $set: { status: 'new' }, $inc: { hits: 1 } }, { upsert: true })
      t.same(r, { matchedCount: 0, modifiedCount: 0, upsertedId: 'k' })
      t.same(await c.findOne({ _id: 'k' }), { _id: 'k', kind: 'load', tier: 'gold', status: 'new', hits: 1 })
      t.same(await c.updateOne({ _id: 'k' }, { $set: { status: 'new' }, $inc: { hits: 1 }, $setOnInsert: { ignored: true } }, { upsert: true }), { matchedCount: 1, modifiedCount: 1, upsertedId: null })
      t.same(await c.findOne({ _id: 'k' }), { _id: 'k', kind: 'load', tier: 'gold', status: 'new', hits: 2 }, '$setOnInsert ignored on a match')

      // Dotted and embedded-document equalities are copied as nested fields.
      t.equal((await c.updateOne({ _id: 'dot', 'meta.kind': 'x', spec: { a: 1 } }, { $set: { v: 1 } }, { upsert: true })).upsertedId, 'dot')
      t.same(await c.findOne({ _id: 'dot' }), { _id: 'dot', meta: { kind: 'x' }, spec: { a: 1 }, v: 1 })
      // Without _id anywhere, the new document gets a generated one (a string on the memory
      // store, an ObjectId from mongod): repositories always give the _id.
      t.ok((await c.updateOne({ name: 'anon' }, { $set: { v: 1 } }, { upsert: true })).upsertedId)
      t.equal(await c.countDocuments({ name: 'anon' }), 1)
    })

    t.test('updateOne upsert: a report block ($inc, $min, $max, $set on nested paths)', async t => {
      const [c] = fresh('blocks')
      const cell = 'e._completed|~'
      const add = (v: number) => ({
        $setOnInsert: { accountId: 'acme', level: 0 },
        $inc: { [`${cell}.n`]: 1, [`${cell}.s_duration`]: v, [`${cell}.h_duration.b${v % 2}`]: 1 },
        $min: { [`${cell}.mn_duration`]: v },
        $max: { [`${cell}.mx_duration`]: v, [`${cell}.x_duration.b${v % 2}`]: v },
        $set: { [`${cell}.w`]: { status: 'completed', agent_id: null } },
      })
      t.equal((await c.updateOne({ _id: 'block' }, add(7), { upsert: true })).upsertedId, 'block')
      t.same(await c.updateOne({ _id: 'block' }, add(3), { upsert: true }), { matchedCount: 1, modifiedCount: 1, upsertedId: null })
      await c.updateOne({ _id: 'block' }, add(5), { upsert: true })
      t.same(await c.findOne({ _id: 'block' }), {
        _id: 'block', accountId: 'acme', level: 0,
        e: { '_completed|~': { n: 3, s_duration: 15, h_duration: { b1: 3 }, mn_duration: 3, mx_duration: 7, x_duration: { b1: 7 }, w: { status: 'completed', agent_id: null } } },
      })
    })

    t.test('updateMany counts', async t => {
      const [c] = fresh('update_many')
      await c.insertMany([
        { _id: 'a', batchId: 'b', state: 'pending' },
        { _id: 'b', batchId: 'b', state: 'cancelled' },
        { _id: 'c', batchId: 'b', state: 'pending' },
        { _id: 'd', batchId: 'other', state: 'pending' },
      ])
      t.same(await c.updateMany({ batchId: 'b' }, { $set: { state: 'cancelled' } }), { matchedCount: 3, modifiedCount: 2, upsertedId: null })
      t.same(await c.updateMany({ batchId: 'b' }, { $set: { state: 'cancelled' } }), { matchedCount: 3, modifiedCount: 0, upsertedId: null })
      t.same(await c.updateMany({ batchId: 'none' }, { $set: { state: 'x' } }), { matchedCount: 0, modifiedCount: 0, upsertedId: null })
      t.same(await c.updateMany({}, { $inc: { v: 1 } }), { matchedCount: 4, modifiedCount: 4, upsertedId: null })
      t.equal(await c.countDocuments({ state: 'cancelled' }), 3)
    })

    t.test('findOneAndUpdate: before/after, upsert, sort', async t => {
      const [c] = fresh('fau')
      await c.insertMany([
        { _id: 'a', q: 'work', priority: 2, status: 'ready' },
        { _id: 'b', q: 'work', priority: 1, status: 'ready' },
      ])
      t.same(await c.findOneAndUpdate({ _id: 'a' }, { $set: { status: 'taken' } }, { returnDocument: 'before' }), { _id: 'a', q: 'work', priority: 2, status: 'ready' })
      t.same(await c.findOneAndUpdate({ _id: 'a' }, { $inc: { priority: 1 } }, { returnDocument: 'after' }), { _id: 'a', q: 'work', priority: 3, status: 'taken' })
      t.same(await c.findOneAndUpdate({ _id: 'a' }, { $set: { status: 'x' } }), { _id: 'a', q: 'work', priority: 3, status: 'x' }, "'after' is the default")
      t.equal(await c.findOneAndUpdate({ _id: 'nope' }, { $set: { status: 'x' } }), null, 'no match, no upsert: null')
      t.equal(await c.countDocuments({ _id: 'nope' }), 0)

      t.equal((await c.findOneAndUpdate({ q: 'work', status: { $ne: 'done' } }, { $set: { status: 'done' } }, { sort: { priority: 1 } }))!._id, 'b', 'sort picks the first')
      t.equal((await c.findOneAndUpdate({ q: 'work', status: { $ne: 'done' } }, { $set: { status: 'done' } }, { sort: { priority: 1 } }))!._id, 'a')

      t.same(await c.findOneAndUpdate({ _id: 'n', q: 'new' }, { $setOnInsert: { priority: 0 }, $set: { status: 'fresh' } }, { upsert: true, returnDocument: 'after' }), { _id: 'n', q: 'new', priority: 0, status: 'fresh' })
      t.equal(await c.findOneAndUpdate({ _id: 'm' }, { $set: { status: 'fresh' } }, { upsert: true, returnDocument: 'before' }), null, "upsert with 'before': null")
      t.same(await c.findOne({ _id: 'm' }), { _id: 'm', status: 'fresh' }, '...but inserted')
    })

    t.test('findOneAndUpdate: nested writes leave the document before the update as it was', async t => {
      const [c] = fresh('fau_nested')
      const at1 = at('2026-04-01T00:00:00Z')
      await c.insertOne({ _id: 'c', state: 'pending', counts: { '100': 1, '200': 4 }, addresses: [{ type: 'phone', address: '100' }], custom: { tier: 'gold', seen: at1 } })
      const before = await c.findOneAndUpdate(
        { _id: 'c' },
        { $inc: { 'counts.100': 1, 'fresh.n': 2 }, $set: { state: 'in_progress', 'custom.tier': 'silver' }, $unset: { 'custom.gone': '' } },
        { returnDocument: 'before' },
      )
      t.same(before, { _id: 'c', state: 'pending', counts: { '100': 1, '200': 4 }, addresses: [{ type: 'phone', address: '100' }], custom: { tier: 'gold', seen: at1 } }, 'before: every nested value as it was')
      t.same(
        await c.findOne({ _id: 'c' }),
        { _id: 'c', state: 'in_progress', counts: { '100': 2, '200': 4 }, addresses: [{ type: 'phone', address: '100' }], custom: { tier: 'silver', seen: at1 }, fresh: { n: 2 } },
        'stored: the nested writes, their siblings kept',
      )
      const after = await c.findOneAndUpdate({ _id: 'c' }, { $set: { 'custom.tier': 'bronze' } }, { returnDocument: 'after' })
      t.equal(after!.custom.tier, 'bronze')
      t.ok(after!.custom.seen instanceof Date && after!.custom.seen.getTime() === at1.getTime(), 'a Date beside a nested write stays a Date')
      t.equal(await c.countDocuments({ 'custom.tier': 'bronze' }), 1)
      const stored = await c.findOne({ _id: 'c' })
      t.same(after, stored, "'after' is the document as stored")
      after!.custom.tier = 'changed by the caller'
      after!.addresses[0].address = '999'
      after!.counts['200'] = 0
      t.same(await c.findOne({ _id: 'c' }), stored, "the document 'after' answers is the caller's own: changing it, nested values included, changes nothing stored")
    })

    t.test('findOneAndUpdate: the exactly-once chunk count (operations.countChunk)', async t => {
      const [c] = fresh('count_chunk')
      const createdAt = at('2026-04-01T00:00:00Z')
      await c.insertOne({ _id: 'op', status: 'pending', chunksCompleted: 0, countedChunks: [], errors: [], insertedCount: 0, invalidCount: 0, createdAt })
      const countChunk = (index: number, inserted: number, errors: { identifier: string }[]) =>
        c.findOneAndUpdate(
          { _id: 'op', countedChunks: { $ne: index } },
          {
            $inc: { chunksCompleted: 1, insertedCount: inserted, invalidCount: errors.length },
            $addToSet: { countedChunks: index },
            $push: { errors: { $each: errors, $slice: 20 } },
            $set: { status: 'running' },
          },
          { returnDocument: 'after' },
        )
      const errs = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => ({ identifier: `${prefix}${i}` }))

      const first = await countChunk(3, 10, errs('a', 15))
      t.match(first, { _id: 'op', status: 'running', chunksCompleted: 1, countedChunks: [3], insertedCount: 10, invalidCount: 15, createdAt })
      t.equal(first!.errors.length, 15)
      t.equal(await countChunk(3, 10, errs('a', 15)), null, 'the same chunk again: null')
      const second = await countChunk(0, 5, [])
      t.match(second, { chunksCompleted: 2, countedChunks: [3, 0], insertedCount: 15, invalidCount: 15 }, 'an empty $each')
      const third = await countChunk(7, 1, errs('b', 10))
      t.match(third, { chunksCompleted: 3, countedChunks: [3, 0, 7], insertedCount: 16, invalidCount: 25 })
      t.same(third!.errors.map((e: { identifier: string }) => e.identifier), [...errs('a', 15), ...errs('b', 5)].map(e => e.identifier), '$slice keeps the first 20')
      t.equal(await countChunk(0, 5, []), null)
      t.equal(await countChunk(7, 1, errs('b', 10)), null)
      t.match(await c.findOne({ _id: 'op' }), { chunksCompleted: 3, insertedCount: 16, invalidCount: 25 }, 'each chunk counted once')
    })

    t.test('deleteOne / deleteMany counts', async t => {
      const [c] = fresh('delete')
      await c.insertMany(Array.from({ length: 6 }, (_, i) => ({ _id: `d${i}`, accountId: i < 4 ? 'acme' : 'other', address: `a${i % 3}` })))
      t.equal(await c.deleteOne({ _id: 'd0' }), 1)
      t.equal(await c.deleteOne({ _id: 'd0' }), 0)
      t.equal(await c.deleteOne({ accountId: 'other' }), 1, 'deleteOne removes one of several')
      t.equal(await c.countDocuments({ accountId: 'other' }), 1)
      t.equal(await c.deleteMany({ accountId: 'acme', address: { $in: ['a1', 'a2', 'a9'] } }), 2)
      t.equal(await c.deleteMany({ accountId: 'acme', address: { $in: ['a1', 'a2'] } }), 0)
      t.equal(await c.deleteMany({}), 2)
      t.equal(await c.countDocuments({}), 0)
    })

    t.test('bulkWrite: mixed operations and counts', async t => {
      const [c] = fresh('bulk')
      await c.insertMany([
        { _id: 'a', batchId: 'b', state: 'pending' },
        { _id: 'b', batchId: 'b', state: 'pending' },
        { _id: 'c', batchId: 'b', state: 'done' },
        { _id: 'd', batchId: 'x', state: 'done' },
      ])
      const r = await c.bulkWrite([
        { insertOne: { document: { _id: 'e', batchId: 'b', state: 'pending' } } },
        { updateOne: { filter: { _id: 'f', batchId: 'b' }, update: { $setOnInsert: { state: 'pending' } }, upsert: true } },
        { updateOne: { filter: { _id: 'a' }, update: { $setOnInsert: { state: 'x' } }, upsert: true } },
        { updateOne: { filter: { _id: 'a' }, update: { $set: { state: 'in_progress' } } } },
        { updateMany: { filter: { batchId: 'b', state: 'pending' }, update: { $set: { state: 'cancelled' } } } },
        { deleteOne: { filter: { _id: 'c' } } },
        { deleteMany: { filter: { batchId: 'x' } } },
        { deleteMany: { filter: { batchId: 'none' } } },
      ])
      t.same(r, { insertedCount: 1, matchedCount: 5, modifiedCount: 4, upsertedCount: 1, deletedCount: 2, duplicateKeyIndexes: [] })
      t.same(await c.find({}, { sort: { _id: 1 } }), [
        { _id: 'a', batchId: 'b', state: 'in_progress' },
        { _id: 'b', batchId: 'b', state: 'cancelled' },
        { _id: 'e', batchId: 'b', state: 'cancelled' },
        { _id: 'f', batchId: 'b', state: 'cancelled' },
      ])
      t.same(await c.bulkWrite([]), { insertedCount: 0, matchedCount: 0, modifiedCount: 0, upsertedCount: 0, deletedCount: 0, duplicateKeyIndexes: [] })
    })

    t.test('bulkWrite: a duplicate stops an ordered batch, not an unordered one', async t => {
      const [c, name] = fresh('bulk_dup')
      await store.ensureIndexes(name, [{ name: 'batch_identifier_unique', key: { batchId: 1, identifier: 1 }, unique: true }])
      await c.insertOne({ _id: 'c1', batchId: 'b', identifier: 'x' })
      const ordered = await c.bulkWrite(
        [
          { updateOne: { filter: { batchId: 'b', identifier: 'y' }, update: { $setOnInsert: { _id: 'c2' } }, upsert: true } },
          // The loads race: another writer already holds this _id, so the upsert cannot insert.
          { updateOne: { filter: { batchId: 'b', identifier: 'z' }, update: { $setOnInsert: { _id: 'c1' } }, upsert: true } },
          { insertOne: { document: { _id: 'c3', batchId: 'b', identifier: 'w' } } },
        ],
        { ordered: true },
      )
      t.same(ordered, { insertedCount: 0, matchedCount: 0, modifiedCount: 0, upsertedCount: 1, deletedCount: 0, duplicateKeyIndexes: [1] })
      t.same(ids(await c.find({}, { sort: { _id: 1 } })), ['c1', 'c2'], 'stopped at the duplicate')

      const unordered = await c.bulkWrite(
        [
          { insertOne: { document: { _id: 'c4', batchId: 'b', identifier: 'x' } } }, // unique key taken
          { insertOne: { document: { _id: 'c5', batchId: 'b', identifier: 'v' } } },
          { updateOne: { filter: { _id: 'c5' }, update: { $set: { identifier: 'y' } } } }, // into c2's key
          { deleteOne: { filter: { _id: 'c2' } } },
        ],
        { ordered: false },
      )
      t.same(unordered, { insertedCount: 1, matchedCount: 0, modifiedCount: 0, upsertedCount: 0, deletedCount: 1, duplicateKeyIndexes: [0, 2] })
      t.same(await c.find({}, { sort: { _id: 1 } }), [
        { _id: 'c1', batchId: 'b', identifier: 'x' },
        { _id: 'c5', batchId: 'b', identifier: 'v' },
      ])
    })

    t.test('aggregate: $match + $group with $sum of $subtract/$add (operations.reservedContacts)', async t => {
      const [c] = fresh('agg_reserved')
      const load = (id: string, accountId: string, status: string, requestedCount: number, done: number[]) => ({
        _id: id, accountId, kind: 'contacts.load', status, requestedCount,
        insertedCount: done[0], invalidCount: done[1], duplicateCount: done[2], updatedCount: done[3], recontactedCount: done[4],
      })
      await c.insertMany([
        load('l1', 'acme', 'pending', 100, [0, 0, 0, 0, 0]),
        load('l2', 'acme', 'running', 50, [10, 5, 3, 2, 1]),
        load('l3', 'acme', 'succeeded', 70, [0, 0, 0, 0, 0]),
        load('l4', 'other', 'running', 1000, [0, 0, 0, 0, 0]),
        { _id: 'lc', accountId: 'acme', kind: 'batch.lifecycle', status: 'running' },
      ])
      const reserved = (accountId: string) =>
        c.aggregate<{ _id: null; reserved: number }>([
          { $match: { accountId, kind: 'contacts.load', status: { $in: ['pending', 'running'] } } },
          {
            $group: {
              _id: null,
              reserved: {
                $sum: {
                  $subtract: [
                    '$requestedCount',
                    { $add: ['$insertedCount', '$invalidCount', '$duplicateCount', '$updatedCount', '$recontactedCount'] },
                  ],
                },
              },
            },
          },
        ])
      t.same(await reserved('acme'), [{ _id: null, reserved: 129 }])
      t.same(await reserved('other'), [{ _id: null, reserved: 1000 }])
      t.same(await reserved('nobody'), [], 'no group without documents')
    })

    t.test('aggregate: the report pipelines (bucket keys, accumulators, histograms)', async t => {
      const [c] = fresh('agg_report')
      // Asia/Kathmandu is +05:45: its local hours start at :15 past the UTC hour, so the hour key
      // t - ((t + offset) mod 1h) lands on 15-minute slots. Europe/Madrid changes offset in the range.
      const base = Date.parse('2026-03-28T20:00:00Z')
      const records = Array.from({ length: 40 }, (_, i) => {
        const start = base + i * 97 * 60_000 + (i % 7) * 1_003 // spread over ~2.7 days, across Madrid's DST change
        const status = ['completed', 'abandoned', 'transferred_to_human', 'error'][i % 4]!
        const ended = i % 5 !== 0
        return {
          _id: `s${String(i).padStart(2, '0')}`,
          accountId: 'acme',
          crew_id: i % 10 === 9 ? 'other' : 'crew',
          agent_id: i % 3 === 0 ? 'billing' : 'sales',
          start_time: start,
          end_time: ended ? start + i * 1000 : null,
          duration: ended ? i * 1000 : null,
          status,
          messages: i % 6,
          transfers: i % 2,
          end_reason: ended ? 'done' : null,
        } as Record<string, any> & { _id: string; crew_id: string; start_time: number; duration: number | null; status: string }
      })
      for (const r of records) if (Number(r._id.slice(1)) % 10 === 0) delete r.end_reason // missing, not null
      await c.insertMany(records)
      const from = base
      const to = base + 3 * 86_400_000
      const mine = records.filter(r => r.crew_id === 'crew')
      const match = { $match: { accountId: 'acme', crew_id: 'crew', start_time: { $gte: from, $lt: to } } }

      // Bucket keys: the database evaluates the same arithmetic as bucketKey() in JS.
      const SLOT = 15 * 60_000
      const slotKey = { $subtract: ['$start_time', { $mod: ['$start_time', SLOT] }] }
      for (const [zone, grouping] of [
        ['Asia/Kathmandu', 'hour'],
        ['Europe/Madrid', 'hour'],
        ['Europe/Madrid', 'day'],
        ['America/New_York', 'week'],
        ['Asia/Kolkata', 'month'],
      ] as const) {
        const segments = offsetSegments(zone, from, to)
        const key = bucketKeyExpression(grouping, segments, 'start_time')
        const rows = await c.aggregate<{ _id: number; n: number }>([match, { $group: { _id: key, n: { $sum: 1 } } }])
        const expected = new Map<number, number>()
        for (const r of mine) {
          const offset = segments.find(s => r.start_time < s.to)?.offsetMs ?? segments[segments.length - 1]!.offsetMs
          const k = bucketKey(grouping, r.start_time, offset)
          expected.set(k, (expected.get(k) ?? 0) + 1)
        }
        t.same(byKey(rows), [...expected].sort((a, b) => a[0] - b[0]).map(([k, n]) => ({ _id: k, n })), `${zone} ${grouping} keys`)
        if (zone === 'Asia/Kathmandu') t.ok(rows.every(r => r._id % SLOT === 0 && r._id % HOUR !== 0), 'Kathmandu hours start on 15-minute slots')
      }
      const slots = await c.aggregate<{ _id: number; n: number }>([match, { $group: { _id: slotKey, n: { $sum: 1 } } }])
      const expectedSlots = new Map<number, number>()
      for (const r of mine) expectedSlots.set(r.start_time - (r.start_time % SLOT), (expectedSlots.get(r.start_time - (r.start_time % SLOT)) ?? 0) + 1)
      t.same(byKey(slots), [...expectedSlots].sort((a, b) => a[0] - b[0]).map(([k, n]) => ({ _id: k, n })), '15-minute slots')

      // The accumulators of reports/metrics.ts: $sum of a constant, a field, and $cond over
      // $eq/$or/$and/$ifNull; $min/$max skipping nulls; a compound group _id of the bucket key and
      // plain fields (a missing field comes back absent or null: the code reads it with `?? null`).
      const madrid = offsetSegments('Europe/Madrid', from, to)
      const dayKey = bucketKeyExpression('day', madrid, 'start_time')
      const dayOf = (r: (typeof mine)[number]) => bucketKey('day', r.start_time, madrid.find(s => r.start_time < s.to)!.offsetMs)
      const groups = await c.aggregate<Record<string, any>>([
        match,
        {
          $group: {
            _id: { k: dayKey, w0: '$status', w1: '$end_reason' },
            n: { $sum: 1 },
            s_messages: { $sum: '$messages' },
            s_duration: { $sum: '$duration' },
            c_duration: { $sum: { $cond: [{ $eq: [{ $ifNull: ['$duration', null] }, null] }, 0, 1] } },
            min_duration: { $min: '$duration' },
            max_duration: { $max: '$duration' },
            handed_off: {
              $sum: { $cond: [{ $and: [{ $or: [{ $eq: ['$status', 'transferred_to_human'] }, { $eq: ['$status', 'error'] }] }, { $eq: ['$agent_id', 'sales'] }] }, 1, 0] },
            },
            shortest_completed: { $min: { $cond: [{ $eq: ['$status', 'completed'] }, '$duration', null] } },
          },
        },
      ])
      const expectedGroups = new Map<string, Record<string, any>>()
      for (const r of mine) {
        const id = { k: dayOf(r), w0: r.status, w1: r.end_reason ?? null }
        const g = expectedGroups.get(JSON.stringify(id)) ?? {
          _id: id, n: 0, s_messages: 0, s_duration: 0, c_duration: 0, min_duration: null, max_duration: null, handed_off: 0, shortest_completed: null,
        }
        g.n++
        g.s_messages += r.messages
        g.handed_off += ['transferred_to_human', 'error'].includes(r.status) && r.agent_id === 'sales' ? 1 : 0
        if (r.duration !== null) {
          g.s_duration += r.duration
          g.c_duration++
          g.min_duration = Math.min(g.min_duration ?? Infinity, r.duration)
          g.max_duration = Math.max(g.max_duration ?? -Infinity, r.duration)
          if (r.status === 'completed') g.shortest_completed = Math.min(g.shortest_completed ?? Infinity, r.duration)
        }
        expectedGroups.set(JSON.stringify(id), g)
      }
      const normalized = groups.map(g => ({ ...g, _id: { k: g._id.k, w0: g._id.w0 ?? null, w1: g._id.w1 ?? null } }))
      const sortGroups = (rows: Record<string, any>[]) => [...rows].sort((a, b) => (JSON.stringify(a._id) < JSON.stringify(b._id) ? -1 : 1))
      t.ok(groups.some(g => g._id.w1 === undefined || g._id.w1 === null), 'a group without end_reason exists')
      t.same(sortGroups(normalized), sortGroups([...expectedGroups.values()]), 'grouped accumulators by (day, status, end_reason)')

      // The percentile histogram: bin = floor(ln(value + 1) * 100) under a compound _id.
      const bins = await c.aggregate<{ _id: { k: number; b: number }; n: number; mx: number }>([
        { $match: { ...match.$match, status: { $in: ['completed', 'abandoned'] }, duration: { $gte: 0 } } },
        {
          $group: {
            _id: { k: dayKey, b: { $floor: { $multiply: [{ $ln: { $add: ['$duration', 1] } }, 100] } } },
            n: { $sum: 1 },
            mx: { $max: '$duration' },
          },
        },
      ])
      const expectedBins = new Map<string, { _id: { k: number; b: number }; n: number; mx: number }>()
      for (const r of mine) {
        if (r.duration === null || !['completed', 'abandoned'].includes(r.status)) continue
        const id = { k: dayOf(r), b: Math.floor(Math.log(r.duration + 1) * 100) }
        const entry = expectedBins.get(JSON.stringify(id)) ?? { _id: id, n: 0, mx: -1 }
        entry.n++
        entry.mx = Math.max(entry.mx, r.duration)
        expectedBins.set(JSON.stringify(id), entry)
      }
      const sortBins = <T extends { _id: { k: number; b: number } }>(rows: T[]) => [...rows].sort((a, b) => a._id.k - b._id.k || a._id.b - b._id.b)
      t.same(sortBins(bins), sortBins([...expectedBins.values()]), 'histogram bins by (day, bin)')
    })

    t.test('update paths and document keys that reach a prototype are refused before anything is written', async t => {
      const [c] = fresh('unsafe')
      await c.insertOne({ _id: 'a', customFields: {} })
      const paths = ['customFields.__proto__.polluted', '__proto__.polluted', 'customFields.constructor.prototype.polluted', 'customFields..x']
      for (const path of paths) {
        t.ok((await failure(c.updateOne({ _id: 'a' }, { $set: { [path]: 1 } }))) instanceof UnsafeUpdatePathError, `$set ${path}`)
        t.ok((await failure(c.updateMany({}, { $inc: { [path]: 1 } }))) instanceof UnsafeUpdatePathError, `$inc ${path}`)
        t.ok((await failure(c.findOneAndUpdate({ _id: 'a' }, { $set: { [path]: 1 } }))) instanceof UnsafeUpdatePathError, `findOneAndUpdate ${path}`)
      }
      const bulk = await failure(c.bulkWrite([{ insertOne: { document: { _id: 'b' } } }, { updateOne: { filter: { _id: 'a' }, update: { $set: { 'x.__proto__.y': 1 } } } }]))
      t.ok(bulk instanceof UnsafeUpdatePathError, 'a bulk with one unsafe update')
      t.equal(await c.findOne({ _id: 'b' }), null, 'and nothing of that bulk was written')
      const doc = JSON.parse('{"_id":"c","customFields":{"__proto__":{"polluted":1}}}')
      t.ok((await failure(c.insertOne(doc))) instanceof UnsafeUpdatePathError, 'a document with a __proto__ key')
      t.equal(({} as any).polluted, undefined, 'Object.prototype untouched')
      t.same(await c.findOne({ _id: 'a' }), { _id: 'a', customFields: {} })
    })

    t.test('ordered indexes: equality prefix, range, sort and limit (the dialer selection)', async t => {
      const [c, name] = fresh('ordered')
      await store.ensureIndexes(name, [{ name: 'batch_state_rank_next', key: { batchId: 1, state: 1, priorityRank: 1, nextAttemptAt: 1 } }])
      const base = Date.parse('2026-06-01T00:00:00Z')
      const docs = Array.from({ length: 60 }, (_, i) => ({
        _id: `c${String(i).padStart(2, '0')}`,
        batchId: i % 3 === 0 ? 'other' : 'b',
        state: i % 5 === 0 ? 'done' : 'pending',
        priorityRank: i % 4 === 0 ? Number.MAX_SAFE_INTEGER : (i * 7) % 4,
        nextAttemptAt: new Date(base + ((i * 13) % 60) * 60_000),
      }))
      await c.insertMany(docs)
      const now = new Date(base + 30 * 60_000)
      const due = docs.filter(d => d.batchId === 'b' && d.state === 'pending' && d.nextAttemptAt <= now)
      const byRank = [...due].sort((a, b) => a.priorityRank - b.priorityRank || +a.nextAttemptAt - +b.nextAttemptAt || (a._id < b._id ? -1 : 1))
      const filter = { batchId: 'b', state: 'pending', nextAttemptAt: { $lte: now } }
      t.same(ids(await c.find(filter, { sort: { priorityRank: 1, nextAttemptAt: 1, _id: 1 }, limit: 5 })), ids(byRank.slice(0, 5)), 'first 5 by (rank, next, _id)')
      t.same(ids(await c.find(filter, { sort: { priorityRank: 1, nextAttemptAt: 1, _id: 1 } })), ids(byRank), 'all of them, in order')
      t.same(ids(await c.find(filter, { sort: { priorityRank: -1, nextAttemptAt: -1, _id: -1 }, limit: 4 })), ids([...byRank].reverse().slice(0, 4)), 'descending')
      t.same(ids(await c.find(filter, { sort: { priorityRank: 1, nextAttemptAt: 1, _id: 1 }, skip: 2, limit: 3 })), ids(byRank.slice(2, 5)), 'skip + limit')
      const byNext = [...due].sort((a, b) => +a.nextAttemptAt - +b.nextAttemptAt || a.priorityRank - b.priorityRank || (a._id < b._id ? -1 : 1))
      t.same(ids(await c.find(filter, { sort: { nextAttemptAt: 1, priorityRank: 1, _id: 1 }, limit: 6 })), ids(byNext.slice(0, 6)), 'a sort the index does not give')
      t.equal(await c.countDocuments(filter), due.length, 'count of the range')
      t.equal(await c.countDocuments({ batchId: 'b', state: 'pending' }), docs.filter(d => d.batchId === 'b' && d.state === 'pending').length, 'count of a prefix')
      t.equal(await c.countDocuments({ batchId: 'b', state: { $in: ['pending', 'done'] }, priorityRank: { $gte: 1, $lt: 3 } }), docs.filter(d => d.batchId === 'b' && d.priorityRank >= 1 && d.priorityRank < 3).length, '$in prefix + range')
      t.same(ids(await c.find({ batchId: 'b', state: { $in: ['done', 'pending'] } }, { sort: { priorityRank: 1, nextAttemptAt: 1, _id: 1 }, limit: 3 })),
        ids(docs.filter(d => d.batchId === 'b').sort((a, b) => a.priorityRank - b.priorityRank || +a.nextAttemptAt - +b.nextAttemptAt || (a._id < b._id ? -1 : 1)).slice(0, 3)), '$in prefix, sorted across values')
      // Values of another type are outside a range (mongod brackets types) and sort by type.
      await c.insertMany([
        { _id: 'y1', batchId: 'b', state: 'pending', priorityRank: 'high', nextAttemptAt: new Date(base) },
        { _id: 'y2', batchId: 'b', state: 'pending', priorityRank: null, nextAttemptAt: base },
        { _id: 'y3', batchId: 'b', state: 'pending', nextAttemptAt: new Date(base) },
      ])
      t.equal(await c.countDocuments(filter), due.length + 2, 'the numeric nextAttemptAt is outside a Date range')
      t.equal(await c.countDocuments({ batchId: 'b', state: 'pending', priorityRank: { $gte: 0 } }), docs.filter(d => d.batchId === 'b' && d.state === 'pending').length, 'a string rank is outside a number range')
      t.same(ids(await c.find(filter, { sort: { priorityRank: 1, nextAttemptAt: 1, _id: 1 }, limit: 2 })), ['y3'].concat(ids(byRank.slice(0, 1))), 'missing sorts first (as null)')
      t.same(ids(await c.find(filter, { sort: { priorityRank: -1, nextAttemptAt: -1, _id: -1 }, limit: 1 })), ['y1'], 'strings after numbers')
    })

    t.test('ordered indexes: long strings, arrays, and documents that move', async t => {
      const [c, name] = fresh('ordered_edges')
      await store.ensureIndexes(name, [
        { name: 'owner_key_unique', key: { owner: 1, key: 1 }, unique: true },
        { name: 'tags_at', key: { tags: 1, at: 1 } },
      ])
      const long = 'k'.repeat(300)
      await c.insertOne({ _id: 'l1', owner: 'o', key: long + 'a', tags: ['x', 'y'], at: 2 })
      await c.insertOne({ _id: 'l2', owner: 'o', key: long + 'b', tags: 'x', at: 1 }) // shares a 300-character prefix: not a duplicate
      t.ok((await failure(c.insertOne({ _id: 'l3', owner: 'o', key: long + 'a' }))) instanceof DuplicateKeyError, 'the same long value is')
      t.same(ids(await c.find({ owner: 'o', key: long + 'b' })), ['l2'], 'equality on a long string')
      t.same(ids(await c.find({ owner: 'o', key: { $gt: long + 'a' } })), ['l2'], 'a range on long strings')
      t.same(ids(await c.find({ tags: 'x' }, { sort: { at: 1 } })), ['l2', 'l1'], 'an array field, sorted')
      t.same(ids(await c.find({ tags: 'y', at: { $gte: 2 } })), ['l1'])
      t.equal(await c.countDocuments({ tags: { $in: ['x', 'y'] } }), 2, 'a document counted once for several of its elements')
      await c.updateOne({ _id: 'l1' }, { $set: { tags: ['z'], key: 'short' } })
      t.same(ids(await c.find({ tags: 'x' })), ['l2'], 'old elements left the index')
      t.same(ids(await c.find({ tags: 'z' })), ['l1'])
      await c.insertOne({ _id: 'l4', owner: 'o', key: long + 'a' })
      t.same(ids(await c.find({ owner: 'o' }, { sort: { key: 1 } })), ['l4', 'l2', 'l1'], 'the freed key was taken again')
    })

    t.test('property: any strings, U+0000 and long shared prefixes included, are told apart by a unique index, found, counted and sorted by code point', async t => {
      const [c, name] = fresh('strings')
      await store.ensureIndexes(name, [
        { name: 's_run_unique', key: { s: 1, run: 1 }, unique: true },
        { name: 'run_s_counted', key: { run: 1, s: 1 }, counted: true },
      ])
      let run = 0
      await fc.assert(
        fc.asyncProperty(fc.array(anyString, { minLength: 1, maxLength: 8 }), anyString, async (strings, pivot) => {
          const r = run++
          // One at a time: a string seen before in this run is a duplicate, any other is not.
          const owners = new Map<string, string>()
          for (const [i, s] of strings.entries()) {
            const error = await failure(c.insertOne({ _id: `${r}:${i}`, run: r, s }))
            if (error !== null && !(error instanceof DuplicateKeyError)) throw error
            if ((error !== null) !== owners.has(s)) throw new Error(`${JSON.stringify(s)}: ${error ? 'refused' : 'taken'} after ${JSON.stringify([...owners.keys()])}`)
            if (!error) owners.set(s, `${r}:${i}`)
          }
          const sorted = [...owners.keys()].sort(byCodePoint)
          const want = (strings: string[]) => JSON.stringify(strings.map(s => owners.get(s)))
          const check = async (label: string, got: Promise<Doc[]>, strings: string[]) => {
            const found = JSON.stringify(ids(await got))
            if (found !== want(strings)) throw new Error(`${label}: ${found}, not ${want(strings)}`)
          }
          for (const s of sorted) {
            await check(`find ${JSON.stringify(s)}`, c.find({ run: r, s }), [s])
            const n = await c.countDocuments({ run: r, s })
            if (n !== 1) throw new Error(`countDocuments ${JSON.stringify(s)}: ${n}`)
          }
          const rows = await c.countBy({ run: r }, ['s'])
          const grouped = JSON.stringify(rows.map(row => [row.values[0], row.n]).sort(([a], [b]) => byCodePoint(a as string, b as string)))
          if (grouped !== JSON.stringify(sorted.map(s => [s, 1]))) throw new Error(`countBy: ${grouped}`)
          await check('sorted', c.find({ run: r }, { sort: { s: 1 } }), sorted)
          await check('sorted down', c.find({ run: r }, { sort: { s: -1 } }), [...sorted].reverse())
          const above = sorted.filter(s => byCodePoint(s, pivot) > 0)
          await check(`$gt ${JSON.stringify(pivot)}`, c.find({ run: r, s: { $gt: pivot } }, { sort: { s: 1 } }), above)
          await check(`$lte ${JSON.stringify(pivot)}`, c.find({ run: r, s: { $lte: pivot } }, { sort: { s: -1 } }), sorted.filter(s => byCodePoint(s, pivot) <= 0).reverse())
          const n = await c.countDocuments({ run: r, s: { $gt: pivot } })
          if (n !== above.length) throw new Error(`countDocuments $gt ${JSON.stringify(pivot)}: ${n}, not ${above.length}`)
        }),
        { numRuns: kind === 'mongo' ? 40 : 150 },
      )
      t.pass('every set of strings told apart, found, counted and sorted alike')
    })

    t.test('concurrent writes: no lost update, one winner per unique key', async t => {
      const [c, name] = fresh('concurrent')
      await store.ensureIndexes(name, [{ name: 'slot_unique', key: { slot: 1 }, unique: true }])
      await c.insertOne({ _id: 'counter', n: 0 })
      await Promise.all(Array.from({ length: 50 }, () => c.updateOne({ _id: 'counter' }, { $inc: { n: 1 } })))
      t.equal((await c.findOne({ _id: 'counter' }))!.n, 50, 'every $inc counted')
      const outcomes = await Promise.all(Array.from({ length: 10 }, (_, i) => failure(c.insertOne({ _id: `s${i}`, slot: 'the-one' }))))
      t.equal(outcomes.filter(e => e === null).length, 1, 'one insert won the unique key')
      t.ok(outcomes.filter(e => e !== null).every(e => e instanceof DuplicateKeyError), 'the others are DuplicateKeyErrors')
      const claims = await Promise.all(Array.from({ length: 10 }, (_, i) => c.findOneAndUpdate({ _id: 'counter', owner: null }, { $set: { owner: `w${i}` } })))
      t.equal(claims.filter(Boolean).length, 1, 'one conditional claim wins')
    })

    t.test('TTL: expiresAt in the past disappears, a future one stays', async t => {
      const [c, name] = fresh('ttl')
      await store.ensureIndexes(name, [{ name: 'expires_ttl', key: { expiresAt: 1 }, expireAfterSeconds: 0 }])
      const now = Date.now()
      await c.insertMany([
        { _id: 'past', expiresAt: new Date(now - 1000) },
        { _id: 'future', expiresAt: new Date(now + 10 * 60_000) },
        { _id: 'not-a-date', expiresAt: now - 1000 }, // mongod only expires Date values
        { _id: 'none' },
      ])
      t.ok(await waitFor(async () => (await c.findOne({ _id: 'past' })) === null, 5000), 'the expired document was swept')
      t.same(ids(await c.find({}, { sort: { _id: 1 } })), ['future', 'none', 'not-a-date'])
    })

    t.test('TTL: a retention declared again applies to the documents already there; without one nothing expires', async t => {
      const [c, name] = fresh('retention')
      const index = (expireAfterSeconds?: number) => [{ name: 'created_ttl', key: { createdAt: 1 }, ...(expireAfterSeconds === undefined ? {} : { expireAfterSeconds }) }]
      const [probe, probeName] = fresh('retention_probe')
      await store.ensureIndexes(probeName, [{ name: 'expires_ttl', key: { expiresAt: 1 }, expireAfterSeconds: 0 }])
      /** A TTL pass ran (on MongoDB, the server's monitor) once this probe document is gone. */
      const aPassRan = async (id: string) => {
        await probe.insertOne({ _id: id, expiresAt: new Date(Date.now() - 1000) })
        return waitFor(async () => (await probe.findOne({ _id: id })) === null, 5000)
      }
      const now = Date.now()
      await store.ensureIndexes(name, index(3600))
      await c.insertMany([
        { _id: 'ten-minutes', createdAt: new Date(now - 10 * 60_000) },
        { _id: 'two-hours', createdAt: new Date(now - 2 * 3600_000) },
        { _id: 'new', createdAt: new Date(now) },
      ])
      t.ok(await waitFor(async () => (await c.findOne({ _id: 'two-hours' })) === null, 5000), 'older than an hour: expired')
      await store.ensureIndexes(name, index(60))
      t.ok(await waitFor(async () => (await c.findOne({ _id: 'ten-minutes' })) === null, 5000), 'the shorter retention took over')
      await store.ensureIndexes(name, index())
      await c.insertOne({ _id: 'old', createdAt: new Date(now - 365 * 86_400_000) })
      t.ok(await aPassRan('after-off'), 'a TTL pass ran')
      t.same(ids(await c.find({}, { sort: { _id: 1 } })), ['new', 'old'], 'no retention: nothing expires')
      t.same(ids(await c.find({ createdAt: { $lt: new Date(now) } })), ['old'], 'the index still answers queries')
      await store.ensureIndexes(name, index(3600))
      t.ok(await waitFor(async () => (await c.findOne({ _id: 'old' })) === null, 5000), 'turned on again: expires')
      t.same(ids(await c.find({})), ['new'])
    })

    t.test('JSON collection: a top-level Date round-trips and expires by its TTL index', async t => {
      const name = `json_dates_${++serial}`
      const c = store.collection<Doc>(name, { json: true })
      await store.ensureIndexes(name, [{ name: 'at_ttl', key: { at: 1 }, expireAfterSeconds: 60 }])
      const now = Date.now()
      await c.insertOne({ _id: 'old', at: new Date(now - 3600_000), n: 1, cells: { a: { n: 1 } } })
      await c.updateOne({ _id: 'kept' }, { $setOnInsert: { at: new Date(now) }, $inc: { n: 2 } }, { upsert: true })
      await c.updateOne({ _id: 'kept' }, { $inc: { n: 3 } })
      const kept = await c.findOne({ _id: 'kept' })
      t.ok(kept!.at instanceof Date, 'read back as a Date after updates')
      t.equal(kept!.at.getTime(), now)
      t.equal(kept!.n, 5)
      t.same(ids(await c.find({ at: { $gte: new Date(now - 1000) } })), ['kept'], 'queried as a Date')
      t.ok(await waitFor(async () => (await c.findOne({ _id: 'old' })) === null, 5000), 'expired')
      t.same(ids(await c.find({})), ['kept'])
    })

    t.test('Dates round-trip as Dates, numbers stay numbers', async t => {
      const [c] = fresh('types')
      const doc = {
        _id: 'typed',
        when: at('2026-05-06T07:08:09.123Z'),
        epoch: new Date(0),
        nested: { at: at('1999-12-31T23:59:59.999Z'), list: [at('2026-01-01T00:00:00Z'), 3] },
        int: 42,
        zero: 0,
        negative: -7,
        float: 0.1 + 0.2,
        ms: 1_780_000_000_123, // beyond int32
        big: 2 ** 53 - 1,
        flag: false,
        none: null,
        text: 'x',
        empty: {},
        arr: [],
      }
      await c.insertOne(doc)
      const back = await c.findOne({ _id: 'typed' })
      t.same(back, doc)
      t.ok(back!.when instanceof Date && back!.nested.at instanceof Date && back!.nested.list[0] instanceof Date && back!.epoch instanceof Date, 'Date objects')
      t.equal(back!.when.getTime(), doc.when.getTime(), 'millisecond precision')
      for (const field of ['int', 'zero', 'negative', 'float', 'ms', 'big']) t.equal(typeof back![field], 'number', `${field} is a number`)
      t.equal(back!.float, 0.1 + 0.2)
      t.equal(back!.ms, 1_780_000_000_123)
      t.equal(back!.big, 2 ** 53 - 1)

      await c.updateOne({ _id: 'typed' }, { $inc: { ms: 1, float: 1 }, $set: { later: at('2030-01-01T00:00:00Z') } })
      const updated = (await c.findOneAndUpdate({ _id: 'typed' }, { $inc: { int: 1 } }))!
      t.equal(updated.ms, 1_780_000_000_124)
      t.equal(updated.float, 0.1 + 0.2 + 1)
      t.ok(updated.later instanceof Date && updated.when instanceof Date, 'Dates from findOneAndUpdate')
      const [agg] = await c.aggregate<{ _id: null; latest: Date; total: number }>([{ $group: { _id: null, latest: { $max: '$when' }, total: { $sum: '$ms' } } }])
      t.ok(agg!.latest instanceof Date, 'Dates from aggregate')
      t.equal(agg!.latest.getTime(), doc.when.getTime())
      t.equal(agg!.total, 1_780_000_000_124)
      // The stored document is a copy: mutating what was inserted or returned changes nothing.
      doc.int = 1000
      back!.text = 'mutated'
      t.match(await c.findOne({ _id: 'typed' }), { int: 43, text: 'x' })
    })
  })
}
