// The embedded store's query planner (platform/store/planner.ts) reads indexes instead of every
// document: compound, partial, multikey, dotted and counted ones, strings cut in keys, ranges,
// sorts served in index order and limits that stop the read. Whatever it picks, a query must
// answer what a scan of every document answers. The oracle is the in-memory store (a scan with
// mingo and hash lookups, no ordered index): for random documents and queries both must give
// the same documents in the same order, and the same counts.
import t from 'tap'
import fc from 'fast-check'
import type { LmdbStore } from '../../platform/store/lmdb-store.js'
import type { MemoryStore } from '../../platform/store/memory-store.js'
import type { Doc, Filter, IndexSpec, Sort } from '../../platform/store/types.js'
import { storePair } from '../support/store-pair.js'

const INDEXES: IndexSpec[] = [
  { name: 'batch_state_rank', key: { batchId: 1, state: 1, rank: 1, _id: 1 } },
  { name: 'pending_rank', key: { batchId: 1, rank: 1, at: 1, _id: 1 }, partialFilterExpression: { state: 'pending' } },
  { name: 'tags', key: { tags: 1 } },
  { name: 'name', key: { name: 1, _id: 1 } },
  { name: 'nested_at', key: { 'n.x': 1, at: -1 } },
  { name: 'batch_state_counted', key: { batchId: 1, state: 1 }, counted: true },
]

// Long names share their first 100 characters (what a key keeps): equal keys, different values.
const LONG = 'p'.repeat(100)
const names = ['a', 'b', `${LONG}1`, `${LONG}2`, `${LONG}`, 'é', 'z']
const dates = [new Date(0), new Date(1_000), new Date(2_000)]
const maybe = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined })

const doc = fc.record(
  {
    batchId: fc.constantFrom('b1', 'b2'),
    state: fc.constantFrom('pending', 'done', 'in_progress', null),
    rank: fc.oneof(fc.integer({ min: -2, max: 3 }), fc.constant(null), fc.constant(2.5)),
    at: fc.constantFrom(...dates),
    tags: fc.oneof(fc.constantFrom('x', 'y'), fc.array(fc.constantFrom('x', 'y', 'z'), { maxLength: 3 })),
    name: fc.constantFrom(...names),
    n: fc.record({ x: fc.oneof(fc.integer({ min: 0, max: 2 }), fc.constant(null)) }, { requiredKeys: [] }),
  },
  { requiredKeys: ['batchId'] },
)

const condition = fc.oneof(
  fc.record({ batchId: fc.oneof(fc.constantFrom('b1', 'b2'), fc.record({ $in: fc.subarray(['b1', 'b2', 'b3'], { minLength: 1 }) })) }),
  fc.record({ state: fc.oneof(fc.constantFrom('pending', 'done', null), fc.record({ $in: fc.subarray(['pending', 'done', 'in_progress'], { minLength: 1 }) }), fc.record({ $ne: fc.constantFrom('done', null) }), fc.record({ $exists: fc.boolean() })) }),
  fc.record({ rank: fc.oneof(fc.integer({ min: -2, max: 3 }), fc.constant(null)) }),
  fc.tuple(fc.constantFrom('$gt', '$gte', '$lt', '$lte'), fc.integer({ min: -2, max: 3 })).map(([op, n]) => ({ rank: { [op]: n } })),
  fc.record({ rank: fc.record({ $gte: fc.integer({ min: -2, max: 1 }), $lt: fc.integer({ min: 1, max: 4 }) }) }),
  fc.record({ tags: fc.constantFrom('x', 'y', 'z') }),
  fc.record({ name: fc.oneof(fc.constantFrom(...names), fc.record({ $gt: fc.constantFrom(...names) }), fc.record({ $lte: fc.constantFrom(...names) })) }),
  fc.record({ 'n.x': fc.oneof(fc.integer({ min: 0, max: 2 }), fc.constant(null)) }),
  fc.record({ at: fc.record({ $lte: fc.constantFrom(...dates) }) }),
)
const filter = fc.array(condition, { maxLength: 3 }).map(parts => Object.assign({}, ...parts) as Filter)
const sort = fc.constantFrom<Sort | undefined>(undefined, { rank: 1, _id: 1 }, { rank: -1, _id: -1 }, { at: 1, _id: 1 }, { name: 1, _id: 1 }, { name: -1, _id: 1 }, { _id: 1 })
const limit = fc.option(fc.integer({ min: 1, max: 5 }), { nil: undefined })

t.test('any query answers on the embedded store what a scan of every document answers', async t => {
  const name = 'plans'
  const { lmdb, memory } = await storePair(t, name, INDEXES)
  await fc.assert(
    fc.asyncProperty(fc.array(doc, { minLength: 1, maxLength: 40 }), fc.array(fc.tuple(filter, sort, limit), { minLength: 1, maxLength: 10 }), async (docs, queries) => {
      await lmdb.collection(name).deleteMany({})
      await memory.collection(name).deleteMany({})
      const rows = docs.map((d, i) => ({ _id: `d${String(i).padStart(2, '0')}`, ...d })) as Doc[]
      await lmdb.collection(name).insertMany(rows)
      await memory.collection(name).insertMany(rows)
      for (const [f, s, l] of queries) {
        // Without a sort the order is the store's own: compared as sets.
        const got = (await lmdb.collection(name).find(f, { sort: s, limit: s ? l : undefined })).map(d => d._id)
        const want = (await memory.collection(name).find(f, { sort: s, limit: s ? l : undefined })).map(d => d._id)
        if (!s) {
          got.sort()
          want.sort()
        }
        const query = JSON.stringify({ filter: f, sort: s, limit: l })
        if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`${query}: ${JSON.stringify(got)} != ${JSON.stringify(want)}`)
        const [n, m] = [await lmdb.collection(name).countDocuments(f), await memory.collection(name).countDocuments(f)]
        if (n !== m) throw new Error(`count ${query}: ${n} != ${m}`)
        if (s && l) {
          // A page further on: skip then limit, as a listing pages.
          const page = async (store: LmdbStore | MemoryStore) => (await store.collection(name).find(f, { sort: s, skip: l, limit: l })).map(d => d._id)
          const [p, q] = [await page(lmdb), await page(memory)]
          if (JSON.stringify(p) !== JSON.stringify(q)) throw new Error(`page 2 of ${query}: ${JSON.stringify(p)} != ${JSON.stringify(q)}`)
        }
      }
      // The counted index's numbers (one key range, no document read) against the scan's.
      for (const match of [{ batchId: 'b1' }, { batchId: 'b2', state: 'pending' }]) {
        const rows = async (store: LmdbStore | MemoryStore) =>
          (await store.collection(name).countBy(match, ['state'].filter(f => !(f in match)))).map(r => `${JSON.stringify(r.values)}=${r.n}`).sort()
        const [got, want] = [await rows(lmdb), await rows(memory)]
        if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`countBy ${JSON.stringify(match)}: ${JSON.stringify(got)} != ${JSON.stringify(want)}`)
      }
    }),
    { numRuns: 200 },
  )
  t.ok(lmdb.reads.keys > 0, `the queries read indexes (${lmdb.reads.keys} entries), not only documents`)
  t.pass('every query answered alike')
})

t.test('a sort on strings longer than what an index key keeps: the full values order the documents, not the _id after the cut', async t => {
  // Found by the property above: both names keep the same 100 characters in the key, and the
  // entries came in _id order (the index's next field) instead of the names' order.
  const { lmdb } = await storePair(t, 'c', [{ name: 'name', key: { name: 1, _id: 1 } }])
  const c = lmdb.collection('c')
  await c.insertMany([
    { _id: 'a', name: `${LONG}2` },
    { _id: 'b', name: LONG },
    { _id: 'c', name: `${LONG}1` },
    { _id: 'd', name: 'q' },
  ])
  const reads = { ...lmdb.reads }
  t.same((await c.find({}, { sort: { name: 1, _id: 1 } })).map(d => d._id), ['b', 'c', 'a', 'd'])
  t.ok(lmdb.reads.keys > reads.keys, 'through the index')
  t.same((await c.find({}, { sort: { name: -1, _id: -1 } })).map(d => d._id), ['d', 'a', 'c', 'b'], 'and backwards')
  t.same((await c.find({}, { sort: { name: 1, _id: 1 }, limit: 2 })).map(d => d._id), ['b', 'c'], 'with a limit')
})
