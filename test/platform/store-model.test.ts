// The embedded store against the in-memory store, write by write: random sequences of inserts
// (one, many ordered and unordered, with duplicate ids and values a unique index refuses),
// updates (one, many, upserts, findOneAndUpdate before/after), deletes and bulk writes. After
// each operation both must have answered alike (results, or a refusal of the same kind) and
// hold the same documents; index-served queries must agree as well. The in-memory store keeps
// its documents in a Map and answers by scanning with mingo: it shares no index code with LMDB.
import t from 'tap'
import fc from 'fast-check'
import { DuplicateKeyError, type Collection, type Filter, type IndexSpec } from '../../platform/store/types.js'
import { storePair } from '../support/store-pair.js'

const INDEXES: IndexSpec[] = [
  { name: 'code_unique', key: { batch: 1, code: 1 }, unique: true },
  { name: 'batch_state_rank', key: { batch: 1, state: 1, rank: 1, _id: 1 } },
  { name: 'pending', key: { batch: 1, rank: 1 }, partialFilterExpression: { state: 'pending' } },
  { name: 'tags', key: { tags: 1 } },
  { name: 'batch_state_counted', key: { batch: 1, state: 1 }, counted: true },
]

const id = fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f')
const doc = fc.record({
  _id: id,
  batch: fc.constantFrom('b1', 'b2'),
  code: fc.constantFrom('x', 'y', 'z', 'w'),
  state: fc.constantFrom('pending', 'done'),
  rank: fc.integer({ min: 0, max: 3 }),
  tags: fc.array(fc.constantFrom('t', 'u'), { maxLength: 2 }),
})
const filter: fc.Arbitrary<Filter> = fc.oneof(
  id.map(_id => ({ _id })),
  fc.constantFrom('b1', 'b2').map(batch => ({ batch })),
  fc.record({ batch: fc.constantFrom('b1', 'b2'), state: fc.constantFrom('pending', 'done') }),
  fc.integer({ min: 0, max: 3 }).map(rank => ({ rank: { $gte: rank } })),
  fc.constantFrom('t', 'u').map(tags => ({ tags })),
  fc.constant({}),
)
// updateOne and deleteOne of a filter several documents match take one in the store's natural
// order, which mongod leaves unspecified too: they get one document's id (and maybe more).
const oneFilter: fc.Arbitrary<Filter> = fc.tuple(id, filter).map(([_id, f]) => ({ ...f, _id }))
const update = fc.oneof(
  fc.record({ $set: fc.record({ state: fc.constantFrom('pending', 'done') }) }),
  fc.record({ $set: fc.record({ code: fc.constantFrom('x', 'y', 'z', 'w') }) }),
  fc.record({ $inc: fc.record({ rank: fc.integer({ min: -1, max: 1 }) }) }),
  fc.record({ $set: fc.record({ batch: fc.constantFrom('b1', 'b2'), rank: fc.integer({ min: 0, max: 3 }) }) }),
  fc.record({ $unset: fc.constant({ tags: '' }) }),
  fc.record({ $push: fc.record({ tags: fc.constantFrom('t', 'u') }) }),
)
// updateMany stops at its first refused document, and which documents came before it is the
// store's natural order: its updates leave the unique fields alone.
const manyUpdate = fc.oneof(
  fc.record({ $set: fc.record({ state: fc.constantFrom('pending', 'done') }) }),
  fc.record({ $inc: fc.record({ rank: fc.integer({ min: -1, max: 1 }) }) }),
  fc.record({ $unset: fc.constant({ tags: '' }) }),
  fc.record({ $push: fc.record({ tags: fc.constantFrom('t', 'u') }) }),
)
type Op = { kind: string; run: (c: Collection) => Promise<unknown> }
const op: fc.Arbitrary<Op> = fc.oneof(
  doc.map(d => ({ kind: `insertOne ${JSON.stringify(d)}`, run: c => c.insertOne(d) })),
  fc.tuple(fc.array(doc, { maxLength: 4 }), fc.boolean()).map(([ds, ordered]) => ({ kind: `insertMany ${JSON.stringify(ds)} ordered=${ordered}`, run: c => c.insertMany(ds, { ordered }) })),
  // Upserts only by _id: a new document's generated id differs between the stores.
  fc.tuple(oneFilter, update, fc.boolean()).map(([f, u, upsert]) => ({ kind: `updateOne ${JSON.stringify([f, u, upsert && '_id' in f])}`, run: c => c.updateOne(f, u, { upsert: upsert && '_id' in f }) })),
  fc.tuple(filter, manyUpdate).map(([f, u]) => ({ kind: `updateMany ${JSON.stringify([f, u])}`, run: c => c.updateMany(f, u) })),
  fc.tuple(filter, update, fc.constantFrom<'before' | 'after'>('before', 'after'), fc.boolean()).map(([f, u, returnDocument, upsert]) => ({
    kind: `findOneAndUpdate ${JSON.stringify([f, u, returnDocument, upsert && '_id' in f])}`,
    run: c => c.findOneAndUpdate(f, u, { returnDocument, upsert: upsert && '_id' in f, sort: { _id: 1 } }),
  })),
  oneFilter.map(f => ({ kind: `deleteOne ${JSON.stringify(f)}`, run: c => c.deleteOne(f) })),
  filter.map(f => ({ kind: `deleteMany ${JSON.stringify(f)}`, run: c => c.deleteMany(f) })),
  fc.tuple(fc.array(fc.oneof(doc.map(document => ({ insertOne: { document } })), fc.tuple(oneFilter, update).map(([f, u]) => ({ updateOne: { filter: f, update: u } })), oneFilter.map(f => ({ deleteOne: { filter: f } }))), { minLength: 1, maxLength: 4 }), fc.boolean()).map(([ops, ordered]) => ({
    kind: `bulkWrite ${JSON.stringify(ops)} ordered=${ordered}`,
    run: c => c.bulkWrite(ops as any, { ordered }),
  })),
)

/** What an operation answered, comparable across stores: its result, or the kind of refusal. */
async function outcome(run: () => Promise<unknown>): Promise<string> {
  try {
    return JSON.stringify(await run(), (_k, v) => (v && typeof v === 'object' && 'upsertedId' in v && typeof v.upsertedId === 'string' ? { ...v, upsertedId: 'new' } : v))
  } catch (error) {
    if (error instanceof DuplicateKeyError) return `duplicate on ${error.message.match(/index[: ]+(\S+)/)?.[1] ?? '?'}`
    return `error ${(error as Error).name}`
  }
}

t.test('write by write, the embedded store answers and holds what the in-memory store does', async t => {
  const { lmdb, memory } = await storePair(t, 'm', INDEXES)
  const [l, m] = [lmdb.collection('m'), memory.collection('m')]
  let operations = 0
  await fc.assert(
    fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 12 }), async ops => {
      await l.deleteMany({})
      await m.deleteMany({})
      const done: string[] = []
      for (const o of ops) {
        done.push(o.kind)
        const [got, want] = [await outcome(() => o.run(l)), await outcome(() => o.run(m))]
        operations++
        if (got !== want) throw new Error(`answered ${got} != ${want} after ${done.join(' ; ')}`)
        const all = async (c: Collection) => JSON.stringify(await c.find({}, { sort: { _id: 1 } }))
        const [held, wanted] = [await all(l), await all(m)]
        if (held !== wanted) throw new Error(`holds ${held} != ${wanted} after ${done.join(' ; ')}`)
        for (const q of [{ batch: 'b1', state: 'pending' }, { tags: 't' }, { batch: 'b2', rank: { $gte: 1 } }]) {
          const ids = async (c: Collection) => JSON.stringify((await c.find(q, { sort: { _id: 1 } })).map(d => d._id)) + (await c.countDocuments(q))
          const [a, b] = [await ids(l), await ids(m)]
          if (a !== b) throw new Error(`query ${JSON.stringify(q)}: ${a} != ${b} after ${done.join(' ; ')}`)
        }
      }
    }),
    { numRuns: 150 },
  )
  t.ok(operations > 500, `${operations} operations compared`)
})
