// Store filters are typed by the collection's documents (platform/store/types.ts, Filter<T>):
// a fixture is compiled with the project's compiler options, and exactly its lines marked
// REFUSED fail to compile, while the well-typed filters beside them (operators, elements of
// arrays, dotted paths, $or) compile. At run time the same filters read the store as they say.
import t from 'tap'
import { fileURLToPath } from 'node:url'
import { MemoryStore } from '../../platform/store/index.js'
import type { Contact } from './fixtures/store-filters.js'
import { refusedLines } from '../support/compile.js'

const fixture = fileURLToPath(new URL('./fixtures/store-filters.ts', import.meta.url))

t.test('a filter with a value its field cannot hold does not compile; the rest does', async t => {
  const { refused, marked } = refusedLines(fixture)
  t.equal(marked.length, 4)
  t.same(refused, marked, 'exactly the marked lines are refused')
})

t.test('the same filters read the store', async t => {
  const store = new MemoryStore()
  t.teardown(() => store.close())
  const contacts = store.collection<Contact>('contacts')
  await contacts.insertOne({ _id: 'a', state: 'pending', attempts: 1, tags: ['vip'], nextAttemptAt: new Date(0) })
  t.equal((await contacts.find({ state: 'pending', attempts: { $lte: 1 }, tags: 'vip', nextAttemptAt: { $lt: new Date(1) } })).length, 1)
  t.equal(await contacts.countDocuments({ $or: [{ state: 'done' }, { 'address.country': 'ES' }] }), 0)
})
