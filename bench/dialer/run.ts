// Dialer benchmark: the selection cycle on the embedded store, for a running batch that grows
// from 100,000 to 1,000,000 pending contacts in one run.
//
// Contacts are bulk-seeded straight into the store (ContactDoc, the shape loads.ts writes), not
// through the HTTP load path (bench/ingest measures that). The scheduler is the one the service
// creates (DIALER_CYCLE_MS=0: cycles run only when called), with a manual clock that does not
// move, so retries never fall due during the run and every claim is a fresh contact.
//
// Figures, at 100k and at 1M contacts in the batch:
//   - cycle latency p50/p99: `runCycle()` (selection, checks, claims, attempt records, hand-off
//     to the provider), with DIALER_MAX_IN_FLIGHT_PER_BATCH room (CYCLE_ROOM) per cycle; the
//     attempts are drained between cycles, outside the timing;
//   - baseline: the bare store query the cycle starts with (the batch's due contacts, sorted by
//     priorityRank, nextAttemptAt, _id, limit CYCLE_ROOM) on the same store, same run; the
//     cycle / query ratio is the scheduler's own overhead on top of the read;
//   - dispatch: attempts dispatched and settled per second, simulated provider at zero latency
//     (DIALER_SIM_LATENCY_MS=0), DISPATCH_ROOM in flight, cycles back to back for DISPATCH_MS
//     (a cycle that finds no room waits 1 ms for settlements), then the drain, included. A
//     sustained rate: one wave of DISPATCH_ROOM attempts would time a single claim round.
//   - progress read: `GET /dialer/v1/batches/{id}` over HTTP (what a CRM polls), whose progress
//     the embedded store answers from its counted index; baseline: the same progress computed
//     without it, by reading the batch's contacts and grouping them by state and ending (the
//     $group countBy sends MongoDB), on the same store, same run. Both must give the same
//     numbers. Also the loop's longest stall during each.
// Embedded store only: the MongoDB path in tests is a wire-protocol test server
// (test/support/mongo-wire-server.py, mongomock) that scans whole collections in Python; at
// 100k contacts a single selection query takes longer than this bench's budget, so it is not
// run here (set nothing: there is no MONGO_URL mode yet).
//
//   node --import @tapjs/typescript/import bench/dialer/run.ts     (or: make bench BENCH=dialer)
// Env: DIALER_BENCH_SMALL (100000), DIALER_BENCH_LARGE (1000000), DIALER_BENCH_CYCLES (10),
// DIALER_BENCH_DISPATCH_MS (8000); BENCH_PROFILE=dir profiles each dispatch window (bench/profile-window.ts).
// Hard stop: 12 minutes from start (DIALER_BENCH_HARD_STOP_MS); a row cut short says so and covers what finished.
import { randomUUID } from 'node:crypto'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { newId, newOrderedId } from '../../platform/ids.js'
import { startService } from '../../service.js'
import { COLLECTIONS, NO_PRIORITY_RANK, type ContactDoc } from '../../dialer/collections.js'
import type { BatchDoc } from '../../dialer/batches.js'
import { ManualClock, schedulerOf } from '../../dialer/scheduler/index.js'
import { progressOf, PROGRESS_FIELDS } from '../../dialer/scheduler/control.js'
import { ProfileWindow } from '../profile-window.js'
import { GcTally, runHeader, writeResults } from '../support.js'
import { countByPipeline, countRowsOf } from '../../platform/store/counted-index.js'

const SMALL = Number(process.env.DIALER_BENCH_SMALL ?? 100_000)
const LARGE = Number(process.env.DIALER_BENCH_LARGE ?? 1_000_000)
const CYCLES = Number(process.env.DIALER_BENCH_CYCLES ?? 10)
const CYCLE_ROOM = 50
const DISPATCH_ROOM = 1000
const DISPATCH_MS = Number(process.env.DIALER_BENCH_DISPATCH_MS ?? 8_000)
const SEED_CHUNK = 10_000
// Seeding 1M contacts into the durable store takes minutes on a shared 2-core machine.
const HARD_STOP_MS = Number(process.env.DIALER_BENCH_HARD_STOP_MS ?? 12 * 60_000)
const started = Date.now()
const deadline = started + HARD_STOP_MS
const pastDeadline = () => Date.now() > deadline

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)] ?? NaN
}
const round = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits
const ms = (t0: bigint) => Number(process.hrtime.bigint() - t0) / 1e6

const ACCOUNT = 'bench'
const clock = new ManualClock('2036-03-03T09:00:00Z')
const config = loadConfig({
  PORT: '0',
  HOST: '127.0.0.1',
  API_KEYS: `bench-dialer-key-0000000000=${ACCOUNT}:dialer`,
  LOG_LEVEL: 'silent',
  DATA_DIR: `/tmp/switchboard-bench-dialer-${randomUUID()}`,
  DIALER_CYCLE_MS: '0',
  DIALER_SIM_LATENCY_MS: '0',
  DIALER_MAX_ACTIVE_CONTACTS: '100000000',
  DIALER_MAX_IN_FLIGHT_PER_BATCH: String(DISPATCH_ROOM),
  DIALER_MAX_IN_FLIGHT_PER_ACCOUNT: String(DISPATCH_ROOM),
})
const service = await startService(config, { clock, logger: createLogger('silent') })
const { platform } = service
const scheduler = schedulerOf(platform)
const contacts = platform.store.collection<ContactDoc>(COLLECTIONS.contacts)
const batches = platform.store.collection<BatchDoc>(COLLECTIONS.batches)

const at = new Date(clock.now() - 60_000)
const batchId = newId()
const batch: BatchDoc = {
  _id: batchId,
  accountId: ACCOUNT,
  name: 'bench',
  channel: 'phone',
  source: 'api',
  duplicateStrategy: 'merge',
  rules: { maxInFlight: CYCLE_ROOM },
  status: 'running',
  uploadStatus: 'completed' as BatchDoc['uploadStatus'],
  uploadProgress: 100,
  totalContacts: 0,
  tempCsvKey: null,
  importOperationId: null,
  importErrorCount: 0,
  createdBy: { id: 'bench' },
  createdAt: at,
  updatedAt: at,
}
await batches.insertOne(batch)

let seeded = 0
const seedSeconds: Record<number, number> = {}
/** Contacts up to `n` in the batch, 10k per insertMany; a tenth carry a contactPriority (1..9). */
async function seedTo(n: number) {
  const t0 = process.hrtime.bigint()
  while (seeded < n) {
    const docs: ContactDoc[] = []
    for (let i = seeded; i < Math.min(n, seeded + SEED_CHUNK); i++) {
      const priority = i % 10 === 0 ? 1 + (i % 9) : null
      docs.push({
        _id: newOrderedId(),
        accountId: ACCOUNT,
        batchId,
        identifier: `c${i}`,
        identifierGenerated: false,
        name: `Contact ${i}`,
        addresses: [{ address: `346${String(i).padStart(8, '0')}`, type: 'phone', priority: 1 }],
        scheduledAt: null,
        contactPriority: priority,
        priorityRank: priority ?? NO_PRIORITY_RANK,
        customFields: {},
        state: 'pending',
        // Spread over the last hour: all due, in no particular insertion order.
        nextAttemptAt: new Date(clock.now() - ((i * 7919) % 3_600_000)),
        attempts: 0,
        addressAttempts: {},
        createdAt: at,
        updatedAt: at,
      })
    }
    await contacts.insertMany(docs, { ordered: false })
    seeded += docs.length
  }
  await batches.updateOne({ _id: batchId }, { $set: { totalContacts: seeded } })
  seedSeconds[n] = round(ms(t0) / 1000)
}

/** The first query of a selection cycle, bare. */
const selectionQuery = () =>
  contacts.find(
    { batchId, state: 'pending', nextAttemptAt: { $lte: new Date(clock.now()) } },
    { sort: { priorityRank: 1, nextAttemptAt: 1, _id: 1 }, limit: CYCLE_ROOM },
  )

interface LatencyRow {
  contacts: number
  complete: boolean
  cycles: number
  claimedPerCycle: number
  cycleP50Ms: number
  cycleP99Ms: number
  queryP50Ms: number
  queryP99Ms: number
  cycleOverQuery: number
}

async function latency(n: number): Promise<LatencyRow> {
  await selectionQuery() // warm (compiled query, JIT)
  const queries: number[] = []
  const cycles: number[] = []
  let claimed = 0
  for (let i = 0; i < CYCLES && !pastDeadline(); i++) {
    let t0 = process.hrtime.bigint()
    const rows = await selectionQuery()
    queries.push(ms(t0))
    if (rows.length !== CYCLE_ROOM) throw new Error(`selection query returned ${rows.length}`)
    t0 = process.hrtime.bigint()
    const report = await scheduler.runCycle()
    cycles.push(ms(t0))
    claimed += report.claimed
    await scheduler.drain()
  }
  const row = {
    contacts: n,
    complete: cycles.length === CYCLES,
    cycles: cycles.length,
    claimedPerCycle: round(claimed / Math.max(1, cycles.length)),
    cycleP50Ms: round(quantile(cycles, 0.5)),
    cycleP99Ms: round(quantile(cycles, 0.99)),
    queryP50Ms: round(quantile(queries, 0.5)),
    queryP99Ms: round(quantile(queries, 0.99)),
    cycleOverQuery: 0,
  }
  row.cycleOverQuery = round(row.cycleP50Ms / row.queryP50Ms, 2)
  console.log(`${n} contacts: cycle p50 ${row.cycleP50Ms} ms p99 ${row.cycleP99Ms} ms; query p50 ${row.queryP50Ms} ms p99 ${row.queryP99Ms} ms (${row.cycles} cycles)`)
  return row
}

interface ProgressRow {
  contacts: number
  done: number
  reads: number
  readP50Ms: number
  readP99Ms: number
  readStallMaxMs: number
  baselineReads: number
  baselineP50Ms: number
  baselineStallMaxMs: number
  same: boolean
}

const base = `http://127.0.0.1:${service.port}`
const KEY = 'bench-dialer-key-0000000000'
const PROGRESS_READS = 20
const BASELINE_READS = 3

/**
 * The same progress without the counted index: the batch's contacts read and grouped by state and
 * ending (the $group that countBy sends MongoDB, here over the batch's documents).
 */
async function progressByReading() {
  return progressOf(countRowsOf(await contacts.aggregate(countByPipeline({ batchId }, PROGRESS_FIELDS)), PROGRESS_FIELDS))
}

/** `work` timed, with the loop's longest stall meanwhile (a 1 ms timer's lateness). */
async function timedWithStall<R>(work: () => Promise<R>): Promise<{ ms: number; stallMs: number; result: R }> {
  let last = performance.now()
  let stall = 0
  const probe = setInterval(() => {
    const now = performance.now()
    stall = Math.max(stall, now - last - 1)
    last = now
  }, 1)
  const t0 = process.hrtime.bigint()
  try {
    const result = await work()
    return { ms: ms(t0), stallMs: Math.max(stall, performance.now() - last - 1), result }
  } finally {
    clearInterval(probe)
  }
}

/** `work` once to warm up, then `times` timed runs; the last run's answer. */
async function series<R>(work: () => Promise<R>, times: number) {
  let last = await work()
  const timings: { ms: number; stallMs: number }[] = []
  for (let i = 0; i < times; i++) {
    const run = await timedWithStall(work)
    timings.push(run)
    last = run.result as Awaited<R>
  }
  return { timings, last }
}

const sortedKeys = (o: Record<string, number>) => Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)))

async function progressRead(n: number): Promise<ProgressRow> {
  const get = async () => {
    const res = await fetch(`${base}/dialer/v1/batches/${batchId}`, { headers: { apikey: KEY } })
    if (res.status !== 200) throw new Error(`GET batch: ${res.status}`)
    return ((await res.json()) as { progress: Awaited<ReturnType<typeof progressByReading>> }).progress
  }
  const { timings: reads, last: answer } = await series(get, PROGRESS_READS)
  const { timings: baseline, last: expected } = await series(progressByReading, BASELINE_READS)
  const same = JSON.stringify({ ...answer, byOutcome: sortedKeys(answer.byOutcome) }) === JSON.stringify({ ...expected, byOutcome: sortedKeys(expected.byOutcome) })
  if (!same) console.log('progress differs:', JSON.stringify(answer), JSON.stringify(expected))
  const row: ProgressRow = {
    contacts: n,
    done: answer.done,
    reads: reads.length,
    readP50Ms: round(quantile(reads.map(r => r.ms), 0.5), 2),
    readP99Ms: round(quantile(reads.map(r => r.ms), 0.99), 2),
    readStallMaxMs: round(Math.max(...reads.map(r => r.stallMs)), 1),
    baselineReads: baseline.length,
    baselineP50Ms: round(quantile(baseline.map(r => r.ms), 0.5), 1),
    baselineStallMaxMs: round(Math.max(...baseline.map(r => r.stallMs)), 1),
    same,
  }
  console.log(
    `${n} contacts (${row.done} done): GET batch p50 ${row.readP50Ms} ms p99 ${row.readP99Ms} ms (loop stall max ${row.readStallMaxMs} ms); ` +
      `by reading the batch p50 ${row.baselineP50Ms} ms (stall max ${row.baselineStallMaxMs} ms); same numbers: ${same}`,
  )
  return row
}

interface DispatchRow {
  contacts: number
  complete: boolean
  cycles: number
  attempts: number
  seconds: number
  attemptsPerSecond: number
  /** This process's CPU time (all threads) per attempt, in µs. */
  cpuUsPerAttempt: number
  /** Garbage-collection pauses of the window per attempt, in µs (young and old generation). */
  gcUsPerAttempt: { young: number; old: number }
}

const gc = new GcTally()

async function dispatch(n: number): Promise<DispatchRow> {
  await batches.updateOne({ _id: batchId }, { $set: { rules: { maxInFlight: DISPATCH_ROOM } } })
  const profile = await ProfileWindow.start()
  const t0 = process.hrtime.bigint()
  const cpu0 = process.cpuUsage()
  gc.reset()
  let attempts = 0
  let cycles = 0
  while (ms(t0) < DISPATCH_MS && !pastDeadline()) {
    const { claimed } = await scheduler.runCycle()
    attempts += claimed
    cycles++
    if (claimed === 0) await new Promise(r => setTimeout(r, 1))
  }
  await scheduler.drain()
  const seconds = ms(t0) / 1000
  const cpu = process.cpuUsage(cpu0)
  await new Promise(r => setImmediate(r)) // the last collections' entries
  const collected = gc.read()
  await profile?.stop(`dispatch-${n}`)
  await batches.updateOne({ _id: batchId }, { $set: { rules: { maxInFlight: CYCLE_ROOM } } })
  const perAttempt = (totalUs: number) => (attempts === 0 ? 0 : Math.round(totalUs / attempts))
  const row: DispatchRow = {
    contacts: n,
    complete: !pastDeadline(),
    cycles,
    attempts,
    seconds: round(seconds, 2),
    attemptsPerSecond: Math.round(attempts / seconds),
    cpuUsPerAttempt: perAttempt(cpu.user + cpu.system),
    gcUsPerAttempt: { young: perAttempt(collected.minorMs * 1000), old: perAttempt(collected.majorMs * 1000) },
  }
  console.log(
    `${n} contacts: ${attempts} attempts dispatched in ${row.seconds} s over ${cycles} cycles: ${row.attemptsPerSecond}/s; ` +
      `CPU ${row.cpuUsPerAttempt} µs per attempt, GC pauses ${row.gcUsPerAttempt.young} µs young + ${row.gcUsPerAttempt.old} µs old`,
  )
  return row
}

const latencyRows: LatencyRow[] = []
const dispatchRows: DispatchRow[] = []
const progressRows: ProgressRow[] = []
try {
  for (const n of [SMALL, LARGE]) {
    if (pastDeadline()) break
    await seedTo(n)
    console.log(`seeded ${n} contacts (${seedSeconds[n]} s for this step)`)
    latencyRows.push(await latency(n))
    if (!pastDeadline()) dispatchRows.push(await dispatch(n))
    if (!pastDeadline()) progressRows.push(await progressRead(n))
  }
} finally {
  await scheduler.stop()
  await service.close()
}

const table = [
  '| contacts in the batch | cycle p50 ms | cycle p99 ms | bare selection query p50 ms | query p99 ms | cycle / query (p50) | attempts dispatched/s (zero-latency provider) |',
  '|---:|---:|---:|---:|---:|---:|---:|',
  ...latencyRows.map(r => {
    const d = dispatchRows.find(x => x.contacts === r.contacts)
    const cut = r.complete && (d?.complete ?? false) ? '' : ' (cut short at the hard stop)'
    return `| ${r.contacts}${cut} | ${r.cycleP50Ms} | ${r.cycleP99Ms} | ${r.queryP50Ms} | ${r.queryP99Ms} | ${r.cycleOverQuery} | ${d ? d.attemptsPerSecond : '-'} |`
  }),
].join('\n')
const progressTable = [
  '| contacts in the batch (done) | GET batch p50 ms | p99 ms | loop stall max ms | baseline: progress by reading the batch, p50 ms | its stall max ms | same numbers |',
  '|---:|---:|---:|---:|---:|---:|:---|',
  ...progressRows.map(r => `| ${r.contacts} (${r.done}) | ${r.readP50Ms} | ${r.readP99Ms} | ${r.readStallMaxMs} | ${r.baselineP50Ms} | ${r.baselineStallMaxMs} | ${r.same ? 'yes' : 'NO'} |`),
].join('\n')
console.log('\n' + table + '\n\n' + progressTable + '\n')

writeResults(import.meta.url, started, {
  ...runHeader(started),
  parameters: {
    store: 'lmdb (embedded)',
    sizes: [SMALL, LARGE],
    cyclesPerSize: CYCLES,
    cycleRoom: CYCLE_ROOM,
    dispatchRoom: DISPATCH_ROOM,
    dispatchMs: DISPATCH_MS,
    provider: 'simulated, DIALER_SIM_LATENCY_MS=0',
    seedSeconds,
  },
  latency: latencyRows,
  dispatch: dispatchRows,
  progress: progressRows,
})
