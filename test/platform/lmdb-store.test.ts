// What the LMDB store adds to the store contract (store-contract.test.ts proves it answers like
// the others): its data and index declarations outlive the process, even a kill -9 in the middle
// of writing; queries read an index in order and stop at their limit instead of reading the
// collection; TTL expiry takes bounded slices of its index.
import t from 'tap'
import fc from 'fast-check'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import { WRITE_SLICE } from '../../platform/store/lmdb-collection.js'
import { GROUP_SLICE } from '../../platform/store/sliced-group.js'
import { DuplicateKeyError, StoreUnavailableError, type Doc } from '../../platform/store/types.js'
import { buildService } from '../support/processes.js'
import { tempDir } from '../support/temp-dir.js'

const CONTACT_INDEXES = [
  { name: 'batch_identifier_unique', key: { batchId: 1, identifier: 1 }, unique: true },
  { name: 'batch_state_rank_next', key: { batchId: 1, state: 1, priorityRank: 1, nextAttemptAt: 1 } },
  { name: 'tags', key: { tags: 1 } },
]

t.test('documents, indexes and their declarations survive closing and reopening', async t => {
  const path = tempDir(t)
  const first = new LmdbStore({ path })
  await first.ensureIndexes('contacts', CONTACT_INDEXES)
  const contacts = first.collection('contacts')
  const at = new Date('2026-07-01T10:00:00Z')
  await contacts.insertMany([
    { _id: 'a', batchId: 'b', identifier: 'x', state: 'pending', priorityRank: 1, nextAttemptAt: at, tags: ['p', 'q'] },
    { _id: 'b', batchId: 'b', identifier: 'y', state: 'pending', priorityRank: 0, nextAttemptAt: at, tags: 'p' },
  ])
  await contacts.updateOne({ _id: 'a' }, { $inc: { attempts: 1 } })
  await first.close()

  const second = new LmdbStore({ path })
  t.teardown(() => second.close())
  const again = second.collection('contacts')
  t.same(await again.findOne({ _id: 'a' }), { _id: 'a', batchId: 'b', identifier: 'x', state: 'pending', priorityRank: 1, nextAttemptAt: at, tags: ['p', 'q'], attempts: 1 })
  // No ensureIndexes in this process: the declarations were stored with the data.
  t.ok((await again.insertOne({ _id: 'c', batchId: 'b', identifier: 'x' }).catch(e => e)) instanceof DuplicateKeyError, 'the unique index is enforced')
  const before = { ...second.reads }
  t.same((await again.find({ batchId: 'b', state: 'pending' }, { sort: { priorityRank: 1 }, limit: 1 })).map(d => d._id), ['b'])
  t.equal(second.reads.documents - before.documents, 1, 'read through the index: one document for limit 1')
  t.same((await again.find({ tags: 'p' }, { sort: { _id: 1 } })).map(d => d._id), ['a', 'b'], 'the multikey index still answers')
})

t.test('the due-contact query reads the index in order and stops at its limit', async t => {
  const store = new LmdbStore({ path: tempDir(t) })
  t.teardown(() => store.close())
  await store.ensureIndexes('contacts', CONTACT_INDEXES)
  const contacts = store.collection('contacts')
  const now = Date.parse('2026-07-01T12:00:00Z')
  const docs: Doc[] = []
  for (let i = 0; i < 20_000; i++) {
    docs.push({
      _id: `c${i}`,
      batchId: i % 10 === 0 ? 'small' : 'big',
      identifier: `id${i}`,
      state: i % 7 === 0 ? 'done' : 'pending',
      priorityRank: i % 3,
      // Half of them not due yet: the key check skips them without reading their documents.
      nextAttemptAt: new Date(now + (i % 2 === 0 ? -60_000 : 60_000) - i),
    })
  }
  for (let i = 0; i < docs.length; i += 5000) await contacts.insertMany(docs.slice(i, i + 5000))

  const filter = { batchId: 'big', state: 'pending', nextAttemptAt: { $lte: new Date(now) } }
  const expected = docs
    .filter(d => d.batchId === 'big' && d.state === 'pending' && d.nextAttemptAt.getTime() <= now)
    .sort((a, b) => a.priorityRank - b.priorityRank || a.nextAttemptAt - b.nextAttemptAt || (a._id < b._id ? -1 : 1))
  const before = { ...store.reads }
  const due = await contacts.find(filter, { sort: { priorityRank: 1, nextAttemptAt: 1, _id: 1 }, limit: 50 })
  t.same(due.map(d => d._id), expected.slice(0, 50).map(d => d._id), 'the first 50 due contacts, in selection order')
  t.equal(store.reads.documents - before.documents, 50, 'only the 50 documents returned were read')
  t.ok(store.reads.keys - before.keys < 200, `index entries read: ${store.reads.keys - before.keys} (not the batch's 18,000)`)

  const counted = { ...store.reads }
  t.equal(await contacts.countDocuments(filter), expected.length, 'the count of a range')
  t.equal(await contacts.countDocuments({ batchId: 'big', state: 'pending' }), docs.filter(d => d.batchId === 'big' && d.state === 'pending').length)
  t.equal(store.reads.documents - counted.documents, 0, 'counted on the index, no document read')

  const probe = { ...store.reads }
  t.ok(await contacts.findOne({ batchId: 'small', state: 'pending' }), 'findOne on an equality prefix')
  t.equal(store.reads.documents - probe.documents, 1, 'one document read')
})

t.test('an _id longer than a key can be is never found and never stored (a URL can carry one)', async t => {
  const store = new LmdbStore({ path: tempDir(t) })
  t.teardown(() => store.close())
  const c = store.collection<Doc & { a?: string }>('long_ids')
  await c.insertOne({ _id: 'short' })
  for (const length of [600, 5_000, 100_000]) {
    const id = 'x'.repeat(length)
    t.equal(await c.findOne({ _id: id }), null, `findOne of a ${length}-character _id`)
    t.same(await c.find({ _id: { $in: [id, 'short'] } }), [{ _id: 'short' }], '$in with it')
    t.equal(await c.countDocuments({ _id: id }), 0)
    t.equal(await c.deleteOne({ _id: id }), 0)
    t.equal((await c.updateOne({ _id: id }, { $set: { a: 'b' } })).matchedCount, 0)
    await t.rejects(c.insertOne({ _id: id }), /_id longer than 512 bytes/, 'an insert says why')
    await t.rejects(c.updateOne({ _id: id }, { $set: { a: 'b' } }, { upsert: true }), /_id longer than 512 bytes/, 'an upsert too')
  }
  t.equal(await c.countDocuments({}), 1, 'nothing else was written')
})

t.test('an update that touches no indexed field keeps the index entries; one that touches a parent or child path moves them', async t => {
  const store = new LmdbStore({ path: tempDir(t) })
  t.teardown(() => store.close())
  await store.ensureIndexes('moves', [{ name: 'a_b_state', key: { 'a.b': 1, state: 1 } }])
  const c = store.collection<Doc & Record<string, any>>('moves')
  await c.insertOne({ _id: 'x', a: { b: 1 }, state: 'pending', note: 'n' })
  await c.updateOne({ _id: 'x' }, { $set: { note: 'changed', capCounted: true }, $inc: { n: 1 } })
  t.same((await c.find({ 'a.b': 1, state: 'pending' })).map(d => d.note), ['changed'], 'found by the index, with the new value')
  await c.updateOne({ _id: 'x' }, { $set: { a: { b: 2 } } })
  t.same(await c.find({ 'a.b': 1, state: 'pending' }), [], 'a parent path moved the entry away')
  t.equal((await c.find({ 'a.b': 2, state: 'pending' })).length, 1)
  await c.updateOne({ _id: 'x' }, { $set: { a: { b: { c: 1 } } } })
  await c.updateOne({ _id: 'x' }, { $set: { 'a.b.c': 3 } })
  t.equal((await c.find({ 'a.b': { c: 3 }, state: 'pending' })).length, 1, 'a child path moved it too')
  await c.updateOne({ _id: 'x' }, { $set: { state: 'done' } })
  t.equal(await c.countDocuments({ 'a.b': { c: 3 }, state: 'pending' }), 0)
})

t.test('an update rewrites only the indexes on its paths; the others keep answering, and a unique index is still enforced', async t => {
  const store = new LmdbStore({ path: tempDir(t) })
  t.teardown(() => store.close())
  await store.ensureIndexes('several', [
    { name: 'code_unique', key: { code: 1 }, unique: true },
    { name: 'state_due', key: { state: 1, due: 1 } },
    { name: 'owner', key: { owner: 1 } },
  ])
  const c = store.collection<Doc & Record<string, any>>('several')
  await c.insertMany([
    { _id: 'x', code: 'A', state: 'idle', due: 5, owner: 'o1' },
    { _id: 'y', code: 'B', state: 'idle', due: 7, owner: 'o2' },
  ])
  await c.updateOne({ _id: 'x' }, { $set: { due: 9 } })
  t.same((await c.find({ state: 'idle' }, { sort: { due: 1 } })).map(d => d._id), ['y', 'x'], 'the touched index moved the entry')
  t.same((await c.find({ owner: 'o1' })).map(d => d.due), [9], 'an untouched index finds the document with its new value')
  t.same((await c.find({ code: 'A' })).map(d => d._id), ['x'])
  await t.rejects(c.updateOne({ _id: 'y' }, { $set: { code: 'A', due: 1 } }), DuplicateKeyError, 'a unique index on a written path refuses a taken value')
  t.same((await c.findOne({ _id: 'y' }))?.due, 7, 'and nothing of that update was written')
  await c.updateOne({ _id: 'y' }, { $rename: { owner: 'code2' } })
  t.equal(await c.countDocuments({ owner: 'o2' }), 0, '$rename (which writes the path in its value) moves the entry too')
  await c.updateOne({ _id: 'x' }, { $unset: { owner: '' } })
  t.equal(await c.countDocuments({ owner: 'o1' }), 0, '$unset takes it out')
})

t.test('TTL expiry walks its index a slice at a time', async t => {
  let now = Date.parse('2026-07-01T00:00:00Z')
  const store = new LmdbStore({ path: tempDir(t), clock: { now: () => now }, sweepIntervalMs: 0, ttlSlice: 100, ttlSlicesPerSweep: 2 })
  t.teardown(() => store.close())
  await store.ensureIndexes('ops', [{ name: 'expires_ttl', key: { expiresAt: 1 }, expireAfterSeconds: 0 }])
  const ops = store.collection('ops')
  await ops.insertMany(Array.from({ length: 450 }, (_, i) => ({ _id: `old${i}`, expiresAt: new Date(now - 1000 - i) })))
  await ops.insertMany(Array.from({ length: 50 }, (_, i) => ({ _id: `new${i}`, expiresAt: new Date(now + 60_000 + i) })))
  await ops.insertOne({ _id: 'not-a-date', expiresAt: now - 5000 })
  t.equal(await store.sweep(), 200, 'one sweep: two slices of 100')
  t.equal(await store.sweep(), 200)
  t.equal(await store.sweep(), 50, 'the rest')
  t.equal(await store.sweep(), 0, 'nothing left to expire')
  t.equal(await ops.countDocuments({}), 51, 'future and non-Date expiries stay')
  now += 120_000
  t.equal(await store.sweep(), 50, 'they expire in their turn')
})

t.test('a bulk write, updateMany and deleteMany past one slice commit in slices: other writes go between them, results add up', async t => {
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  await store.ensureIndexes('contacts', CONTACT_INDEXES)
  const contacts = store.collection('contacts')
  const other = store.collection('other')
  const N = WRITE_SLICE * 8
  const at = new Date('2026-07-01T10:00:00Z')
  const docs = Array.from({ length: N }, (_, i) => ({ _id: `c${i}`, batchId: 'b', identifier: `i${i}`, state: 'pending', priorityRank: i % 3, nextAttemptAt: at }))

  // A write sent while the bulk is being written commits before the bulk ends, not after it.
  const bulk = contacts.insertMany(docs)
  await new Promise(resolve => setImmediate(resolve))
  await other.insertOne({ _id: 'meanwhile' })
  const committedThen = await contacts.countDocuments({})
  t.ok(committedThen < N, `the single write was committed before the whole bulk (${committedThen} of ${N} then)`)
  await bulk
  t.equal(await contacts.countDocuments({ batchId: 'b', state: 'pending' }), N, 'every document and index entry written')

  // Ordered: stops at the duplicate (past the first slice); what came before it stays.
  const dup = WRITE_SLICE + 10
  const more = Array.from({ length: WRITE_SLICE * 2 }, (_, i) => ({ _id: `d${i}`, batchId: 'b', identifier: i === dup ? 'i0' : `j${i}`, state: 'pending', priorityRank: 0, nextAttemptAt: at }))
  const ordered = await contacts.insertMany(more)
  t.same({ inserted: ordered.insertedCount, duplicates: ordered.duplicateKeyIndexes }, { inserted: dup, duplicates: [dup] }, 'ordered: stopped at the duplicate')
  await contacts.deleteMany({ _id: { $in: more.map(d => d._id) } })
  const unordered = await contacts.insertMany(more, { ordered: false })
  t.same({ inserted: unordered.insertedCount, duplicates: unordered.duplicateKeyIndexes }, { inserted: more.length - 1, duplicates: [dup] }, 'unordered: all but the duplicate')

  const updated = await contacts.updateMany({ batchId: 'b', priorityRank: 0 }, { $set: { state: 'done' } })
  const rankZero = docs.filter(d => d.priorityRank === 0).length + more.length - 1
  t.same({ matched: updated.matchedCount, modified: updated.modifiedCount }, { matched: rankZero, modified: rankZero })
  t.equal(await contacts.countDocuments({ batchId: 'b', state: 'done' }), rankZero, 'the state index moved with every update')
  t.equal(await contacts.countDocuments({ batchId: 'b', state: 'pending' }), N + more.length - 1 - rankZero)

  t.equal(await contacts.deleteMany({ batchId: 'b', state: 'done' }), rankZero)
  t.equal(await contacts.countDocuments({ batchId: 'b', state: 'done' }), 0)
  t.equal(await contacts.countDocuments({}), N + more.length - 1 - rankZero, 'only the matching documents deleted')
})

t.test('a collection kept as JSON: documents written as MessagePack are copied over in the background; reads and writes meanwhile lose nothing', async t => {
  const path = tempDir(t)
  const INDEXES = [{ name: 'crew_slot', key: { crew: 1, slot: 1 } }]
  const wide = (i: number) => ({ _id: `b${String(i).padStart(5, '0')}`, crew: `crew-${i % 3}`, slot: i, e: { [`h_${i % 17}`]: i, n: 1 } })
  const N = WRITE_SLICE * 4 + 7
  const before = new LmdbStore({ path, sweepIntervalMs: 0 })
  await before.ensureIndexes('blocks', INDEXES)
  await before.collection('blocks').insertMany(Array.from({ length: N }, (_, i) => wide(i)))
  await before.close()

  // A restart in the middle of the copy: the next start copies again from the top.
  const cut = new LmdbStore({ path, sweepIntervalMs: 0 })
  cut.collection('blocks', { json: true })
  await new Promise(resolve => setImmediate(resolve))
  // And a document the unfinished copy holds that c: no longer does (say, removed by an older
  // version in between): the next copy must not bring it back.
  cut.env.openDB({ name: 'j:blocks', encoding: 'json' }).putSync('b99999', wide(99999))
  await cut.close()

  const logged: unknown[] = []
  const logger = { info: (...args: unknown[]) => logged.push(args), debug() {}, warn() {}, error: (...args: unknown[]) => logged.push(args), child: () => logger } as any
  const after = new LmdbStore({ path, sweepIntervalMs: 0, logger })
  t.teardown(() => after.close())
  const blocks = after.collection('blocks', { json: true })
  await after.ensureIndexes('blocks', INDEXES)
  // While the copy runs: every document readable, and writes (new, changed, removed) kept.
  t.equal(await blocks.countDocuments({}), N, 'every document readable while the copy runs')
  await blocks.insertOne(wide(N))
  await blocks.updateOne({ _id: 'b00003' }, { $inc: { 'e.n': 5 } })
  await blocks.deleteOne({ _id: 'b01000' })
  await after.moved()
  t.same(logged, [['store: documents moved to JSON', { collection: 'blocks', documents: N }]], 'the move is told once, with its count')
  const expected = Array.from({ length: N + 1 }, (_, i) => wide(i)).filter(d => d._id !== 'b01000')
  expected[3]!.e.n = 6
  t.equal((await blocks.find({ crew: 'crew-2', slot: { $gte: 0 } })).length, expected.filter(d => d.crew === 'crew-2').length, 'the first read after the move finds them (by index)')
  t.same(await blocks.find({}, { sort: { _id: 1 } }), expected, 'moved: every document as last written, nested values round-trip')
  t.same((await blocks.find({ crew: 'crew-1', slot: { $gte: 900 } }, { sort: { slot: 1 } })).map(d => d.slot), expected.filter(d => d.crew === 'crew-1' && d.slot >= 900).map(d => d.slot), 'the index still finds them')
  await blocks.updateOne({ _id: 'b00100' }, { $inc: { 'e.h_15': 1, 'e.n': 2 } })
  t.same((await blocks.findOne({ _id: 'b00100' }))?.e, { h_15: 101, n: 3 }, 'updates after the move')
  t.throws(() => after.collection('blocks'), /both as JSON and as MessagePack/, 'one collection is never opened both ways')
  t.equal(after.env.openDB<unknown, string>({ name: 'c:blocks', create: false } as { name: string }).getCount(), 0, 'the MessagePack copy is removed')
  await after.close()

  const again = new LmdbStore({ path, sweepIntervalMs: 0, logger })
  t.teardown(() => again.close())
  t.equal(await again.collection('blocks', { json: true }).countDocuments({}), N, 'reopened: all there')
  await again.moved()
  t.equal(logged.length, 1, 'nothing left to move the second time')
})

t.test('a kill -9 while writing loses nothing that was acknowledged and leaves indexes whole', async t => {
  const path = tempDir(t)
  const storeModule = join(buildService(), 'platform', 'store', 'lmdb-store.js')
  // A writer that prints the number of each batch once its write resolved (= committed).
  const script = `
    const { LmdbStore } = await import(${JSON.stringify(storeModule)})
    const store = new LmdbStore({ path: ${JSON.stringify(path)} })
    await store.ensureIndexes('contacts', ${JSON.stringify(CONTACT_INDEXES)})
    const contacts = store.collection('contacts')
    for (let batch = 0; ; batch++) {
      const ops = []
      for (let i = 0; i < 200; i++) {
        const n = batch * 200 + i
        ops.push({ updateOne: { filter: { batchId: 'b', identifier: 'id' + n }, update: { $setOnInsert: { _id: 'c' + n, state: 'pending', priorityRank: n % 5, nextAttemptAt: new Date(n), tags: ['t' + (n % 3), 'all'] } }, upsert: true } })
      }
      // A second writer in flight at the same time: a counter document.
      await Promise.all([contacts.bulkWrite(ops, { ordered: false }), contacts.updateOne({ _id: 'counter' }, { $inc: { n: 1 } }, { upsert: true })])
      process.stdout.write('acked ' + batch + '\\n')
    }
  `
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
  const exited = new Promise(resolve => child.once('exit', resolve))
  const deadline = Date.now() + 30_000
  while (!/acked (\d*[2-9]\d)\n/.test(output) && Date.now() < deadline && child.exitCode === null) await new Promise(r => setTimeout(r, 20))
  child.kill('SIGKILL')
  await exited
  const acked = Math.max(...[...output.matchAll(/acked (\d+)\n/g)].map(m => Number(m[1])))
  t.ok(acked >= 20, `the writer acknowledged ${acked + 1} batches before the kill (output: ${output.slice(-200)})`)

  const store = new LmdbStore({ path })
  t.teardown(() => store.close())
  const contacts = store.collection('contacts')
  const total = await contacts.countDocuments({})
  const counter = (await contacts.findOne({ _id: 'counter' }))!.n as number
  t.ok(counter >= acked + 1, `every acknowledged increment is there (${counter} >= ${acked + 1})`)
  t.ok(total - 1 >= (acked + 1) * 200, `every acknowledged contact is there (${total - 1} >= ${(acked + 1) * 200})`)
  t.equal((total - 1) % 200, 0, 'batches are whole: a transaction is all or nothing')
  // Each index holds exactly the documents: counted on the index against a read of every document.
  const docs = (await contacts.find({ batchId: 'b' })).length
  t.equal(docs, total - 1)
  t.equal(await contacts.countDocuments({ batchId: 'b', state: 'pending' }), docs, 'batch_state_rank_next has every contact')
  t.equal((await contacts.find({ tags: 'all' })).length, docs, 'the multikey index has every contact')
  t.ok((await contacts.insertOne({ _id: 'dup', batchId: 'b', identifier: 'id0' }).catch(e => e)) instanceof DuplicateKeyError, 'the unique index is whole')
})

t.test('write holds: the callbacks of one transaction are timed as one stretch of the loop, and each write`s wait', async t => {
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  const spin = (ms: number) => {
    const until = performance.now() + ms
    while (performance.now() < until);
  }
  // lmdb-js runs the callbacks queued for one transaction back to back: three of 3 ms are one 9 ms hold.
  for (let i = 0; i < 3; i++) store.holds.run(() => spin(3))
  await Promise.resolve()
  t.equal(store.holds.summary().count, 1, 'one stretch')
  t.ok(store.holds.summary().max >= 9, `it lasted the three callbacks: ${store.holds.summary().max} ms`)
  store.holds.run(() => spin(1))
  await Promise.resolve()
  t.equal(store.holds.summary().count, 2, 'a callback after the loop moved on is a stretch of its own')
  t.throws(() => store.holds.run(() => { throw new Error('inside') }), /inside/, 'a callback that throws is timed and its error passes through')
  await Promise.resolve()
  t.equal(store.holds.summary().count, 3)

  // The store's writes go through it: each awaited write is one transaction, one stretch, one wait.
  store.holds.reset()
  const docs = store.collection('holds')
  await docs.insertOne({ _id: 'a', n: 1 })
  await docs.updateOne({ _id: 'a' }, { $inc: { n: 1 } })
  const { count, max, waits } = store.holds.summary()
  t.equal(count, 2, 'an insert and an update: two transactions, two stretches')
  t.ok(max > 0 && max < 1000)
  t.equal(waits.count, 2, 'and how long each waited for its transaction')
})

t.test('a $match + $group over many documents is added up in slices: the loop serves other work meanwhile, writes included', async t => {
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  await store.ensureIndexes('contacts', CONTACT_INDEXES)
  const contacts = store.collection('contacts')
  const outcomes = ['answered', 'busy', 'no_answer']
  const N = GROUP_SLICE * 6
  const at = new Date('2026-07-01T10:00:00Z')
  await contacts.insertMany(
    Array.from({ length: N }, (_, i) => ({ _id: `c${String(i).padStart(5, '0')}`, batchId: 'b', identifier: `i${i}`, state: 'done', priorityRank: 0, nextAttemptAt: at, lastOutcome: i % 7 === 0 ? undefined : outcomes[i % 3], doneReason: 'attempts_exhausted', attempts: 1 + (i % 2) })),
  )
  let settled = false
  const grouped = contacts
    .aggregate<{ _id: { outcome?: string; reason?: string }; n: number; attempts: number }>([
      { $match: { batchId: 'b', state: 'done' } },
      { $group: { _id: { outcome: '$lastOutcome', reason: '$doneReason' }, n: { $sum: 1 }, attempts: { $sum: '$attempts' } } },
    ])
    .finally(() => (settled = true))
  // Other work gets the loop before the group is done, and a write commits meanwhile.
  const during = await new Promise<boolean>(resolve => setImmediate(() => resolve(!settled)))
  await contacts.insertOne({ _id: 'other', batchId: 'x', identifier: 'o', state: 'pending', priorityRank: 0, nextAttemptAt: at })
  t.ok(during, 'the loop ran other work while the group was being added up')
  const rows = await grouped
  // Expected, computed here: as mongod, a missing field is left out of the key.
  const expected = new Map<string, { n: number; attempts: number }>()
  for (let i = 0; i < N; i++) {
    const key = i % 7 === 0 ? '-' : outcomes[i % 3]!
    const row = expected.get(key) ?? { n: 0, attempts: 0 }
    row.n++
    row.attempts += 1 + (i % 2)
    expected.set(key, row)
  }
  t.equal(rows.length, expected.size)
  for (const row of rows) {
    t.equal(row._id.reason, 'attempts_exhausted')
    t.same({ n: row.n, attempts: row.attempts }, expected.get(row._id.outcome ?? '-'), `group ${row._id.outcome ?? '(no outcome)'}`)
    if (row._id.outcome === undefined) t.notOk('outcome' in row._id, 'a missing field is not in the key')
  }
  t.ok(await contacts.findOne({ _id: 'other' }), 'the write made during the group is there')
})

t.test('a $group added up in slices reads a path through arrays as mongod does', async t => {
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  const things = store.collection('things')
  await things.insertMany([
    { _id: 'a', k: 'x', tags: ['p', 'q'], lines: [{ sku: 's1', qty: 2 }, { sku: 's2' }, 'loose', { other: 1 }], n: 3 },
    { _id: 'b', k: 'x', tags: ['p', 'q'], lines: [{ sku: 's1', qty: 5 }, { sku: 's2' }], n: [4, 5] },
    { _id: 'c', k: 'x', tags: [], lines: [], nested: { list: [{ v: 1 }, { v: [2, 3] }] } },
    { _id: 'd', k: 'x', tags: 'p', lines: { sku: 's9' }, nested: { list: [[{ v: 7 }], { v: 8 }] } },
    { _id: 'e', k: 'y', lines: null },
  ])
  // $group returns its rows in no particular order.
  const inKeyOrder = (rows: { _id: unknown }[]) => [...rows].sort((a, b) => JSON.stringify(a._id).localeCompare(JSON.stringify(b._id)))
  const group = (match: Record<string, unknown>, g: Record<string, unknown>) => things.aggregate<{ _id: unknown }>([{ $match: match }, { $group: g }]).then(inKeyOrder)
  t.same(
    await group({ k: 'x' }, { _id: '$lines.sku', n: { $sum: 1 }, total: { $sum: '$n' } }),
    inKeyOrder([{ _id: [], n: 1, total: 0 }, { _id: ['s1', 's2'], n: 2, total: 3 }, { _id: 's9', n: 1, total: 0 }]),
    'through an array of documents: their values (a string element and one without the field left out); an array is not summed',
  )
  t.same(
    await group({ k: 'x' }, { _id: { tags: '$tags', qty: '$lines.qty' }, n: { $sum: 1 } }),
    inKeyOrder([{ _id: { tags: 'p' }, n: 1 }, { _id: { tags: ['p', 'q'], qty: [2] }, n: 1 }, { _id: { tags: ['p', 'q'], qty: [5] }, n: 1 }, { _id: { tags: [], qty: [] }, n: 1 }]),
    'a key field that reads nothing is left out of the key document',
  )
  t.same(
    await group({ k: { $in: ['x', 'y'] } }, { _id: '$nested.list.v', n: { $sum: 1 } }),
    inKeyOrder([{ _id: null, n: 3 }, { _id: [1, [2, 3]], n: 1 }, { _id: [8], n: 1 }]),
    'a nested array is not descended into; a value that is an array is kept whole',
  )
})

t.test('a counted index answers counts without reading documents or entries, and its numbers outlive the process', async t => {
  const path = tempDir(t)
  const first = new LmdbStore({ path, sweepIntervalMs: 0 })
  const contacts = first.collection('contacts')
  const states = ['pending', 'in_progress', 'done']
  await contacts.insertMany(Array.from({ length: 2000 }, (_, i) => ({ _id: `c${i}`, batchId: `b${i % 2}`, state: states[i % 3], outcome: i % 3 === 2 ? (i % 4 === 0 ? 'answered' : 'busy') : null })))
  await first.ensureIndexes('contacts', [{ name: 'batch_state_outcome', key: { batchId: 1, state: 1, outcome: 1 }, counted: true }])
  await contacts.updateMany({ batchId: 'b0', state: 'pending' }, { $set: { state: 'done', outcome: 'answered' } })
  const expected = async (c: typeof contacts) => {
    const docs = await c.find({ batchId: 'b0' })
    return { total: docs.length, done: docs.filter(d => d.state === 'done').length, answered: docs.filter(d => d.state === 'done' && d.outcome === 'answered').length }
  }
  const want = await expected(contacts)
  const read = { ...first.reads }
  const rows = await contacts.countBy({ batchId: 'b0', state: 'done' }, ['outcome'])
  t.equal(rows.find(r => r.values[0] === 'answered')?.n, want.answered)
  t.equal(await contacts.countDocuments({ batchId: 'b0', state: 'done' }), want.done)
  t.equal(await contacts.countDocuments({ batchId: 'b0' }), want.total)
  t.same(first.reads, read, 'no document and no index entry was read')
  await first.close()

  const second = new LmdbStore({ path, sweepIntervalMs: 0 })
  t.teardown(() => second.close())
  const again = second.collection('contacts')
  t.equal(await again.countDocuments({ batchId: 'b0', state: 'done' }), want.done, 'the numbers after reopening')
  t.same(second.reads, { keys: 0, documents: 0 })
  // An array in a counted field: the numbers count entries, not documents, so they are no longer used.
  await again.insertOne({ _id: 'multi', batchId: 'b0', state: 'done', outcome: ['answered', 'busy'] })
  t.equal(await again.countDocuments({ batchId: 'b0', state: 'done' }), want.done + 1, 'multikey: counted from the documents')
  t.ok(second.reads.documents > 0)
})

/** A store whose contacts keep a counted (batchId, state) index and a unique (batchId, identifier) one. */
async function contactsCountedByState(test: { teardown(fn: () => unknown): void }) {
  const store = new LmdbStore({ path: tempDir(test), sweepIntervalMs: 0 })
  test.teardown(() => store.close())
  await store.ensureIndexes('contacts', [
    { name: 'batch_state', key: { batchId: 1, state: 1 }, counted: true },
    { name: 'batch_identifier_unique', key: { batchId: 1, identifier: 1 }, unique: true },
  ])
  return { store, contacts: store.collection('contacts') }
}

t.test('the moves of one write transaction add up on a counted index: its numbers match the documents, and a key no document has is gone', async t => {
  const { store, contacts } = await contactsCountedByState(t)
  const numbers = async () => {
    const out: Record<string, number> = {}
    for (const d of await contacts.find({})) out[`${d.batchId}/${d.state}`] = (out[`${d.batchId}/${d.state}`] ?? 0) + 1
    return out
  }
  const counted = async () => {
    const out: Record<string, number> = {}
    for (const batchId of ['b0', 'b1']) for (const row of await contacts.countBy({ batchId }, ['state'])) out[`${batchId}/${row.values[0]}`] = row.n
    return out
  }
  // One transaction: 200 inserts into the same two keys, one duplicate in the middle (unordered:
  // the others are kept), then claims and settlements that move a key back and forth.
  const docs = Array.from({ length: 200 }, (_, i) => ({ _id: `c${i}`, batchId: `b${i % 2}`, identifier: `i${i}`, state: 'pending' }))
  const duplicate = { _id: 'dup', batchId: 'b0', identifier: 'i0', state: 'pending' }
  const inserted = await contacts.bulkWrite([...docs.slice(0, 100), duplicate, ...docs.slice(100)].map(document => ({ insertOne: { document } })), { ordered: false })
  t.same([inserted.insertedCount, inserted.duplicateKeyIndexes], [200, [100]])
  t.same(await counted(), await numbers(), 'after an unordered bulk insert cut by a duplicate')
  t.same(await counted(), { 'b0/pending': 100, 'b1/pending': 100 })
  await contacts.bulkWrite([
    ...Array.from({ length: 30 }, (_, i) => ({ updateOne: { filter: { _id: `c${i}` }, update: { $set: { state: 'in_progress' } } } })),
    ...Array.from({ length: 30 }, (_, i) => ({ updateOne: { filter: { _id: `c${i}` }, update: { $set: { state: i % 3 === 0 ? 'done' : 'pending' } } } })),
  ])
  t.same(await counted(), await numbers(), 'after claims and settlements in one transaction')
  t.notOk('b0/in_progress' in (await counted()), 'a key moved to zero and back is not kept')
  await contacts.updateMany({ batchId: 'b1' }, { $set: { state: 'done' } })
  await contacts.deleteMany({ batchId: 'b0', state: 'pending' })
  t.same(await counted(), await numbers(), 'after updateMany and deleteMany')
  t.same(await counted(), { 'b0/done': 5, 'b1/done': 100 })
  t.equal(store.countDb('contacts', 'batch_state').getCount(), 2, 'only keys some document has')
})

t.test('separate writes queued together share one transaction: their moves add up, a refused one fails alone, a counted index redefined among them counts exactly', async t => {
  const { store, contacts } = await contactsCountedByState(t)
  await contacts.insertMany(Array.from({ length: 100 }, (_, i) => ({ _id: `c${i}`, batchId: 'b0', identifier: `i${i}`, state: 'pending', kind: i % 2 ? 'x' : 'y' })))
  const counts = async (fields: string[]) => {
    const out: Record<string, number> = {}
    for (const row of await contacts.countBy({ batchId: 'b0' }, fields)) out[row.values.join('/')] = row.n
    return out
  }
  const numbers = async (fields: string[]) => {
    const out: Record<string, number> = {}
    for (const d of await contacts.find({})) out[fields.map(f => d[f]).join('/')] = (out[fields.map(f => d[f]).join('/')] ?? 0) + 1
    return out
  }
  // All queued in one tick, none awaited before the next: claims, a duplicate insert, settlements.
  const claims = Array.from({ length: 40 }, (_, i) => contacts.updateOne({ _id: `c${i}` }, { $set: { state: 'in_progress' } }))
  const duplicate = contacts.insertOne({ _id: 'dup', batchId: 'b0', identifier: 'i3', state: 'pending', kind: 'x' })
  const settlements = Array.from({ length: 40 }, (_, i) => contacts.updateOne({ _id: `c${i}` }, { $set: { state: i % 4 ? 'pending' : 'done' } }))
  const settled = await Promise.allSettled([...claims, duplicate, ...settlements])
  t.same(
    settled.map((s, i) => [i, s.status]).filter(([, status]) => status === 'rejected'),
    [[40, 'rejected']],
    'only the duplicate is refused',
  )
  t.type((settled[40] as PromiseRejectedResult).reason, DuplicateKeyError)
  t.same(await counts(['state']), await numbers(['state']))
  t.same(await counts(['state']), { done: 10, pending: 90 })

  // Moves queued before a redefinition of the counted index, in the same transaction, and after it.
  const before = Array.from({ length: 20 }, (_, i) => contacts.updateOne({ _id: `c${50 + i}` }, { $set: { state: 'in_progress' } }))
  const redefined = store.ensureIndexes('contacts', [{ name: 'batch_state', key: { batchId: 1, state: 1, kind: 1 }, counted: true }])
  const after = Array.from({ length: 10 }, (_, i) => contacts.updateOne({ _id: `c${80 + i}` }, { $set: { state: 'done' } }))
  await Promise.all([...before, redefined, ...after])
  t.same(await counts(['state', 'kind']), await numbers(['state', 'kind']))
  // The stored numbers themselves, not only what a query answers from them.
  const stored: Record<string, number> = {}
  for (const { key, value } of store.countDb('contacts', 'batch_state').getRange({})) stored[key.filter((_, i) => i % 2 === 1).slice(1).join('/')] = value
  t.same(stored, await numbers(['state', 'kind']), 'the rebuilt numbers count each move once, under the new definition only')
})

t.test('counted moves whose write fails are told to their writes and written by the next transaction: the numbers end up matching the documents', async t => {
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  await store.ensureIndexes('contacts', [{ name: 'batch_state', key: { batchId: 1, state: 1 }, counted: true }])
  const contacts = store.collection('contacts')
  await contacts.insertMany(Array.from({ length: 10 }, (_, i) => ({ _id: `c${i}`, batchId: 'b0', state: 'pending' })))
  const counts = store.countDb('contacts', 'batch_state')
  const put = counts.putSync.bind(counts)
  // The second put fails: the first number is written, the second is not.
  let puts = 0
  counts.putSync = ((...args: Parameters<typeof put>) => {
    if (++puts === 2) throw new Error('MDB_MAP_FULL (test)')
    return put(...args)
  }) as typeof counts.putSync
  const settled = await Promise.allSettled(['c0', 'c1'].map(_id => contacts.updateOne({ _id }, { $set: { state: 'done' } })))
  t.same(settled.map(s => s.status), ['rejected', 'rejected'], 'the writes of that transaction are told')
  await contacts.updateOne({ _id: 'c2' }, { $set: { state: 'done' } })
  const stored: Record<string, number> = {}
  for (const { key, value } of counts.getRange({})) stored[key[3] as string] = value
  const numbers: Record<string, number> = {}
  for (const d of await contacts.find({})) numbers[d.state] = (numbers[d.state] ?? 0) + 1
  t.same(stored, numbers)
  t.same(stored, { done: 3, pending: 7 })
})

t.test('an index declared counted after it had entries: counts from the start, its old entries emptied in the background', async t => {
  const path = tempDir(t)
  const first = new LmdbStore({ path, sweepIntervalMs: 0 })
  await first.ensureIndexes('contacts', [{ name: 'account_state', key: { accountId: 1, state: 1 } }])
  const contacts = first.collection('contacts')
  await contacts.insertMany(Array.from({ length: WRITE_SLICE * 3 }, (_, i) => ({ _id: `c${i}`, accountId: `a${i % 2}`, state: i % 3 === 0 ? 'in_progress' : 'pending' })))
  t.equal(first.indexDb('contacts', 'account_state').getCount(), WRITE_SLICE * 3)
  await first.close()

  const second = new LmdbStore({ path, sweepIntervalMs: 0 })
  t.teardown(() => second.close())
  await second.ensureIndexes('contacts', [{ name: 'account_state', key: { accountId: 1, state: 1 }, counted: true }])
  const again = second.collection('contacts')
  const inFlight = (await again.find({ accountId: 'a0', state: 'in_progress' })).length
  const reads = { ...second.reads }
  t.equal(await again.countDocuments({ accountId: 'a0', state: 'in_progress' }), inFlight)
  t.equal(await again.countDocuments({ accountId: 'a0', state: { $in: ['pending', 'in_progress'] } }), WRITE_SLICE * 3 / 2)
  t.same(second.reads, reads, 'answered from the numbers')
  await again.updateOne({ _id: 'c0' }, { $set: { state: 'done' } })
  t.equal(await again.countDocuments({ accountId: 'a0', state: 'in_progress' }), inFlight - 1, 'a write moves the numbers')
  const until = Date.now() + 10_000
  while (second.indexDb('contacts', 'account_state').getCount() > 0 && Date.now() < until) await new Promise(r => setTimeout(r, 20))
  t.equal(second.indexDb('contacts', 'account_state').getCount(), 0, 'the entries of before are gone')
})

t.test('index entries that do not read back as they were written are removed all the same', async t => {
  // Strings of 64 characters or more went into keys byte for byte (as older versions wrote
  // them): a U+0001 inside reads back as the end of the string, so the key read back is not the
  // key stored, and removing by it removed nothing.
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  const entries = store.indexDb('things', 'k')
  const leftovers = () => store.env.transaction(() => {
    for (let i = 0; i < 3; i++) entries.putSync([3, `${'P'.repeat(70)}\u0001${i}`, `old${i}`], Buffer.alloc(0))
  })
  await leftovers()
  const things = store.collection('things')
  await things.insertMany([{ _id: 'a', k: 'x' }, { _id: 'b', k: 'y' }])
  await store.ensureIndexes('things', [{ name: 'k', key: { k: 1 } }])
  t.same([...entries.getKeys({})], [[3, 'x', 'a'], [3, 'y', 'b']], 'a build starts from an empty database')
  await leftovers()
  await store.ensureIndexes('things', [{ name: 'k', key: { k: 1 }, counted: true }])
  await store.settled()
  t.equal(entries.getCount(), 0, 'emptied in the background once the index is counted')
})

t.test('a unique index declared over long strings that share their first characters is built, and refused only for a value held twice', async t => {
  // Keys cut strings: two documents with the same key may hold different strings.
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  const refused = (p: Promise<unknown>) => p.then(() => false, e => e instanceof DuplicateKeyError)
  const long = 'k'.repeat(300)
  const distinct = store.collection('distinct')
  await distinct.insertMany([{ _id: 'a', k: `${long}a` }, { _id: 'b', k: `${long}b` }, { _id: 'c', k: `${long}c` }])
  await store.ensureIndexes('distinct', [{ name: 'k_unique', key: { k: 1 }, unique: true }])
  t.ok(await refused(distinct.insertOne({ _id: 'd', k: `${long}b` })), 'built, and it holds')
  const twice = store.collection('twice')
  await twice.insertMany([{ _id: 'a', k: `${long}a` }, { _id: 'b', k: `${long}b` }, { _id: 'c', k: `${long}b` }])
  t.ok(await refused(store.ensureIndexes('twice', [{ name: 'k_unique', key: { k: 1 }, unique: true }])), 'a value held twice refuses it')
})

t.test('a counted index never answers for values its keys cannot tell apart', async t => {
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  await store.ensureIndexes('things', [{ name: 'k_n', key: { k: 1, n: 1 }, counted: true }])
  const things = store.collection('things')
  const long = 'x'.repeat(150)
  await things.insertMany([
    { _id: 'nan', k: 'a', n: NaN },
    { _id: 'minus-infinity', k: 'a', n: -Infinity },
    { _id: 'long', k: long, n: 1 },
    { _id: 'long-too', k: `${long}y`, n: 1 },
  ])
  t.equal(await things.countDocuments({ k: 'a', n: -Infinity }), 1, '-Infinity (NaN has the same key) counted from the documents')
  t.equal(await things.countDocuments({ k: long }), 1, 'two strings that share their first 100 characters are told apart')
  t.same((await things.countBy({ k: 'a' }, ['n'])).length, 2, 'grouped apart')
})

t.test('a partial index keeps entries only for the documents it covers, and only queries that pin its values read it', async t => {
  const path = tempDir(t)
  const first = new LmdbStore({ path, sweepIntervalMs: 0 })
  const plain = { name: 'batch_state_rank', key: { batchId: 1, state: 1, rank: 1, _id: 1 } as Record<string, 1> }
  await first.ensureIndexes('contacts', [plain])
  const contacts = first.collection('contacts')
  const states = ['pending', 'in_progress', 'done', 'done']
  await contacts.insertMany(Array.from({ length: 400 }, (_, i) => ({ _id: `c${String(i).padStart(3, '0')}`, batchId: 'b', state: states[i % 4], rank: i % 7 })))
  t.equal(first.indexDb('contacts', plain.name).getCount(), 400, 'plain: an entry per contact')
  await first.close()

  // Declared partial by a later version: rebuilt over the documents present, in the background.
  const second = new LmdbStore({ path, sweepIntervalMs: 0 })
  t.teardown(() => second.close())
  await second.ensureIndexes('contacts', [{ ...plain, partialFilterExpression: { state: 'pending' } }])
  await second.settled()
  const again = second.collection('contacts')
  const entries = () => second.servingIndexDb('contacts', plain.name).getCount()
  t.equal(entries(), 100, 'partial: an entry per pending contact only')
  t.equal(second.indexDb('contacts', plain.name).getCount(), 0, 'the entries of the plain definition are gone')

  let reads = { ...second.reads }
  const first10 = await again.find({ batchId: 'b', state: 'pending' }, { sort: { rank: 1, _id: 1 }, limit: 10 })
  t.equal(first10.length, 10)
  t.equal(second.reads.keys - reads.keys, 10, 'the pinned query reads the index in order and stops at its limit')
  t.equal(second.reads.documents - reads.documents, 10)

  reads = { ...second.reads }
  const done = await again.find({ batchId: 'b', state: 'done' })
  t.equal(done.length, 200, 'a state the index does not cover is still found')
  t.equal(second.reads.keys - reads.keys, 0, 'without reading the partial index (it holds none of them)')

  // Writes move documents in and out.
  await again.updateOne({ _id: 'c000' }, { $set: { state: 'in_progress' } })
  await again.updateOne({ _id: 'c001' }, { $set: { state: 'pending' } })
  await again.updateOne({ _id: 'c004' }, { $set: { note: 'x' } })
  await again.updateMany({ batchId: 'b', state: 'done', rank: 0 }, { $set: { state: 'pending' } })
  const pending = (await again.find({ batchId: 'b' })).filter(d => d.state === 'pending').length
  t.equal(entries(), pending, 'the entries follow the pending contacts')
  await again.deleteMany({ batchId: 'b' })
  t.equal(entries(), 0, 'and leave with them')
})

t.test('an index redefined over a large collection is built in the background: the old definition serves meanwhile, writes keep both, a restart resumes', async t => {
  const path = tempDir(t)
  const n = WRITE_SLICE * 8
  const plain = { name: 'batch_state_rank', key: { batchId: 1, state: 1, rank: 1, _id: 1 } as Record<string, 1> }
  const partial = { ...plain, partialFilterExpression: { state: 'pending' } }
  const states = ['pending', 'done', 'done']
  const seed = new LmdbStore({ path, sweepIntervalMs: 0 })
  await seed.ensureIndexes('contacts', [plain])
  await seed.collection('contacts').insertMany(Array.from({ length: n }, (_, i) => ({ _id: `c${String(i).padStart(5, '0')}`, batchId: 'b', state: states[i % 3], rank: i % 11 })))
  await seed.close()

  // Redefined, then closed after the first slices of the build: the next start resumes it.
  const cut = new LmdbStore({ path, sweepIntervalMs: 0 })
  await cut.ensureIndexes('contacts', [partial])
  await cut.close()
  const store = new LmdbStore({ path, sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  await store.ensureIndexes('contacts', [partial])
  // Condition, not a stopwatch: the build still runs once the declaration has answered.
  t.ok(store.declared('contacts').find(s => s.name === plain.name)?.building, 'the declaration does not wait for the build')
  const contacts = store.collection('contacts')
  const pending = async () => (await contacts.find({ batchId: 'b' })).filter(d => d.state === 'pending').map(d => d._id)
  // While it builds: writes move contacts in and out, queries answer from the old definition.
  const writes = (async () => {
    for (let i = 0; i < 60; i++) {
      await contacts.updateOne({ _id: `c${String(i * 37).padStart(5, '0')}` }, { $set: { state: i % 2 ? 'pending' : 'done' } })
      await contacts.insertOne({ _id: `z${i}`, batchId: 'b', state: i % 2 ? 'pending' : 'in_progress', rank: 0 })
      if (i % 10 === 0) await contacts.deleteOne({ _id: `c${String(i * 53).padStart(5, '0')}` })
    }
  })()
  const during = await contacts.find({ batchId: 'b', state: 'pending' }, { sort: { rank: 1, _id: 1 }, limit: 20 })
  t.equal(during.length, 20, 'the selection is answered during the build')
  await writes
  await store.settled()
  const want = await pending()
  t.equal(store.servingIndexDb('contacts', plain.name).getCount(), want.length, 'built: exactly the pending contacts, writes during the build included')
  const got = await contacts.find({ batchId: 'b', state: 'pending' }, { sort: { rank: 1, _id: 1 } })
  t.same(got.map(d => d._id).sort(), [...want].sort(), 'the new definition answers the same contacts')
  t.equal(store.indexDb('contacts', plain.name).getCount(), 0, 'the old definition\'s entries are emptied')
})

t.test('another store on the same database (the apply thread, a second process) sees a redefinition and keeps the new index up', async t => {
  const path = tempDir(t)
  const plain = { name: 'batch_state_rank', key: { batchId: 1, state: 1, rank: 1, _id: 1 } as Record<string, 1> }
  const seed = new LmdbStore({ path, sweepIntervalMs: 0 })
  await seed.ensureIndexes('contacts', [plain])
  await seed.collection('contacts').insertMany(Array.from({ length: WRITE_SLICE * 4 }, (_, i) => ({ _id: `c${String(i).padStart(5, '0')}`, batchId: 'b', state: i % 2 ? 'pending' : 'done', rank: i % 5 })))
  // The other store has loaded the declarations of before and never declares anything itself.
  const other = new LmdbStore({ path, sweepIntervalMs: 0 })
  t.teardown(() => other.close())
  const theirs = other.collection('contacts')
  t.equal((await theirs.find({ batchId: 'b', state: 'pending' }, { limit: 1 })).length, 1)

  await seed.ensureIndexes('contacts', [{ ...plain, partialFilterExpression: { state: 'pending' } }])
  // Its writes during and after the build must reach the new index.
  for (let i = 0; i < 40; i++) await theirs.insertOne({ _id: `o${i}`, batchId: 'b', state: i % 2 ? 'pending' : 'done', rank: 0 })
  await seed.settled()
  await theirs.updateOne({ _id: 'c00001' }, { $set: { state: 'done' } })
  await theirs.insertOne({ _id: 'late', batchId: 'b', state: 'pending', rank: 0 })
  const pending = (await seed.collection('contacts').find({ batchId: 'b' })).filter(d => d.state === 'pending').length
  t.equal(seed.servingIndexDb('contacts', plain.name).getCount(), pending, 'the new index holds exactly the pending contacts, the other store\'s writes included')
  const viaOther = await theirs.find({ batchId: 'b', state: 'pending' }, { sort: { rank: 1, _id: 1 } })
  t.equal(viaOther.length, pending, 'the other store reads through it too')
  await seed.close()
})

t.test('an index that stops being unique keeps its entries: only the declaration changes, and the other store follows', async t => {
  const path = tempDir(t)
  const unique = { name: 'session_seq', key: { sessionId: 1, seq: 1 } as Record<string, 1>, unique: true }
  const seed = new LmdbStore({ path, sweepIntervalMs: 0 })
  await seed.ensureIndexes('log', [unique])
  const n = 20_000
  await seed.collection('log').insertMany(Array.from({ length: n }, (_, i) => ({ _id: `s${i % 100}:${Math.floor(i / 100) + 1}`, sessionId: `s${i % 100}`, seq: Math.floor(i / 100) + 1 })))
  await seed.close()

  const store = new LmdbStore({ path, sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  const other = new LmdbStore({ path, sweepIntervalMs: 0 })
  t.teardown(() => other.close())
  const theirs = other.collection('log')
  await t.rejects(theirs.insertOne({ _id: 'x', sessionId: 's1', seq: 1 }), DuplicateKeyError, 'unique before')

  // A rebuild rewrites every entry in one transaction: each of the index's pages copied and the
  // old ones freed (a large collection's start would wait for it). Dropping uniqueness must not.
  const pagesBefore = store.env.getStats() as { lastPageNumber: number }
  await store.ensureIndexes('log', [{ name: unique.name, key: unique.key }])
  const pagesAfter = store.env.getStats() as { lastPageNumber: number }
  const indexPages = (store.servingIndexDb('log', unique.name).getStats() as { treeLeafPageCount: number }).treeLeafPageCount
  t.ok(indexPages > 20, `the index spans ${indexPages} leaf pages`)
  t.ok(pagesAfter.lastPageNumber - pagesBefore.lastPageNumber < 10, `pages written by the new declaration: ${pagesAfter.lastPageNumber - pagesBefore.lastPageNumber}`)
  t.equal(store.servingIndexDb('log', unique.name).getCount(), n, 'every entry kept')

  // Both stores: another document with the same values is taken now; queries still read the index in order.
  await theirs.insertOne({ _id: 'x', sessionId: 's1', seq: 1 })
  await store.collection('log').insertOne({ _id: 'y', sessionId: 's1', seq: 1 })
  const reads = { ...store.reads }
  const first = await store.collection('log').find({ sessionId: 's7' }, { sort: { seq: 1 }, limit: 3 })
  t.same(first.map(d => d.seq), [1, 2, 3], 'in seq order (as numbers: 10 after 9)')
  t.equal(store.reads.documents - reads.documents, 3, 'read through the index: three documents for limit 3')
  t.same((await theirs.find({ sessionId: 's1', seq: 1 })).map(d => d._id).sort(), ['s1:1', 'x', 'y'])
  await t.rejects(theirs.insertOne({ _id: 's1:1', sessionId: 's1', seq: 1 }), DuplicateKeyError, 'the primary key still refuses its own id')
})


t.test('an _id range with no index to read reads from its lower bound to its upper one; unseekable bounds still answer right', async t => {
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  const docs = store.collection('docs')
  const ids = [...Array.from({ length: 2000 }, (_, i) => `k${String(i).padStart(5, '0')}`), 'k\u{1F600}', 'k\uE000', 'k\u0001', 'k00100\u{1F600}', 'k00100\uFFFD']
  await docs.insertMany(ids.map((_id, i) => ({ _id, n: i % 5 })))
  const reads = () => store.reads.documents
  let before = reads()
  const page = await docs.find({ _id: { $gt: 'k01000' } }, { sort: { _id: 1 }, limit: 10 })
  t.same(page.map(d => d._id), Array.from({ length: 10 }, (_, i) => `k${String(1001 + i).padStart(5, '0')}`))
  t.ok(reads() - before <= 11, `a slice after its last _id reads its own documents: ${reads() - before}`)
  before = reads()
  const range = await docs.find({ _id: { $gt: 'k00100', $lte: 'k00200' }, n: 1 })
  t.ok(reads() - before <= 110, `a bounded range reads its documents only: ${reads() - before}`)
  const expected = (lo: string, hi: string, lowInclusive: boolean, highInclusive: boolean) =>
    ids.filter(id => (lowInclusive ? id >= lo : id > lo) && (highInclusive ? id <= hi : id < hi)).sort()
  t.same(range.map(d => d._id).sort(), expected('k00100', 'k00200', false, true).filter(id => ids.indexOf(id) % 5 === 1), 'the same documents as mingo alone finds')
  // Bounds the key order cannot seek to (their order differs from mingo's), and ones that hold
  // documents whose ids it cannot compare alike: answered as before, by reading everything.
  for (const [lo, hi] of [['k\u{1F600}', 'l'], ['k', 'k\uE000'], ['k00100', 'k00101'], ['k\u0001', 'k00001']] as const) {
    for (const [gt, lt] of [['$gt', '$lt'], ['$gte', '$lte']] as const) {
      const found = await docs.find({ _id: { [gt]: lo, [lt]: hi } })
      t.same(found.map(d => d._id).sort(), expected(lo, hi, gt === '$gte', lt === '$lte'), `${gt} ${JSON.stringify(lo)} ${lt} ${JSON.stringify(hi)}`)
    }
  }
})

t.test('a retention changed, turned off or on again rewrites only the TTL index`s declaration; the sweep follows it', async t => {
  let now = Date.parse('2026-07-01T00:00:00Z')
  const store = new LmdbStore({ path: tempDir(t), clock: { now: () => now }, sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  const ttl = (expireAfterSeconds?: number) => [{ name: 'started_ttl', key: { startedAt: 1 } as Record<string, 1>, ...(expireAfterSeconds === undefined ? {} : { expireAfterSeconds }) }]
  /** Sweeps until nothing is left to expire (one sweep takes a bounded number). */
  const sweep = async () => {
    let total = 0
    for (let n = await store.sweep(); n > 0; n = await store.sweep()) total += n
    return total
  }
  const hour = 3_600_000
  const day = 24 * hour
  await store.ensureIndexes('attempts', ttl(400 * 86_400))
  // One an hour back from now: 0 .. 4999 hours (208 days) old.
  const n = 5_000
  await store.collection('attempts').insertMany(Array.from({ length: n }, (_, i) => ({ _id: `a${String(i).padStart(5, '0')}`, startedAt: new Date(now - i * hour) })))
  t.equal(await sweep(), 0, 'within 400 days: kept')

  // A rebuild would write every entry again (and, over this many, in the background under a new generation).
  const pagesBefore = store.env.getStats() as { lastPageNumber: number }
  await store.ensureIndexes('attempts', ttl())
  await store.ensureIndexes('attempts', ttl(90 * 86_400))
  const pagesAfter = store.env.getStats() as { lastPageNumber: number }
  t.ok(pagesAfter.lastPageNumber - pagesBefore.lastPageNumber < 10, `pages written by two new declarations: ${pagesAfter.lastPageNumber - pagesBefore.lastPageNumber}`)
  t.same(store.declared('attempts').map(s => [s.name, s.expireAfterSeconds, s.generation ?? 0, !!s.building]), [['started_ttl', 90 * 86_400, 0, false]], 'the same entries, a new TTL')
  t.equal(await sweep(), n - 90 * 24, 'a shorter retention takes every document past it (day 90 itself is on the edge and goes)')

  await store.ensureIndexes('attempts', ttl())
  now += 1000 * day
  t.equal(await sweep(), 0, 'no retention: nothing expires')
  t.equal(await store.collection('attempts').countDocuments({ startedAt: { $lt: new Date(now) } }), 90 * 24, 'and the index still answers queries')
  await store.ensureIndexes('attempts', ttl(400 * 86_400))
  t.equal(await sweep(), 90 * 24, 'turned on again: everything past it goes')
})

t.test('property: whatever updates a document goes through, each index holds exactly the entries a fresh insert of it would', async t => {
  // An update re-keys only the indexes whose values it changed (sameIndexedValues): the oracle is
  // a second collection where each version of the document is deleted and inserted whole.
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  const indexes = [
    { name: 'top', key: { a: 1, b: 1 } as Record<string, 1> },
    { name: 'nested', key: { 'n.x': 1, a: 1 } as Record<string, 1> },
    { name: 'deep', key: { 'n.y.z': 1 } as Record<string, 1> },
    { name: 'partial', key: { s: 1, b: 1 } as Record<string, 1>, partialFilterExpression: { s: 'on' } },
  ]
  await store.ensureIndexes('updated', indexes)
  await store.ensureIndexes('inserted', indexes)
  const updated = store.collection('updated')
  const inserted = store.collection('inserted')
  const leaf = fc.oneof(fc.constant(null), fc.constantFrom(0, -0, 1, 2.5, NaN), fc.constantFrom('x', 'y', ''), fc.constantFrom(new Date(0), new Date(1000)), fc.boolean())
  const value = fc.oneof(leaf, fc.array(leaf, { maxLength: 3 }), fc.record({ x: leaf, y: fc.oneof(leaf, fc.record({ z: leaf })) }, { requiredKeys: [] }), fc.array(fc.record({ x: leaf }, { requiredKeys: [] }), { maxLength: 2 }))
  const path = fc.constantFrom('a', 'b', 's', 'n', 'n.x', 'n.y', 'n.y.z', 'other')
  const update = fc.oneof(
    fc.record({ $set: fc.dictionary(path, value, { minKeys: 1, maxKeys: 2 }) }),
    fc.record({ $unset: fc.dictionary(path, fc.constant(''), { minKeys: 1, maxKeys: 1 }) }),
    fc.record({ $set: fc.record({ s: fc.constantFrom('on', 'off') }) }),
  )
  // One document's entries (its _id ends each key); NaN and -0 survive the JSON as text.
  const entries = (collection: string, index: string, id: string) =>
    [...store.servingIndexDb(collection, index).getKeys({})].filter(k => k[k.length - 1] === id).map(k => k.map(p => (typeof p === 'number' ? `n${Object.is(p, -0) ? '-0' : p}` : p)).join('|'))
  let run = 0
  await fc.assert(
    fc.asyncProperty(fc.record({ a: value, b: leaf, s: fc.constantFrom('on', 'off'), n: value }, { requiredKeys: [] }), fc.array(update, { minLength: 1, maxLength: 8 }), async (start, updates) => {
      const _id = `d${run++}`
      await updated.insertOne({ _id, ...start })
      await inserted.insertOne({ _id, ...start })
      for (const u of updates) {
        // An update mongod would refuse (a path through an array or a value) is refused here too; both stay as they were.
        if (await updated.updateOne({ _id }, u).then(() => false, () => true)) continue
        const now = await updated.findOne({ _id })
        await inserted.deleteOne({ _id })
        await inserted.insertOne(now!)
      }
      for (const { name } of indexes) {
        const got = entries('updated', name, _id)
        const want = entries('inserted', name, _id)
        if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`${name}: ${JSON.stringify(got)} != ${JSON.stringify(want)} after ${JSON.stringify(updates)}`)
      }
    }),
    { numRuns: 300 },
  )
  t.pass('the entries of every index matched after every sequence')
})

t.test('-0 in an indexed field is 0: found through the index, and an update takes its entry out (lmdb-js cannot encode -0 in a key)', async t => {
  // JSON.parse('-0') is -0: a client can send one.
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  await store.ensureIndexes('c', [{ name: 'a_b', key: { a: 1, b: 1 } }])
  const c = store.collection('c')
  await c.insertOne({ _id: 'x', a: 'k', b: JSON.parse('-0') })
  const reads = { ...store.reads }
  t.same((await c.find({ a: 'k', b: 0 })).map(d => d._id), ['x'], 'found as 0')
  t.equal(store.reads.keys - reads.keys, 1, 'through its index entry')
  await c.updateOne({ _id: 'x' }, { $set: { b: 1 } })
  t.same([...store.servingIndexDb('c', 'a_b').getKeys({})], [[3, 'k', 2, 1, 'x']], 'the entry moved: nothing left under the old value')
  t.same(await c.find({ a: 'k', b: 0 }), [])
})

t.test('a write that comes after the store closed is refused, not thrown where nobody can catch it', async t => {
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  const contacts = store.collection('contacts')
  const journal = store.orderedLog<{ text: string }>('journal')
  await contacts.insertOne({ _id: 'kept' })
  await journal.write([{ stream: 's', position: 1, value: { text: 'kept' } }])
  const uncaught: unknown[] = []
  const onUncaught = (error: unknown) => uncaught.push(error)
  process.on('uncaughtException', onUncaught)
  t.teardown(() => void process.off('uncaughtException', onUncaught))
  // A write-behind timer that fires while the service shuts down: its write races the close.
  const closing = store.close()
  const late = [contacts.insertOne({ _id: 'late' }), journal.write([{ stream: 's', position: 2, value: { text: 'late' } }])]
  await closing
  const after = [contacts.insertOne({ _id: 'after' }), journal.write([{ stream: 's', position: 3, value: { text: 'after' } }]), journal.drop('s')]
  for (const result of await Promise.allSettled(late)) t.ok(result.status === 'fulfilled' || result.reason instanceof Error, 'a write racing the close is done or refused')
  for (const result of await Promise.allSettled(after)) t.match(result, { status: 'rejected', reason: StoreUnavailableError }, 'a write after the close is refused')
  await new Promise(resolve => setTimeout(resolve, 50))
  t.same(uncaught, [], 'nothing thrown outside a caller')
})
