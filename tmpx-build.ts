// One-off: how long declaring the counted indexes takes on a database written without them.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { LmdbStore } from './platform/store/lmdb-store.js'
import { INDEXES, COLLECTIONS } from './dialer/collections.js'
const N = Number(process.env.N ?? 200_000)
const dir = mkdtempSync(join(tmpdir(), 'sb-build-'))
const store = new LmdbStore({ path: dir, sweepIntervalMs: 0 })
const specs = INDEXES[COLLECTIONS.contacts]!
await store.ensureIndexes(COLLECTIONS.contacts, specs.filter(s => !s.counted).concat([{ name: 'account_state', key: { accountId: 1, state: 1 } }]))
const c = store.collection(COLLECTIONS.contacts)
const at = new Date()
for (let i = 0; i < N; i += 10_000) {
  const docs = []
  for (let j = i; j < i + 10_000; j++) docs.push({ _id: `c${String(j).padStart(8, '0')}`, accountId: 'a', batchId: 'b', identifier: `i${j}`, name: `Contact ${j}`, addresses: [{ address: `346${j}`, type: 'phone', priority: 1 }], state: j % 3 ? 'pending' : 'done', lastOutcome: j % 3 ? null : 'answered', doneReason: null, priorityRank: 10, nextAttemptAt: at, createdAt: at, updatedAt: at, attempts: 0, addressAttempts: {}, customFields: {} })
  await c.insertMany(docs, { ordered: false })
}
let worst = 0
let last = performance.now()
const probe = setInterval(() => { const now = performance.now(); worst = Math.max(worst, now - last); last = now }, 5)
const t0 = performance.now()
await store.ensureIndexes(COLLECTIONS.contacts, specs)
console.log(`${N} contacts: declaring the counted indexes took ${Math.round(performance.now() - t0)} ms, loop stall max ${Math.round(Math.max(worst, performance.now() - last))} ms`)
clearInterval(probe)
await store.close()
rmSync(dir, { recursive: true, force: true })
