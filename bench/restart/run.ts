// Restart benchmark (issue 11): how long a `make run`-style process (main.js, embedded LMDB
// store, no MONGO_URL, no NATS_URL) takes from spawn to a healthy /healthz, and what it holds
// in memory, with RESTART_CONTACTS (1,000,000) contacts stored in its DATA_DIR; beside the same
// process on an empty DATA_DIR in the same run (baseline: the cost of starting at all). Then
// it proves the data is served: a read of the seeded batch and its last contact.
//
// Seeding writes ContactDoc documents (the shape loads.ts writes) straight into the store of an
// in-process service on that DATA_DIR (bench/ingest measures the HTTP load path), then closes it.
//
//   node --import @tapjs/typescript/import bench/restart/run.ts     (or: make bench BENCH=restart)
// Env: RESTART_CONTACTS (1000000), RESTART_RUNS (3: the median is reported).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { newId } from '../../platform/ids.js'
import { startService } from '../../service.js'
import { COLLECTIONS, NO_PRIORITY_RANK, type ContactDoc } from '../../dialer/collections.js'
import type { BatchDoc } from '../../dialer/batches.js'
import { buildService, startProcess, waitHealthy } from '../../test/support/processes.js'
import { runHeader, writeResults } from '../support.js'

const CONTACTS = Number(process.env.RESTART_CONTACTS ?? 1_000_000)
const RUNS = Number(process.env.RESTART_RUNS ?? 3)
const KEY = 'bench-restart-key-00000000'
const ACCOUNT = 'bench'
const SEED_CHUNK = 10_000
const started = Date.now()
const round = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

async function seed(dataDir: string, n: number): Promise<{ batchId: string; lastIdentifier: string; seconds: number }> {
  const t0 = Date.now()
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', API_KEYS: `${KEY}=${ACCOUNT}`, LOG_LEVEL: 'silent', DATA_DIR: dataDir, DIALER_CYCLE_MS: '0' })
  const service = await startService(config, { logger: createLogger('silent') })
  const contacts = service.platform.store.collection<ContactDoc>(COLLECTIONS.contacts)
  const batches = service.platform.store.collection<BatchDoc>(COLLECTIONS.batches)
  const at = new Date()
  const batchId = newId()
  await batches.insertOne({
    _id: batchId,
    accountId: ACCOUNT,
    name: 'restart bench',
    channel: 'phone',
    source: 'api',
    duplicateStrategy: 'merge',
    rules: {},
    status: 'paused' as BatchDoc['status'],
    uploadStatus: 'completed' as BatchDoc['uploadStatus'],
    uploadProgress: 100,
    totalContacts: n,
    tempCsvKey: null,
    importOperationId: null,
    importErrorCount: 0,
    createdBy: { id: 'bench' },
    createdAt: at,
    updatedAt: at,
  })
  for (let seeded = 0; seeded < n; seeded += SEED_CHUNK) {
    const docs: ContactDoc[] = []
    for (let i = seeded; i < Math.min(n, seeded + SEED_CHUNK); i++) {
      docs.push({
        _id: newId(),
        accountId: ACCOUNT,
        batchId,
        identifier: `c${i}`,
        identifierGenerated: false,
        name: `Contact ${i}`,
        addresses: [{ address: `346${String(i).padStart(8, '0')}`, type: 'phone', priority: 1 }],
        scheduledAt: null,
        contactPriority: null,
        priorityRank: NO_PRIORITY_RANK,
        customFields: { plan: i % 2 ? 'gold' : 'basic' },
        state: 'pending',
        nextAttemptAt: at,
        attempts: 0,
        addressAttempts: {},
        createdAt: at,
        updatedAt: at,
      })
    }
    await contacts.insertMany(docs, { ordered: false })
  }
  await service.close()
  return { batchId, lastIdentifier: `c${n - 1}`, seconds: round((Date.now() - t0) / 1000) }
}

interface Start {
  healthyMs: number
  rssMiB: number
  /** RSS split: anonymous (heap, native allocations) and file-backed (LMDB's memory map, reclaimable page cache). */
  rssAnonMiB: number
  rssFileMiB: number
  firstReadMs?: number
}

/** Spawns main.js on `dataDir`, times it to healthy, reads its RSS, optionally reads the batch. */
async function start(dataDir: string, batch?: { batchId: string; lastIdentifier: string }): Promise<Start> {
  const t0 = Date.now()
  const proc = await startProcess(undefined, 'restart', { API_KEYS: `${KEY}=${ACCOUNT}`, LOG_LEVEL: 'error', DATA_DIR: dataDir, DIALER_CYCLE_MS: '0' })
  try {
    await waitHealthy(proc, 60_000)
    const healthyMs = Date.now() - t0
    let firstReadMs: number | undefined
    if (batch) {
      const r0 = Date.now()
      const read = await fetch(`${proc.base}/dialer/v1/batches/${batch.batchId}`, { headers: { apikey: KEY } })
      const body = (await read.json()) as { totalContacts?: number }
      if (read.status !== 200 || body.totalContacts !== CONTACTS) throw new Error(`the batch read answered ${read.status} ${JSON.stringify(body)}`)
      const page = await fetch(`${proc.base}/dialer/v1/batches/${batch.batchId}/contacts?limit=1`, { headers: { apikey: KEY } })
      if (page.status !== 200) throw new Error(`the contacts read answered ${page.status}`)
      firstReadMs = Date.now() - r0
    }
    const status = readFileSync(`/proc/${proc.child.pid}/status`, 'utf8')
    const kib = (field: string) => round(Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0) / 1024)
    return { healthyMs, rssMiB: kib('VmRSS'), rssAnonMiB: kib('RssAnon'), rssFileMiB: kib('RssFile') + kib('RssShmem'), ...(firstReadMs !== undefined ? { firstReadMs } : {}) }
  } finally {
    await proc.terminate()
  }
}

const full = mkdtempSync(join(tmpdir(), 'sb-bench-restart-'))
const empty = () => mkdtempSync(join(tmpdir(), 'sb-bench-restart-empty-'))
try {
  buildService() // transpiled once, before any timing
  console.log(`seeding ${CONTACTS} contacts into ${full}`)
  const seeded = await seed(full, CONTACTS)
  console.log(`seeded in ${seeded.seconds} s`)
  const baseline: Start[] = []
  const stored: Start[] = []
  for (let run = 0; run < RUNS; run++) {
    const dir = empty()
    baseline.push(await start(dir))
    rmSync(dir, { recursive: true, force: true })
    stored.push(await start(full, seeded))
    console.log(`run ${run + 1}: empty ${baseline.at(-1)!.healthyMs} ms (${baseline.at(-1)!.rssMiB} MiB); ${CONTACTS} contacts ${stored.at(-1)!.healthyMs} ms (${stored.at(-1)!.rssMiB} MiB: ${stored.at(-1)!.rssAnonMiB} anonymous, ${stored.at(-1)!.rssFileMiB} file-backed), first read ${stored.at(-1)!.firstReadMs} ms`)
  }
  const summary = {
    contacts: CONTACTS,
    seedSeconds: seeded.seconds,
    emptyHealthyMs: median(baseline.map(s => s.healthyMs)),
    storedHealthyMs: median(stored.map(s => s.healthyMs)),
    healthyRatio: round(median(stored.map(s => s.healthyMs)) / median(baseline.map(s => s.healthyMs)), 2),
    emptyRssMiB: median(baseline.map(s => s.rssMiB)),
    storedRssMiB: median(stored.map(s => s.rssMiB)),
    storedRssAnonMiB: median(stored.map(s => s.rssAnonMiB)),
    storedRssFileMiB: median(stored.map(s => s.rssFileMiB)),
    storedFirstReadMs: median(stored.map(s => s.firstReadMs!)),
  }
  console.log(JSON.stringify(summary))
  writeResults(import.meta.url, started, { ...runHeader(started), runs: RUNS, summary, baseline, stored })
} finally {
  rmSync(full, { recursive: true, force: true })
}
process.exit(0)
