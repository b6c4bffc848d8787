// Store filters are typed by the collection's documents (platform/store/types.ts, Filter<T>):
// a fixture is compiled with the project's compiler options, and exactly its lines marked
// REFUSED fail to compile, while the well-typed filters beside them (operators, elements of
// arrays, dotted paths, $or) compile. At run time the same filters read the store as they say.
import t from 'tap'
import ts from 'typescript'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { MemoryStore } from '../../platform/store/index.js'
import type { Contact } from './fixtures/store-filters.js'

const fixture = fileURLToPath(new URL('./fixtures/store-filters.ts', import.meta.url))

t.test('a filter with a value its field cannot hold does not compile; the rest does', async t => {
  const config = ts.readConfigFile(fileURLToPath(new URL('../../tsconfig.json', import.meta.url)), ts.sys.readFile)
  const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, fileURLToPath(new URL('../..', import.meta.url)))
  const program = ts.createProgram([fixture], { ...options, noEmit: true })
  const refused = ts
    .getPreEmitDiagnostics(program)
    .filter(d => d.file?.fileName === fixture)
    .map(d => d.file!.getLineAndCharacterOfPosition(d.start!).line + 1)
  const marked = readFileSync(fixture, 'utf8')
    .split('\n')
    .flatMap((line, i) => (line.includes('// REFUSED') ? [i + 1] : []))
  t.equal(marked.length, 4)
  t.same([...new Set(refused)].sort((a, b) => a - b), marked, 'exactly the marked lines are refused')
})

t.test('the same filters read the store', async t => {
  const store = new MemoryStore()
  t.teardown(() => store.close())
  const contacts = store.collection<Contact>('contacts')
  await contacts.insertOne({ _id: 'a', state: 'pending', attempts: 1, tags: ['vip'], nextAttemptAt: new Date(0) })
  t.equal((await contacts.find({ state: 'pending', attempts: { $lte: 1 }, tags: 'vip', nextAttemptAt: { $lt: new Date(1) } })).length, 1)
  t.equal(await contacts.countDocuments({ $or: [{ state: 'done' }, { 'address.country': 'ES' }] }), 0)
})
