/**
 * Drives the MongoDB wire-protocol test server (mongo-wire-server.py) with the
 * real `mongodb` driver. Each assertion is a behaviour our repositories rely
 * on. Run with MONGO_URL=mongodb://... to check the same expectations against
 * a real mongod. Server-specific checks (TTL timing, version numbers) are then
 * skipped.
 */
import t from 'tap'
import {
  BSON,
  Binary,
  Decimal128,
  Double,
  Int32,
  Long,
  MongoBulkWriteError,
  MongoClient,
  MongoServerError,
  ObjectId,
  UUID,
  type CommandSucceededEvent,
  type Document,
} from 'mongodb'
import { startMongoTestServer } from './mongo-server.js'

/** Test documents also use numbers and strings as _id. */
interface Loose {
  _id?: string | number | ObjectId
  [key: string]: any // eslint-disable-line @typescript-eslint/no-explicit-any
}

const REAL_MONGO = Boolean(process.env.MONGO_URL)
const server = await startMongoTestServer({ ttlIntervalMs: 200 })
const client = new MongoClient(server.url, { maxPoolSize: 10 })
await client.connect()
const dbName = `wire_server_test_${process.pid}`
const db = client.db(dbName)

// A second client that records replies (batch sizes, getMores). Kept away from the
// 250k-document test: monitoring deserializes every reply a second time.
const succeeded: CommandSucceededEvent[] = []
const monitored = new MongoClient(server.url, { monitorCommands: true })
monitored.on('commandSucceeded', e => succeeded.push(e))
await monitored.connect()
const mdb = monitored.db(dbName)
function clearEvents() {
  succeeded.length = 0
}
const replies = (name: string) => succeeded.filter(e => e.commandName === name).map(e => e.reply as Document)

t.teardown(async () => {
  await db.dropDatabase().catch(() => {})
  await monitored.close()
  await client.close()
  await server.stop()
})

/** The MongoServerError that `p` rejects with. */
async function serverError(p: Promise<unknown>): Promise<MongoServerError> {
  try {
    await p
  } catch (err) {
    if (err instanceof MongoServerError) return err
    throw err
  }
  throw new Error('expected a MongoServerError')
}

t.test('handshake and server commands', async t => {
  const hello = await db.admin().command({ hello: 1 })
  t.equal(hello.ok, 1)
  t.equal(hello.isWritablePrimary, true)
  t.equal(hello.maxBsonObjectSize, 16777216)
  t.equal(hello.maxMessageSizeBytes, 48000000)
  t.equal(hello.maxWriteBatchSize, 100000)
  t.equal(hello.minWireVersion, 0)
  t.ok(hello.localTime instanceof Date)
  t.type(hello.connectionId, 'number')
  if (!REAL_MONGO) t.equal(hello.maxWireVersion, 17)
  const legacy = await db.admin().command({ isMaster: 1 })
  t.equal(legacy.ismaster, true)
  t.same(await db.command({ ping: 1 }), { ok: 1 })
  const info = await db.admin().command({ buildInfo: 1 })
  if (!REAL_MONGO) t.equal(info.version, '6.0.0')
  t.match(await serverError(db.command({ noSuchCommand: 1 })), { code: 59, codeName: 'CommandNotFound' })
  if (!REAL_MONGO) t.equal((await db.admin().command({ getLastError: 1 })).ok, 1, 'mongod 6 removed it; answered anyway')

  await db.collection<Loose>('hs').insertOne({ a: 1 })
  const { databases } = await db.admin().listDatabases()
  t.ok(databases.some(d => d.name === dbName))
})

t.test('BSON types round-trip', async t => {
  const col = db.collection<Loose>('bson')
  const doc = {
    _id: new ObjectId(),
    when: new Date('2024-05-06T07:08:09.123Z'),
    bin: new Binary(Buffer.from([1, 2, 3, 250])),
    uuid: new UUID(),
    i32: 42,
    i32neg: new Int32(-7),
    i64: Long.fromString('9007199254740993'),
    small64: Long.fromNumber(5),
    dbl: 1.5,
    dblWhole: new Double(2),
    dec: Decimal128.fromString('1.10'),
    str: 'héllo ✓',
    nil: null,
    yes: true,
    nested: { a: { b: [1, 'two', null, { c: false }] } },
  }
  await col.insertOne(doc)

  const check = async (label: string, extraKeys: string[] = []) => {
    const raw = await col.findOne({ _id: doc._id }, { promoteValues: false, promoteLongs: false })
    t.ok(raw, label)
    t.equal(raw!.i32._bsontype, 'Int32', `${label}: int32 stays int32`)
    t.equal(raw!.i32neg.value, -7, label)
    t.equal(raw!.i64._bsontype, 'Long', `${label}: int64 stays int64`)
    t.equal(raw!.i64.toString(), '9007199254740993', label)
    t.equal(raw!.dblWhole._bsontype, 'Double', `${label}: double 2.0 stays double`)
    t.equal(raw!.dec.toString(), '1.10', label)
    t.equal(raw!.bin.sub_type, 0, label)
    t.same([...raw!.bin.buffer], [1, 2, 3, 250], label)
    t.equal(raw!.uuid.sub_type, 4, label)
    t.equal(raw!.uuid.toUUID().toHexString(), doc.uuid.toHexString(), label)

    const got = await col.findOne({ _id: doc._id })
    t.ok((got!._id as ObjectId).equals(doc._id), label)
    t.equal(got!.when.toISOString(), '2024-05-06T07:08:09.123Z', label)
    t.equal(got!.i32, 42, label)
    t.equal(got!.small64, 5, `${label}: small Long promoted to number`)
    t.equal(got!.dbl, 1.5, label)
    t.equal(got!.dblWhole, 2, label)
    t.equal(got!.str, 'héllo ✓', label)
    t.equal(got!.nil, null, label)
    t.equal(got!.yes, true, label)
    t.same(got!.nested, { a: { b: [1, 'two', null, { c: false }] } }, label)
    t.same(Object.keys(got!), [...Object.keys(doc), ...extraKeys], `${label}: field order kept`)
  }
  await check('as inserted')
  // An update makes the server re-encode the document from its own storage.
  await col.updateOne({ _id: doc._id }, { $set: { touched: true } })
  await check('after update', ['touched'])

  // Counters incremented with Longs come back as plain JS numbers.
  await col.insertOne({ _id: 'counter', hits: Long.fromNumber(0), big: 2147483647 })
  for (let i = 0; i < 3; i++) {
    await col.updateOne({ _id: 'counter' }, { $inc: { hits: Long.fromNumber(1), big: 1 } })
  }
  const counter = await col.findOne({ _id: 'counter' })
  t.equal(counter!.hits, 3)
  t.equal(counter!.big, 2147483650)
  t.equal(typeof counter!.big, 'number')

  // Query by Date range and by ObjectId.
  t.equal(await col.countDocuments({ when: { $gte: new Date('2024-05-06T00:00:00Z') } }), 1)
  t.equal(await col.countDocuments({ _id: { $in: [doc._id, new ObjectId()] } }), 1)
})

interface Profile {
  _id: string
  n: number
  tags: string[]
  hist: number[]
  lo: number
  hi: number
  gone?: string
  profile?: { name: string }
  updatedAt?: Date
}

t.test('update operators, upserts and deletes', async t => {
  const profiles = db.collection<Profile>('updates')
  await profiles.insertOne({ _id: 'u1', n: 1, tags: ['a'], hist: [1, 2, 3], lo: 5, hi: 5, gone: 'x' })
  const r = await profiles.updateOne({ _id: 'u1' }, {
    $set: { 'profile.name': 'Ann' },
    $unset: { gone: '' },
    $inc: { n: 2 },
    $push: { hist: { $each: [4, 5, 6], $slice: -4 } },
    $addToSet: { tags: { $each: ['a', 'b'] } },
    $min: { lo: 3 },
    $max: { hi: 9 },
    $currentDate: { updatedAt: true },
  })
  t.match(r, { acknowledged: true, matchedCount: 1, modifiedCount: 1, upsertedCount: 0, upsertedId: null })
  const col = db.collection<Loose>('updates')
  const u = await col.findOne({ _id: 'u1' })
  t.ok(u!.updatedAt instanceof Date && Math.abs(u!.updatedAt.getTime() - Date.now()) < 60_000)
  delete u!.updatedAt
  t.same(u, { _id: 'u1', n: 3, tags: ['a', 'b'], hist: [3, 4, 5, 6], lo: 3, hi: 9, profile: { name: 'Ann' } })

  const noop = await col.updateOne({ _id: 'u1' }, { $set: { n: 3 } })
  t.match(noop, { matchedCount: 1, modifiedCount: 0 }, 'no-op update is not counted as modified')

  const up = await col.updateOne({ key: 'k1' }, { $set: { v: 1 }, $setOnInsert: { created: true } }, { upsert: true })
  t.match(up, { matchedCount: 0, modifiedCount: 0, upsertedCount: 1 })
  t.ok(up.upsertedId instanceof ObjectId)
  const upserted = await col.findOne({ key: 'k1' })
  t.same(Object.keys(upserted!), ['_id', 'key', 'v', 'created'], '_id first, like mongod')
  const again = await col.updateOne({ key: 'k1' }, { $set: { v: 2 }, $setOnInsert: { created: false } }, { upsert: true })
  t.match(again, { matchedCount: 1, modifiedCount: 1, upsertedCount: 0, upsertedId: null })
  t.equal((await col.findOne({ key: 'k1' }))!.created, true, '$setOnInsert only on insert')

  await col.insertMany([0, 1, 2, 3, 4].map(i => ({ grp: 'g', i })))
  const many = await col.updateMany({ grp: 'g', i: { $gte: 2 } }, { $set: { flag: true } })
  t.match(many, { matchedCount: 3, modifiedCount: 3 })
  const rep = await col.replaceOne({ grp: 'g', i: 0 }, { grp: 'g', i: 0, replaced: true })
  t.match(rep, { matchedCount: 1, modifiedCount: 1 })
  t.same(await col.findOne({ replaced: true }, { projection: { _id: 0 } }), { grp: 'g', i: 0, replaced: true })

  t.match(await col.deleteOne({ grp: 'g' }), { deletedCount: 1 })
  t.match(await col.deleteMany({ grp: 'g' }), { deletedCount: 4 })
  t.match(await col.deleteMany({ grp: 'g' }), { deletedCount: 0 })

  await col.insertOne({ _id: 'atomic', label: 'x', s: 'text' })
  const typeErr = await serverError(col.updateOne({ _id: 'atomic' }, { $set: { label: 'changed' }, $inc: { s: 1 } }))
  t.equal(typeErr.code, 14, '$inc on a string is TypeMismatch')
  t.same(await col.findOne({ _id: 'atomic' }), { _id: 'atomic', label: 'x', s: 'text' }, 'failed update is atomic')

  t.match(await serverError(col.updateOne({}, [{ $set: { a: 1 } }])), { code: 115 }, 'update pipelines unsupported')
  t.match(await serverError(col.updateOne({}, { $set: { 'a.$[x]': 1 } }, { arrayFilters: [{ x: 1 }] })), { code: 115 })
})

t.test('findOneAndUpdate / Delete / Replace', async t => {
  const col = db.collection<Loose>('fam')
  await col.insertMany([
    { _id: 1, q: 'job', pri: 2, state: 'new' },
    { _id: 2, q: 'job', pri: 5, state: 'new' },
    { _id: 3, q: 'job', pri: 1, state: 'new' },
  ])
  const claimed = await col.findOneAndUpdate(
    { q: 'job', state: 'new' },
    { $set: { state: 'taken' } },
    { sort: { pri: -1 }, returnDocument: 'after', projection: { state: 1, pri: 1 } },
  )
  t.same(claimed, { _id: 2, pri: 5, state: 'taken' })
  const before = await col.findOneAndUpdate({ _id: 3 }, { $inc: { pri: 10 } })
  t.same(before, { _id: 3, q: 'job', pri: 1, state: 'new' }, 'default returns the document before')
  const meta = await col.findOneAndUpdate(
    { _id: 99 },
    { $set: { x: 1 } },
    { upsert: true, returnDocument: 'after', includeResultMetadata: true },
  )
  t.same(meta.value, { _id: 99, x: 1 })
  t.match(meta.lastErrorObject, { n: 1, updatedExisting: false, upserted: 99 })
  t.equal(meta.ok, 1)
  const upsertBefore = await col.findOneAndUpdate({ _id: 100 }, { $set: { x: 1 } }, { upsert: true })
  t.equal(upsertBefore, null, 'upsert with returnDocument before returns null')
  t.equal(await col.findOneAndUpdate({ _id: 1000 }, { $set: { x: 1 } }), null)
  const existing = await col.findOneAndUpdate({ _id: 1 }, { $set: { x: 2 } }, { includeResultMetadata: true })
  t.match(existing.lastErrorObject, { n: 1, updatedExisting: true })

  const removed = await col.findOneAndDelete({ q: 'job' }, { sort: { pri: 1 } })
  t.same(removed, { _id: 1, q: 'job', pri: 2, state: 'new', x: 2 })
  t.equal(await col.countDocuments({ _id: 1 }), 0)
  const replaced = await col.findOneAndReplace({ _id: 2 }, { q: 'job', pri: 0 }, { returnDocument: 'after' })
  t.same(replaced, { _id: 2, q: 'job', pri: 0 })
  t.equal(await col.findOneAndDelete({ q: 'nothing' }), null)
})

t.test('find options and server-side cursors', async t => {
  const col = mdb.collection<Loose>('cursor')
  await col.insertMany(Array.from({ length: 50 }, (_, i) => ({ _id: i, even: i % 2 === 0, sq: i * i, nested: { v: i, w: -i } })))

  const page = await col
    .find({ even: true }, { sort: { _id: -1 }, skip: 2, limit: 3, projection: { sq: 1, 'nested.v': 1 } })
    .toArray()
  t.same(page, [
    { _id: 44, sq: 1936, nested: { v: 44 } },
    { _id: 42, sq: 1764, nested: { v: 42 } },
    { _id: 40, sq: 1600, nested: { v: 40 } },
  ])
  t.same(await col.findOne({ _id: 7 }, { projection: { nested: 0, even: 0 } }), { _id: 7, sq: 49 })
  t.same(await col.findOne({ _id: 7 }, { projection: { _id: 0, sq: 1 } }), { sq: 49 })
  t.same(
    (await col.find({ sq: { $gt: 100, $lte: 400 } }).sort({ sq: -1 }).toArray()).map(d => d._id),
    [20, 19, 18, 17, 16, 15, 14, 13, 12, 11],
  )
  t.same((await col.find({ $or: [{ _id: 1 }, { 'nested.w': -2 }] }).toArray()).map(d => d._id), [1, 2])

  clearEvents()
  const batched = await col.find({}, { batchSize: 7 }).toArray()
  t.equal(batched.length, 50)
  t.equal(replies('find')[0].cursor.firstBatch.length, 7)
  t.same(replies('getMore').map(r => r.cursor.nextBatch.length), [7, 7, 7, 7, 7, 7, 1])
  t.equal(replies('getMore').at(-1)!.cursor.id.toString(), '0', 'last batch closes the cursor')

  clearEvents()
  t.equal((await col.find({}, { limit: 10, batchSize: 3 }).toArray()).length, 10)
  t.same(replies('getMore').map(r => r.cursor.nextBatch.length), [3, 3, 1])

  clearEvents()
  t.equal((await col.find({}, { limit: -5 }).toArray()).length, 5, 'negative limit = single batch')
  t.equal(replies('getMore').length, 0)
  t.equal(replies('find')[0].cursor.id.toString(), '0')

  clearEvents()
  const early = col.find({}, { batchSize: 5 })
  t.equal((await early.next())!._id, 0)
  await early.close()
  const killed = replies('killCursors')
  t.equal(killed.length, 1)
  t.equal(killed[0].cursorsKilled.length, 1)
  const cursorId = killed[0].cursorsKilled[0]
  t.match(await serverError(mdb.command({ getMore: Long.fromValue(cursorId), collection: 'cursor' })), {
    code: 43,
    codeName: 'CursorNotFound',
  })

  // A cursor sees deletes made after it was opened (no snapshot isolation).
  const live = col.find({}, { batchSize: 2 })
  await live.next()
  await col.deleteMany({ _id: { $gte: 10 } })
  t.equal((await live.toArray()).length, 9)
})

t.test('toArray over 250k documents', async t => {
  const N = 250_000
  const col = db.collection<Loose>('big')
  await col.insertMany(Array.from({ length: N }, (_, i) => ({ _id: i })))
  t.equal(await col.estimatedDocumentCount(), N)
  const all = await col.find().toArray()
  t.equal(all.length, N)
  t.ok(all.every((d, i) => d._id === i), 'natural (insertion) order')
  t.equal(await col.countDocuments({ _id: { $gte: N - 10 } }), 10)
})

t.test('default first batch and the 16 MB reply cap', async t => {
  const col = mdb.collection<Loose>('batches')
  await col.insertMany(Array.from({ length: 150 }, (_, i) => ({ _id: i })))
  clearEvents()
  t.equal((await col.find().toArray()).length, 150)
  t.equal(replies('find')[0].cursor.firstBatch.length, 101, 'default first batch is 101 documents')
  t.same(replies('getMore').map(r => r.cursor.nextBatch.length), [49])

  const wide = mdb.collection<Loose>('wide')
  const pad = 'x'.repeat(512 * 1024)
  await wide.insertMany(Array.from({ length: 40 }, (_, i) => ({ _id: i, pad })))
  clearEvents()
  const all = await wide.find().toArray()
  t.equal(all.length, 40)
  t.ok(all.every((d, i) => d._id === i && d.pad.length === pad.length))
  const cursorReplies = [...replies('find'), ...replies('getMore')]
  t.ok(cursorReplies.length >= 2, 'the 20 MB result needs more than one reply')
  t.ok(replies('find')[0].cursor.firstBatch.length < 101, 'first batch is capped by size too')
  for (const reply of cursorReplies) {
    t.ok(BSON.calculateObjectSize(reply) <= 16 * 1024 * 1024, 'reply fits in 16 MB')
  }
})

t.test('aggregation', async t => {
  const col = db.collection<Loose>('agg')
  await col.insertMany([
    { _id: 1, cat: 'a', qty: 5, price: 2.5, tags: ['x', 'y'], at: new Date('2024-01-01T00:00:00Z') },
    { _id: 2, cat: 'b', qty: 3, price: 10, tags: ['y'], at: new Date('2024-01-02T00:00:00Z') },
    { _id: 3, cat: 'a', qty: 7, price: 1, tags: [], at: new Date('2024-01-03T00:00:00Z') },
    { _id: 4, cat: 'c', qty: 1, price: 4, tags: ['x'], at: new Date('2024-01-04T00:00:00Z') },
  ])
  t.same(
    await col
      .aggregate([
        { $match: { qty: { $gte: 2 } } },
        { $group: { _id: '$cat', total: { $sum: '$qty' }, n: { $sum: 1 }, avg: { $avg: '$price' } } },
        { $sort: { _id: 1 } },
      ])
      .toArray(),
    [
      { _id: 'a', total: 12, n: 2, avg: 1.75 },
      { _id: 'b', total: 3, n: 1, avg: 10 },
    ],
  )
  t.same(
    await col
      .aggregate([
        { $sort: { _id: 1 } },
        { $skip: 1 },
        { $limit: 2 },
        {
          $project: {
            value: { $multiply: ['$qty', '$price'] },
            plus: { $add: ['$qty', 1] },
            minus: { $subtract: ['$qty', 1] },
            half: { $divide: ['$qty', 2] },
            mod: { $mod: ['$qty', 2] },
            floor: { $floor: { $divide: ['$qty', 2] } },
            trunc: { $trunc: 2.7 },
            ageMs: { $subtract: [new Date('2024-01-05T00:00:00Z'), '$at'] },
          },
        },
      ])
      .toArray(),
    [
      { _id: 2, value: 30, plus: 4, minus: 2, half: 1.5, mod: 1, floor: 1, trunc: 2, ageMs: 3 * 86_400_000 },
      { _id: 3, value: 7, plus: 8, minus: 6, half: 3.5, mod: 1, floor: 3, trunc: 2, ageMs: 2 * 86_400_000 },
    ],
  )
  t.same(await col.aggregate([{ $match: { cat: 'a' } }, { $count: 'n' }]).toArray(), [{ n: 2 }])
  t.same(await col.aggregate([{ $match: { cat: 'zzz' } }, { $count: 'n' }]).toArray(), [], '$count of nothing')
  t.same(
    await col.aggregate([{ $match: { cat: 'zzz' } }, { $group: { _id: null, s: { $sum: '$qty' } } }]).toArray(),
    [],
    '$group of nothing',
  )
  t.same(
    await col
      .aggregate([
        {
          $facet: {
            byCat: [{ $group: { _id: '$cat', n: { $sum: 1 } } }, { $sort: { _id: 1 } }],
            total: [{ $count: 'n' }],
          },
        },
      ])
      .toArray(),
    [{ byCat: [{ _id: 'a', n: 2 }, { _id: 'b', n: 1 }, { _id: 'c', n: 1 }], total: [{ n: 4 }] }],
  )
  const unwound = await col
    .aggregate([
      { $unwind: '$tags' },
      { $addFields: { tagUpper: { $toUpper: '$tags' } } },
      { $sort: { _id: 1, tags: 1 } },
      { $project: { _id: 1, tagUpper: 1 } },
    ])
    .toArray()
  t.same(unwound, [
    { _id: 1, tagUpper: 'X' },
    { _id: 1, tagUpper: 'Y' },
    { _id: 2, tagUpper: 'Y' },
    { _id: 4, tagUpper: 'X' },
  ])
  t.same((await col.findOne({ _id: 1 }))!.tags, ['x', 'y'], 'pipeline did not modify stored documents')
  t.equal((await col.aggregate([], { batchSize: 1 }).toArray()).length, 4, 'aggregate cursor with getMore')

  t.equal(await col.countDocuments({ cat: 'a' }), 2)
  t.equal(await col.countDocuments(), 4)
  t.equal(await col.countDocuments({}, { skip: 1, limit: 2 }), 2)
  t.equal(await db.collection<Loose>('empty').countDocuments(), 0)
  t.equal(await col.estimatedDocumentCount(), 4)
  t.same((await col.distinct('cat')).sort(), ['a', 'b', 'c'])
  t.same((await col.distinct('tags', { cat: 'a' })).sort(), ['x', 'y'])
})

t.test('report-style $group with bucket arithmetic', async t => {
  // Mirrors reports/metrics.ts and reports/time-buckets.ts: numeric epoch-ms keys, $switch
  // offsets, $cond accumulators and an ln-binned histogram.
  const HOUR = 3_600_000
  const DAY = 24 * HOUR
  const col = db.collection<Loose>('records')
  const t0 = Date.UTC(2024, 2, 30, 22) // 2024-03-30T22:00Z
  const records = [
    { t: t0, status: 'done', dur: 100 },
    { t: t0 + 1 * HOUR, status: 'done', dur: 250 },
    { t: t0 + 3 * HOUR, status: 'failed', dur: 40 },
    { t: t0 + 27 * HOUR, status: 'done', dur: 1000 },
    { t: t0 + 28 * HOUR, status: 'failed' },
  ]
  await col.insertMany(records.map(r => ({ accountId: 'acc', ...r })))
  await col.insertOne({ accountId: 'other', t: t0, status: 'done', dur: 5 })
  const switchAt = t0 + 2 * HOUR
  const offset = { $switch: { branches: [{ case: { $lt: ['$t', switchAt] }, then: HOUR }], default: 2 * HOUR } }
  const local = { $add: ['$t', offset] }
  const key = { $subtract: [local, { $mod: [local, DAY] }] }
  const done = { $eq: ['$status', 'done'] }
  const rows = await col
    .aggregate(
      [
        { $match: { accountId: 'acc', t: { $gte: t0, $lt: t0 + 2 * DAY } } },
        {
          $group: {
            _id: key,
            m0: { $sum: { $cond: [done, 1, 0] } },
            m1s: { $sum: { $cond: [{ $or: [done, { $eq: ['$status', 'failed'] }] }, '$dur', 0] } },
            m1n: { $sum: { $cond: [{ $eq: [{ $ifNull: ['$dur', null] }, null] }, 0, 1] } },
            m2: { $min: { $cond: [done, '$dur', null] } },
            m3: { $max: '$dur' },
          },
        },
        { $sort: { _id: 1 } },
      ],
      { allowDiskUse: true },
    )
    .toArray()
  // The same arithmetic in JS (what reports/time-buckets.ts bucketKey does).
  const localKey = (r: { t: number }) => {
    const l = r.t + (r.t < switchAt ? HOUR : 2 * HOUR)
    return l - (l % DAY)
  }
  const expected = new Map<number, { m0: number; m1s: number; m1n: number; m2: number | null; m3: number | null }>()
  for (const r of records) {
    const k = localKey(r)
    const e = expected.get(k) ?? { m0: 0, m1s: 0, m1n: 0, m2: null, m3: null }
    const dur = (r as { dur?: number }).dur
    if (r.status === 'done') e.m0 += 1
    e.m1s += dur ?? 0
    if (dur !== undefined) {
      e.m1n += 1
      e.m3 = Math.max(e.m3 ?? dur, dur)
      if (r.status === 'done') e.m2 = Math.min(e.m2 ?? dur, dur)
    }
    expected.set(k, e)
  }
  t.equal(expected.size, 3, 'the records span three local days')
  t.same(
    rows,
    [...expected].sort((a, b) => a[0] - b[0]).map(([k, e]) => ({ _id: k, ...e })),
  )
  const bins = await col
    .aggregate([
      { $match: { accountId: 'acc', dur: { $gte: 0 } } },
      {
        $group: {
          _id: { k: key, b: { $floor: { $multiply: [{ $ln: { $add: ['$dur', 1] } }, 100] } } },
          n: { $sum: 1 },
          mx: { $max: '$dur' },
        },
      },
    ])
    .toArray()
  const bin = (v: number) => Math.floor(Math.log(v + 1) * 100)
  t.same(
    bins.map(r => [r._id.k, r._id.b, r.n, r.mx]).sort((a, b) => a[0] - b[0] || a[1] - b[1]),
    records
      .filter(r => (r as { dur?: number }).dur !== undefined)
      .map(r => {
        const dur = (r as { dur: number }).dur
        return [localKey(r), bin(dur), 1, dur]
      })
      .sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!),
  )
})

t.test('unique indexes and E11000 errors', async t => {
  const col = db.collection<Loose>('users')
  t.equal(await col.createIndex({ email: 1 }, { unique: true }), 'email_1')
  await col.insertOne({ email: 'a@x.io', n: 1 })

  const dup = await serverError(col.insertOne({ email: 'a@x.io' }))
  t.equal(dup.code, 11000)
  t.equal(
    dup.message,
    `E11000 duplicate key error collection: ${dbName}.users index: email_1 dup key: { email: "a@x.io" }`,
  )
  t.same(dup.keyValue, { email: 'a@x.io' })
  t.same(dup.keyPattern, { email: 1 })

  await col.insertOne({ _id: 'fixed', email: 'b@x.io' })
  const dupId = await serverError(col.insertOne({ _id: 'fixed', email: 'c@x.io' }))
  t.equal(dupId.code, 11000)
  t.match(dupId.message, /index: _id_ dup key: \{ _id: "fixed" \}$/)

  const dupUpdate = await serverError(col.updateOne({ _id: 'fixed' }, { $set: { email: 'a@x.io' } }))
  t.equal(dupUpdate.code, 11000)
  t.equal((await col.findOne({ _id: 'fixed' }))!.email, 'b@x.io', 'failed update left the document unchanged')
  t.equal((await serverError(col.updateOne({ email: 'new@x.io' }, { $set: { email: 'a@x.io' } }, { upsert: true }))).code, 11000)
  const dupFam = await serverError(col.findOneAndUpdate({ _id: 'fixed' }, { $set: { email: 'a@x.io' } }))
  t.match(dupFam, { code: 11000, keyValue: { email: 'a@x.io' } })
  const idUpsert = await serverError(col.updateOne({ _id: 'fixed', email: 'other' }, { $set: { n: 1 } }, { upsert: true }))
  t.match(idUpsert.message, /index: _id_ dup key: \{ _id: "fixed" \}$/, 'upsert onto an existing _id')
  t.match(await col.updateMany({ _id: { $in: ['fixed', 'fixed'] } }, { $inc: { hits: 1 } }), { matchedCount: 1 })
  t.equal((await col.findOne({ _id: 'fixed' }))!.hits, 1)

  // Changing a unique value frees the old one.
  await col.updateOne({ email: 'a@x.io' }, { $set: { email: 'z@x.io' } })
  await col.insertOne({ email: 'a@x.io', n: 2 })
  t.equal(await col.countDocuments({ email: { $in: ['a@x.io', 'z@x.io'] } }), 2)
  t.equal((await col.findOne({ email: 'a@x.io' }))!.n, 2, 'lookup through the unique index')

  // Missing values are indexed as null unless the index is sparse.
  const nulls = db.collection<Loose>('nulls')
  await nulls.createIndex({ sso: 1 }, { unique: true })
  await nulls.insertOne({ a: 1 })
  const nullDup = await serverError(nulls.insertOne({ a: 2 }))
  t.match(nullDup.message, /index: sso_1 dup key: \{ sso: null \}$/)
  t.equal((await serverError(col.createIndex({ sso: 1 }, { unique: true }))).code, 11000, 'index build fails on duplicates')
  await col.createIndex({ sso: 1 }, { unique: true, sparse: true })
  const sparse = db.collection<Loose>('sparse')
  await sparse.createIndex({ handle: 1 }, { unique: true, sparse: true })
  await sparse.insertMany([{ a: 1 }, { a: 2 }, { handle: 'h' }])
  t.equal((await serverError(sparse.insertOne({ handle: 'h' }))).code, 11000)

  const partial = db.collection<Loose>('partial')
  await partial.createIndex({ code: 1 }, { unique: true, partialFilterExpression: { active: true } })
  await partial.insertMany([{ code: 'c', active: false }, { code: 'c', active: false }, { code: 'c', active: true }])
  t.equal((await serverError(partial.insertOne({ code: 'c', active: true }))).code, 11000)

  const compound = db.collection<Loose>('compound')
  await compound.createIndex({ tenant: 1, slug: 1 }, { unique: true })
  await compound.insertMany([{ tenant: 't1', slug: 's' }, { tenant: 't2', slug: 's' }])
  const cdup = await serverError(compound.insertOne({ tenant: 't1', slug: 's' }))
  t.match(cdup, { code: 11000, keyValue: { tenant: 't1', slug: 's' } })
  t.match(cdup.message, /index: tenant_1_slug_1 dup key: \{ tenant: "t1", slug: "s" \}$/)

  const multikey = db.collection<Loose>('multikey')
  await multikey.createIndex({ tags: 1 }, { unique: true })
  await multikey.insertOne({ tags: ['a', 'b'] })
  t.equal((await serverError(multikey.insertOne({ tags: ['b', 'c'] }))).code, 11000, 'array elements are index keys')

  const names = (await col.listIndexes().toArray()).map(i => i.name)
  t.same(names, ['_id_', 'email_1', 'sso_1'])
  t.match(await col.indexes(), [{ name: '_id_', key: { _id: 1 } }, { name: 'email_1', key: { email: 1 }, unique: true }])
  t.equal(await col.createIndex({ email: 1 }, { unique: true }), 'email_1', 'identical index is a no-op')
  t.equal((await serverError(col.createIndex({ other: 1 }, { name: 'email_1' }))).code, 86)
  t.equal((await serverError(col.createIndex({ email: 1 }, { name: 'email_1' }))).code, 85)
  t.equal((await serverError(col.createIndex({ email: 1 }, { unique: true, name: 'email_again' }))).code, 85)
  await col.dropIndex('sso_1')
  t.equal((await serverError(col.dropIndex('sso_1'))).code, 27)
  await col.insertOne({ email: 'e@x.io' })
  t.equal(await col.countDocuments({ sso: { $exists: false } }), 4)
})

t.test('insertMany with duplicates: ordered and unordered', async t => {
  const col = db.collection<Loose>('bulk_unordered')
  await col.createIndex({ k: 1 }, { unique: true })
  await col.insertOne({ k: 2 })
  const err = await serverError(col.insertMany([1, 2, 3, 2, 4, 5].map(k => ({ k })), { ordered: false }))
  t.ok(err instanceof MongoBulkWriteError)
  const bulk = err as MongoBulkWriteError
  t.equal(bulk.code, 11000)
  t.equal(bulk.insertedCount, 4)
  t.same(bulk.writeErrors instanceof Array ? bulk.writeErrors.map(e => e.index) : [], [1, 3])
  t.same((await col.find().sort({ k: 1 }).toArray()).map(d => d.k), [1, 2, 3, 4, 5])

  const ordered = db.collection<Loose>('bulk_ordered')
  await ordered.createIndex({ k: 1 }, { unique: true })
  const oerr = (await serverError(ordered.insertMany([1, 2, 2, 3].map(k => ({ k }))))) as MongoBulkWriteError
  t.equal(oerr.code, 11000)
  t.equal(oerr.insertedCount, 2)
  t.same((await ordered.find().sort({ k: 1 }).toArray()).map(d => d.k), [1, 2], 'ordered insert stops at the error')
})

t.test('bulkWrite with mixed operations', async t => {
  const col = db.collection<Loose>('bulk_mixed')
  await col.insertMany([
    { _id: 1, n: 0 },
    { _id: 2, n: 0 },
    { _id: 3, n: 0 },
  ])
  const res = await col.bulkWrite([
    { updateOne: { filter: { _id: 10 }, update: { $set: { n: 1 } }, upsert: true } },
    { insertOne: { document: { _id: 11, n: 1 } } },
    { updateMany: { filter: { n: 0 }, update: { $inc: { n: 5 } } } },
    { updateOne: { filter: { _id: 1 }, update: { $set: { n: 5 } } } },
    { deleteOne: { filter: { _id: 2 } } },
    { replaceOne: { filter: { _id: 3 }, replacement: { n: 42 } } },
    { deleteMany: { filter: { _id: { $in: [11, 999] } } } },
  ])
  t.match(res, { insertedCount: 1, upsertedCount: 1, matchedCount: 5, modifiedCount: 4, deletedCount: 2 })
  t.same(res.upsertedIds, { 0: 10 })
  t.same(await col.find().sort({ _id: 1 }).toArray(), [
    { _id: 1, n: 5 },
    { _id: 3, n: 42 },
    { _id: 10, n: 1 },
  ])

  const err = await serverError(
    col.bulkWrite(
      [
        { insertOne: { document: { _id: 1 } } },
        { insertOne: { document: { _id: 20 } } },
        { updateOne: { filter: { _id: 21 }, update: { $set: { n: 1 } }, upsert: true } },
      ],
      { ordered: false },
    ),
  )
  t.ok(err instanceof MongoBulkWriteError)
  t.match((err as MongoBulkWriteError).result, { insertedCount: 1, upsertedCount: 1 })
})

t.test('TTL indexes expire documents in the background', { skip: REAL_MONGO && 'mongod TTL runs every 60 s' }, async t => {
  const col = db.collection<Loose>('ttl')
  await col.createIndex({ expiresAt: 1 }, { expireAfterSeconds: 0 })
  const now = Date.now()
  const past = new Date(now - 60_000)
  const future = new Date(now + 3_600_000)
  await col.insertMany([
    { _id: 'past', expiresAt: past },
    { _id: 'soon', expiresAt: new Date(now + 400) },
    { _id: 'future', expiresAt: future },
    { _id: 'string', expiresAt: past.toISOString() },
    { _id: 'missing' },
    { _id: 'array', expiresAt: [future, past] },
    { _id: 'arrayFuture', expiresAt: [future] },
  ])
  t.equal(await col.countDocuments({ _id: 'soon' }), 1, 'not expired yet')
  const ids = async () => (await col.find({}, { projection: { _id: 1 } }).toArray()).map(d => d._id).sort()
  const expected = ['arrayFuture', 'future', 'missing', 'string']
  const deadline = Date.now() + 5_000
  while (JSON.stringify(await ids()) !== JSON.stringify(expected) && Date.now() < deadline) {
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  t.same(await ids(), expected, 'expired dates (earliest of an array) removed; non-dates never expire')

  const hour = db.collection<Loose>('ttl_hour')
  await hour.createIndex({ createdAt: 1 }, { expireAfterSeconds: 3600 })
  await hour.insertOne({ createdAt: new Date(now - 10_000) })
  await new Promise(resolve => setTimeout(resolve, 500))
  t.equal(await hour.countDocuments(), 1, 'kept until createdAt + expireAfterSeconds')
})

t.test('concurrent clients and a pool of 10 connections', async t => {
  const clients = await Promise.all(
    [0, 1, 2, 3].map(async () => new MongoClient(server.url, { maxPoolSize: 10 }).connect()),
  )
  t.teardown(() => Promise.all(clients.map(c => c.close())))
  // Each client writes 1000 documents with 280 requests in flight at once:
  // 200 insertOne and 80 insertMany of 10 (4 x 280 round trips keep this fast).
  await Promise.all(
    clients.map((c, ci) => {
      const col = c.db(dbName).collection<Loose>('concurrent')
      const ones = Array.from({ length: 200 }, (_, i) => col.insertOne({ ci, i }))
      const manys = Array.from({ length: 80 }, (_, b) =>
        col.insertMany(Array.from({ length: 10 }, (_, k) => ({ ci, i: 200 + b * 10 + k }))),
      )
      return Promise.all([...ones, ...manys])
    }),
  )
  const col = db.collection<Loose>('concurrent')
  t.equal(await col.countDocuments(), 4000)
  t.same(await col.aggregate([{ $group: { _id: '$ci', n: { $sum: 1 } } }, { $sort: { _id: 1 } }]).toArray(), [
    { _id: 0, n: 1000 },
    { _id: 1, n: 1000 },
    { _id: 2, n: 1000 },
    { _id: 3, n: 1000 },
  ])
  const reads = await Promise.all(Array.from({ length: 50 }, (_, i) => col.findOne({ ci: i % 4, i })))
  t.ok(reads.every((d, i) => d?.i === i))
  if (!REAL_MONGO) {
    const status = await db.admin().command({ serverStatus: 1 })
    t.ok(status.connections.current >= 10, 'several connections open at once')
  }
})

t.test('catalog commands', async t => {
  await db.createCollection('cat_a')
  t.match(await serverError(db.createCollection('cat_a')), { code: 48, codeName: 'NamespaceExists' })
  t.same(await db.listCollections({ name: 'cat_a' }, { nameOnly: true }).toArray(), [{ name: 'cat_a', type: 'collection' }])
  await db.collection<Loose>('cat_a').rename('cat_b')
  const names = (await db.listCollections({}, { nameOnly: true }).toArray()).map(c => c.name)
  t.ok(names.includes('cat_b') && !names.includes('cat_a'))
  t.equal(await db.collection<Loose>('cat_b').drop(), true)
  t.equal(await db.collection<Loose>('never_created').drop(), false, 'NamespaceNotFound is swallowed by the driver')
  if (!REAL_MONGO) {
    t.match(await serverError(db.createCollection('capped', { capped: true, size: 1024 })), { code: 115 })
  }
})

t.test('errors, sessions, transactions and change streams', async t => {
  const col = db.collection<Loose>('errors')
  await col.insertOne({ a: 1 })
  t.match(await serverError(col.find({ a: { $foo: 1 } }).toArray()), { code: 2, codeName: 'BadValue' })
  t.match(await serverError(col.find({ $foo: 1 }).toArray()), { code: 2 })

  const session = client.startSession()
  try {
    await col.insertOne({ a: 2 }, { session })
    t.equal(await col.countDocuments({}, { session }), 2, 'explicit sessions work outside transactions')
    const txErr = await session
      .withTransaction(async () => {
        await col.insertOne({ a: 3 }, { session })
      })
      .then(
        () => null,
        (e: unknown) => e as MongoServerError & { originalError?: MongoServerError },
      )
    t.ok(txErr, 'transactions are rejected (standalone server)')
    t.equal(txErr!.code ?? txErr!.originalError?.code, 20)
  } finally {
    await session.endSession()
  }
  t.equal(await col.countDocuments({ a: 3 }), 0)
  t.match(
    await serverError(db.command({ insert: 'errors', documents: [{ a: 4 }], txnNumber: Long.fromNumber(1), autocommit: false, startTransaction: true })),
    { code: 20, codeName: 'IllegalOperation' },
  )

  const stream = col.watch()
  t.match(await serverError(stream.tryNext()), { code: 40573 }, 'change streams need a replica set')
  await stream.close()

  t.same(await db.command({ ping: 1 }), { ok: 1 }, 'connection still healthy after errors')
})
