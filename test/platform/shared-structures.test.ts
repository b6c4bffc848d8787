// The embedded store writes a collection's documents with msgpackr's shared record structures
// (platform/store/shared-structures.ts): a document stores its values and a structure id, not
// its key names. What a user relies on: every document reads back exactly as written, whether
// it was written before this (each with its key names), by this process, or by another store
// on the same database (a second process, as the key CLI; the apply and write threads share the
// same code) adding shapes at the same time; and a restart reads them all.
import t from 'tap'
import { join } from 'node:path'
import { spawn } from 'node:child_process'
import { open } from 'lmdb'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import { buildService } from '../support/processes.js'
import { tempDir } from '../support/temp-dir.js'

const at = (i: number) => new Date(Date.UTC(2026, 10, 1, 0, 0, i))
/** Documents of a few shapes: nested objects, arrays, Dates, an optional field. */
const doc = (i: number, extra: Record<string, unknown> = {}) => ({
  _id: `d${String(i).padStart(4, '0')}`,
  aVeryDistinctiveFieldName: `value ${i}`,
  n: i,
  when: at(i),
  nested: { x: i, list: [1, 'two', { deep: i % 3 === 0 }] },
  ...(i % 2 ? { optional: i } : {}),
  ...extra,
})
const byId = (a: { _id: string }, b: { _id: string }) => a._id.localeCompare(b._id)

t.test('documents written before shared structures (each with its key names) read back the same, and after an update', async t => {
  const path = tempDir(t)
  const written = Array.from({ length: 60 }, (_, i) => doc(i))
  // The layout of an earlier version: the documents' database with lmdb-js's default encoder.
  const earlier = open({ path, maxDbs: 512 })
  const docs = earlier.openDB<any, string>({ name: 'c:things' })
  await earlier.transaction(() => {
    for (const d of written) docs.putSync(d._id, d)
  })
  await earlier.close()

  const store = new LmdbStore({ path, sweepIntervalMs: 0 })
  const things = store.collection<any>('things')
  t.same((await things.find({})).sort(byId), written, 'every earlier document reads back as written')
  t.ok((await things.findOne({ _id: 'd0003' }))!.when instanceof Date, 'Dates stay Dates')
  await things.updateOne({ _id: 'd0003' }, { $set: { n: 1003, added: 'yes' } })
  await things.insertOne(doc(100))
  const expected = [...written.map(d => (d._id === 'd0003' ? { ...d, n: 1003, added: 'yes' } : d)), doc(100)]
  t.same((await things.find({})).sort(byId), expected, 'old and newly encoded documents side by side')
  t.equal(await things.countDocuments({}), 61, 'the count is the documents, nothing else')
  await store.close()

  const reopened = new LmdbStore({ path, sweepIntervalMs: 0 })
  t.teardown(() => reopened.close())
  t.same((await reopened.collection<any>('things').find({})).sort(byId), expected, 'reopened: the same')
})

t.test('a document stores its values, not its key names: those are kept once for the collection', async t => {
  const path = tempDir(t)
  const store = new LmdbStore({ path, sweepIntervalMs: 0 })
  await store.collection<any>('things').insertMany(Array.from({ length: 50 }, (_, i) => doc(i)))
  await store.close()

  const raw = open({ path, maxDbs: 512 })
  t.teardown(() => raw.close())
  const stored = raw.openDB<Buffer, string>({ name: 'c:things', encoding: 'binary' })
  const buffers = [...stored.getRange({})].map(entry => entry.value)
  t.equal(buffers.length, 50, 'the documents, and nothing else, in their database')
  t.notOk(
    buffers.some(b => b.includes('aVeryDistinctiveFieldName')),
    'no stored document spells out its key names',
  )
  const structures = raw.openDB<unknown, string>({ name: 'm:structures' }).get('things') as string[][]
  t.ok(structures.some(s => s.includes('aVeryDistinctiveFieldName')), 'the collection keeps them once')
})

t.test('another process adding new shapes at the same time: each reads everything, and so does a restart', async t => {
  const path = tempDir(t)
  const storeModule = join(buildService(), 'platform', 'store', 'lmdb-store.js')
  // Each document a shape new to both processes: a field named after it.
  const shaped = (i: number) => doc(i, { [`only${i}`]: i, [`shared${i % 5}`]: `s${i}` })
  // The other process (as the apply thread or the key CLI would be): writes the odd documents,
  // then, when told, prints every document it reads. It runs the built store, so the helpers
  // above go in as their (already plain JavaScript) source.
  const script = `
    const { LmdbStore } = await import(${JSON.stringify(storeModule)})
    const store = new LmdbStore({ path: ${JSON.stringify(path)}, sweepIntervalMs: 0 })
    const things = store.collection('things')
    const doc = ${doc.toString()}
    const at = ${at.toString()}
    const shaped = ${shaped.toString()}
    const writes = []
    for (let i = 1; i < 80; i += 2) writes.push(things.insertOne(shaped(i)))
    await Promise.all(writes)
    process.stdout.write('written\\n')
    process.stdin.once('data', async () => {
      const all = (await things.find({})).sort((a, b) => a._id.localeCompare(b._id))
      process.stdout.write(JSON.stringify(all) + '\\n')
      await store.close()
      process.exit(0)
    })
  `
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['pipe', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
  const exited = new Promise(resolve => child.once('exit', resolve))
  t.teardown(() => void child.kill('SIGKILL'))

  const store = new LmdbStore({ path, sweepIntervalMs: 0 })
  const things = store.collection<any>('things')
  for (let i = 0; i < 80; i += 2) await things.insertOne(shaped(i))
  const deadline = Date.now() + 30_000
  while (!output.includes('written\n') && Date.now() < deadline && child.exitCode === null) await new Promise(r => setTimeout(r, 20))
  t.match(output, /written\n/, `the other process wrote its documents (${output.slice(0, 300)})`)
  const written = Array.from({ length: 80 }, (_, i) => shaped(i)).sort(byId)
  t.same((await things.find({})).sort(byId), written, 'this process reads what both wrote')
  child.stdin.write('read\n')
  await exited
  const theirs = JSON.parse(output.split('\n')[1] ?? 'null')
  t.same(theirs, JSON.parse(JSON.stringify(written)), 'the other process reads what both wrote')
  await store.close()

  const reopened = new LmdbStore({ path, sweepIntervalMs: 0 })
  t.teardown(() => reopened.close())
  t.same((await reopened.collection<any>('things').find({})).sort(byId), written, 'reopened: every document as written')
})

t.test('keys that are data (an address keying counts per address) are never kept in the shared structures; the documents read back the same', async t => {
  const store = new LmdbStore({ path: tempDir(t), sweepIntervalMs: 0 })
  t.teardown(() => store.close())
  const contacts = store.collection<any>('contacts')
  const written = [
    { _id: 'a', name: 'A', addressAttempts: { '34611223344': 2 } },
    { _id: 'b', name: 'B', addressAttempts: { 'ana@example%2Ecom': 1 } },
    { _id: 'c', name: 'C', addressAttempts: { '+34611223344': 1, other: 3 } },
    { _id: 'd', name: 'D', addressAttempts: {} },
  ]
  await contacts.insertMany(written)
  t.same((await contacts.find({})).sort(byId), written)
  const shared = JSON.stringify(store.structures.get('contacts'))
  t.ok(shared.includes('addressAttempts'), 'field names are shared')
  for (const key of ['34611223344', 'ana@example', '+346']) t.notOk(shared.includes(key), `${key} is not`)
  await contacts.deleteMany({})
  t.notOk(JSON.stringify(store.structures.get('contacts')).includes('3461'), 'nothing of the documents is left once they are gone')
})
