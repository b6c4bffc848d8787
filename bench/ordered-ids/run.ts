// Contacts inserted into a growing embedded store with random ids (UUID v4, the baseline) and
// with time-ordered ids (UUID v7, what the service gives contacts: platform/ids.ts), same run,
// same code: 1,000 contacts per insertMany (a load's chunk) under the contacts' real indexes,
// the rate reported per 100,000 as the store grows; then claims in selection order (50 per
// round, as a dispatch cycle makes them). The store keeps documents in _id order, and LMDB
// copies every page a transaction touches: random ids touch a page per contact.
//
//   node --import @tapjs/typescript/import bench/ordered-ids/run.ts   (BENCH_IDS_CONTACTS=500000)
import { randomUUID } from 'node:crypto'
import { rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { COLLECTIONS, INDEXES } from '../../dialer/collections.js'
import { newOrderedId } from '../../platform/ids.js'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import { runHeader, writeResults } from '../support.js'

const CONTACTS = Number(process.env.BENCH_IDS_CONTACTS ?? 500_000)
const CHUNK = 1000
const STEP = 100_000
const CLAIM_ROUNDS = 200
const CLAIM_ROOM = 50
const started = Date.now()

async function run(kind: 'random (v4)' | 'ordered (v7)', nextId: () => string) {
  const path = join(tmpdir(), `switchboard-bench-ids-${randomUUID()}`)
  const store = new LmdbStore({ path, sweepIntervalMs: 0 })
  try {
    await store.ensureIndexes(COLLECTIONS.contacts, INDEXES[COLLECTIONS.contacts]!)
    const contacts = store.collection(COLLECTIONS.contacts)
    const at = new Date()
    const perStep: { upTo: number; contactsPerSecond: number }[] = []
    let t0 = performance.now()
    for (let seeded = 0; seeded < CONTACTS; ) {
      const docs = []
      for (let i = seeded; i < seeded + CHUNK; i++) {
        docs.push({
          _id: nextId(),
          accountId: 'bench',
          batchId: 'batch',
          identifier: `c${i}`,
          name: `Contact ${i}`,
          addresses: [{ address: `346${String(i).padStart(8, '0')}`, type: 'phone', priority: 1 }],
          state: 'pending',
          priorityRank: Number.MAX_SAFE_INTEGER,
          nextAttemptAt: at,
          attempts: 0,
          addressAttempts: {},
          customFields: {},
          createdAt: at,
          updatedAt: at,
        })
      }
      await contacts.insertMany(docs, { ordered: false })
      seeded += CHUNK
      if (seeded % STEP === 0) {
        perStep.push({ upTo: seeded, contactsPerSecond: Math.round(STEP / ((performance.now() - t0) / 1000)) })
        t0 = performance.now()
      }
    }
    const claimStart = performance.now()
    let claimed = 0
    const dueBy = new Date(at.getTime() + 1)
    for (let round = 0; round < CLAIM_ROUNDS; round++) {
      const due = await contacts.find(
        { batchId: 'batch', state: 'pending', nextAttemptAt: { $lte: dueBy } },
        { sort: { priorityRank: 1, nextAttemptAt: 1, _id: 1 }, limit: CLAIM_ROOM },
      )
      await Promise.all(due.map(c => contacts.updateOne({ _id: c._id, state: 'pending' }, { $set: { state: 'in_progress', claimedAt: at } })))
      claimed += due.length
    }
    const claimsPerSecond = Math.round(claimed / ((performance.now() - claimStart) / 1000))
    console.log(`${kind}: ${perStep.map(s => `${s.upTo / 1000}k ${s.contactsPerSecond}/s`).join(', ')}; claims ${claimsPerSecond}/s`)
    return { kind, insertsPerStep: perStep, claimsPerSecond }
  } finally {
    await store.close()
    rmSync(path, { recursive: true, force: true })
  }
}

const random = await run('random (v4)', () => randomUUID())
const ordered = await run('ordered (v7)', newOrderedId)
const last = (r: typeof random) => r.insertsPerStep.at(-1)!.contactsPerSecond
console.log(`at ${CONTACTS / 1000}k contacts: ordered ÷ random inserts ×${(last(ordered) / last(random)).toFixed(2)}; claims ×${(ordered.claimsPerSecond / random.claimsPerSecond).toFixed(2)}`)
writeResults(import.meta.url, started, {
  ...runHeader(started),
  parameters: { contacts: CONTACTS, chunk: CHUNK, claimRounds: CLAIM_ROUNDS, claimRoom: CLAIM_ROOM },
  baseline: random,
  ordered,
  ratio: { insertsAtEnd: last(ordered) / last(random), claims: ordered.claimsPerSecond / random.claimsPerSecond },
})
