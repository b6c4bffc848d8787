// Strings in the embedded store's index keys (platform/store/index-keys.ts): every string, U+0000
// included, short or long, has a key of its own that reads back as it was written, so a unique
// index, a count and an equality answer for that very string; and a database whose indexes an
// older key encoding wrote gets them rebuilt instead of read as if they were of this one.
import t from 'tap'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import { WRITE_SLICE } from '../../platform/store/lmdb-collection.js'
import { documentKeys, entryId, entryKey, FIRST_ENCODING, KEY_ENCODING } from '../../platform/store/index-keys.js'
import { revisionKey } from '../../platform/store/lmdb-indexes.js'
import { DuplicateKeyError, type Doc } from '../../platform/store/types.js'
import { tempDir } from '../support/temp-dir.js'

const ids = (docs: Doc[]) => docs.map(d => d._id)
const refused = (p: Promise<unknown>) => p.then(() => false, e => e instanceof DuplicateKeyError)

function openStore(t: { teardown(fn: () => unknown): void }, path = tempDir(t)) {
  const store = new LmdbStore({ path, sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  return store
}

t.test('blocking a long address followed by U+0000 and more does not block the address itself', async t => {
  const store = openStore(t)
  await store.ensureIndexes('blocked', [{ name: 'identity_unique', key: { accountId: 1, address: 1 }, unique: true }])
  const blocked = store.collection('blocked')
  const real = `victim${'q'.repeat(64)}@example.com`
  await blocked.insertOne({ _id: 'decoy', accountId: 'acme', address: `${real}\0x` })
  t.notOk(await refused(blocked.insertOne({ _id: 'real', accountId: 'acme', address: real })), 'the address itself is blocked too')
  t.ok(await refused(blocked.insertOne({ _id: 'again', accountId: 'acme', address: real })), 'and only once')
  t.same(ids(await blocked.find({ accountId: 'acme', address: real })), ['real'], 'found by its address')
  t.equal(await blocked.countDocuments({ accountId: 'acme', address: real }), 1, 'counted by its address')
  t.equal(await blocked.countDocuments({ accountId: 'acme', address: `${real}\0x` }), 1)
  t.same(ids(await blocked.find({ accountId: 'acme' }, { sort: { address: 1 } })), ['real', 'decoy'], 'a string sorts before itself followed by U+0000')
  t.same(ids(await blocked.find({ accountId: 'acme', address: { $gt: real } })), ['decoy'], 'and ranges as it sorts')
})

t.test('two contacts whose identifiers differ only after U+0000 are both stored, found and counted apart', async t => {
  const store = openStore(t)
  await store.ensureIndexes('contacts', [
    { name: 'batch_identifier_unique', key: { batchId: 1, identifier: 1 }, unique: true },
    { name: 'batch_identifier', key: { batchId: 1, identifier: 1, _id: 1 } },
    { name: 'batch_identifier_counted', key: { batchId: 1, identifier: 1 }, counted: true },
  ])
  const contacts = store.collection('contacts')
  const long = 'P'.repeat(70)
  const loaded = await contacts.insertMany(
    [
      { _id: 'tail', batchId: 'b', identifier: `${long}\0tail` },
      { _id: 'plain', batchId: 'b', identifier: long },
    ],
    { ordered: false },
  )
  t.equal(loaded.insertedCount, 2, 'both inserted')
  t.equal(await contacts.countDocuments({ batchId: 'b' }), 2, 'both stored')
  for (const [identifier, id] of [[long, 'plain'], [`${long}\0tail`, 'tail']] as const) {
    t.same(ids(await contacts.find({ batchId: 'b', identifier })), [id], `found by ${JSON.stringify(identifier.slice(68))}`)
    t.equal(await contacts.countDocuments({ batchId: 'b', identifier }), 1, 'counted by it')
  }
  const rows = await contacts.countBy({ batchId: 'b' }, ['identifier'])
  t.same(rows.map(r => r.values[0]).sort(), [long, `${long}\0tail`], 'grouped by the whole identifier')
})

t.test('a count by a long string counts the documents holding that very string, not those it begins', async t => {
  const store = openStore(t)
  await store.ensureIndexes('entries', [{ name: 'k', key: { k: 1 } }])
  await store.ensureIndexes('numbers', [{ name: 'k', key: { k: 1 }, counted: true }])
  const long = 'P'.repeat(70)
  for (const name of ['entries', 'numbers']) {
    const c = store.collection(name)
    await c.insertMany([{ _id: 'plain', k: long }, { _id: 'tail', k: `${long}\0tail` }])
    t.equal(await c.countDocuments({ k: long }), 1, `${name}: the string itself`)
    t.equal(await c.countDocuments({ k: `${long}\0tail` }), 1, `${name}: the string with U+0000 and more`)
  }
})

t.test('strings lmdb-js writes as the same bytes have keys of their own', async t => {
  const store = openStore(t)
  await store.ensureIndexes('things', [{ name: 'k_unique', key: { k: 1 }, unique: true }])
  const things = store.collection('things')
  const a62 = 'a'.repeat(62)
  const pairs = [
    // A short string's U+0001 is written as the bytes 4 1; a long one is written byte for byte.
    ['\u0001' + a62, '\u0004\u0001' + a62],
    ['\u0000' + a62, '\u0004\u0000' + a62],
    // A long string's lone surrogate is written as U+FFFD.
    ['z'.repeat(70) + '\uD800', 'z'.repeat(70) + '\uFFFD'],
  ]
  for (const [i, [x, y]] of pairs.entries()) {
    await things.insertOne({ _id: `x${i}`, k: x })
    t.notOk(await refused(things.insertOne({ _id: `y${i}`, k: y })), `${JSON.stringify(y.slice(0, 3))}... is not ${JSON.stringify(x.slice(0, 3))}...`)
    t.same(ids(await things.find({ k: y })), [`y${i}`])
  }
})

t.test('an _id with U+0000 in an index entry reads back whole', async t => {
  const store = openStore(t)
  await store.ensureIndexes('things', [{ name: 'k', key: { k: 1 } }])
  const things = store.collection('things')
  const id = `${'i'.repeat(70)}\0${'j'.repeat(10)}`
  await things.insertOne({ _id: id, k: 'x' })
  t.same(ids(await things.find({ k: 'x' })), [id], 'found through the index')
  await things.updateOne({ _id: id }, { $set: { k: 'y' } })
  t.same(ids(await things.find({ k: { $in: ['x', 'y'] } })), [id], 'its entry moved with the update')
  t.equal(store.servingIndexDb('things', 'k').getCount(), 1)
})

t.test('indexes an older key encoding wrote are rebuilt, and answer right meanwhile', async t => {
  const path = tempDir(t)
  const long = 'P'.repeat(70)
  const unique = { name: 'batch_identifier_unique', key: { batchId: 1, identifier: 1 }, unique: true }
  const plain = { name: 'state_identifier', key: { state: 1, identifier: 1 } }
  const counted = { name: 'batch_state', key: { batchId: 1, state: 1 }, counted: true }
  const docs: Doc[] = Array.from({ length: WRITE_SLICE * 4 }, (_, i) => ({ _id: `c${String(i).padStart(5, '0')}`, batchId: 'b', state: i % 2 ? 'pending' : 'done', identifier: `id${i}` }))
  docs.push({ _id: 'plain', batchId: 'b', state: 'pending', identifier: long }, { _id: 'tail', batchId: 'b', state: 'pending', identifier: `${long}\0tail` })

  // The database as an older version left it: declarations without an encoding, entries and
  // numbers written by the first encoding.
  const old = new LmdbStore({ path, sweepIntervalMs: 0 })
  await old.collection('contacts').insertMany(docs)
  await old.env.transaction(() => {
    for (const spec of [unique, plain]) {
      const db = old.indexDb('contacts', spec.name)
      for (const doc of docs) for (const key of documentKeys(doc, Object.keys(spec.key), FIRST_ENCODING).keys) db.putSync(entryKey(key, doc._id, FIRST_ENCODING), Buffer.alloc(0))
    }
    const numbers = old.countDb('contacts', counted.name)
    for (const doc of docs) {
      const [key] = documentKeys(doc, Object.keys(counted.key), FIRST_ENCODING).keys
      numbers.putSync(key!, (numbers.get(key!) ?? 0) + 1)
    }
    old.meta.putSync('contacts', [unique, plain, counted])
    old.meta.putSync(revisionKey('contacts'), 1)
  })
  await old.close()

  const store = openStore(t, path)
  const contacts = store.collection('contacts')
  const pending = docs.filter(d => d.state === 'pending')
  // Before any declaration: the old indexes are not read as if they were of this encoding.
  t.equal(await contacts.countDocuments({ batchId: 'b', identifier: long }), 1, 'the identifier itself counted once')
  t.same(ids(await contacts.find({ batchId: 'b', identifier: `${long}\0tail` })), ['tail'], 'the one with U+0000 found')
  t.equal(await contacts.countDocuments({ batchId: 'b', state: 'pending' }), pending.length)

  await store.ensureIndexes('contacts', [unique, plain, counted])
  t.same(
    Object.fromEntries(store.declared('contacts').map(s => [s.name, [s.encoding, !!s.building]])),
    { [unique.name]: [KEY_ENCODING, false], [counted.name]: [KEY_ENCODING, false], [plain.name]: [KEY_ENCODING, true] },
    'unique and counted rebuilt at once; the large plain one in the background',
  )
  // While the plain one builds, its old entries serve what they key as this encoding does.
  const reads = { ...store.reads }
  t.equal(await contacts.countDocuments({ state: 'pending', identifier: { $gte: long, $lt: 'Q' } }), 2, 'counted while it builds')
  t.same([store.reads.keys - reads.keys, store.reads.documents - reads.documents], [2, 2], 'through the old entries, each document checked')
  t.same(ids(await contacts.find({ state: 'pending', identifier: long })), ['plain'], 'found while it builds')
  t.same(ids(await contacts.find({ state: 'pending', identifier: `${long}\0tail` })), ['tail'], 'and what they key otherwise, found without them')
  await store.settled()
  t.notOk(store.declared('contacts').some(s => s.building), 'built')
  const entries = [...store.servingIndexDb('contacts', plain.name).getKeys({})]
  t.equal(entries.length, docs.length, 'an entry per document')
  t.same(entries.map(e => entryId(e)).sort(), ids(docs).sort(), 'each naming its document')
  t.equal(store.indexDb('contacts', plain.name).getCount(), 0, 'the old entries are gone')
  t.same(ids(await contacts.find({ state: 'pending', identifier: { $gte: long, $lt: 'Q' } }, { sort: { identifier: 1 } })), ['plain', 'tail'], 'in order through the new entries')
  t.equal(await contacts.countDocuments({ batchId: 'b', state: 'pending' }), pending.length, 'counted from the new numbers')
  t.ok(await refused(contacts.insertOne({ _id: 'again', batchId: 'b', identifier: `${long}\0tail` })), 'the unique index holds the whole identifier')
  t.notOk(await refused(contacts.insertOne({ _id: 'other', batchId: 'b', identifier: `${long}\0other` })))
})
