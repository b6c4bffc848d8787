// Reports benchmark: N session records (written with their pre-aggregated report blocks), then
// over real HTTP (loopback), on a 90-day range whose ends are off the 15-minute grid:
//   - sessions-detail latency p50/p99 for the first, a middle and the last page by page number,
//     and the last page by cursor;
//   - execute-report (sessions-overview) latency per grouping (Europe/Madrid; hour and day also
//     in Asia/Kathmandu, +05:45);
// each next to a baseline in the same run: the old record-scan path (count + skip, and the
// report pipelines over the records) issued directly on the store, without HTTP (the embedded
// store's collection API in-process; the bare MongoDB driver on the Mongo path), as a ratio.
// The embedded store is whatever `startService` picks without MONGO_URL, so the bench runs
// unchanged on another embedded store.
//
// Embedded store: 1,000,000 records. Mongo path: the wire-protocol test server is mongomock in
// Python (no real indexes, every query scans in Python), so it gets a smaller N (BENCH_MONGO_N,
// default 20,000); set MONGO_URL to bench a real mongod with 1,000,000 instead.
//
//   node --import @tapjs/typescript/import bench/reports/run.ts
// Env: BENCH_N (1000000), BENCH_MONGO_N (20000), BENCH_ITERATIONS (20), BENCH_SKIP_MONGO=1.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { MongoClient } from 'mongodb'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { startService, type RunningService } from '../../service.js'
import { SESSION_RECORDS, SessionRecorder, type SessionRecordDoc } from '../../reports/index.js'
import { loadDefinitions } from '../../reports/definitions.js'
import { CompiledReport } from '../../reports/metrics.js'
import { bucketKeyExpression, bucketSeries, offsetSegments, type Grouping } from '../../reports/time-buckets.js'
import { startMongoTestServer } from '../../test/support/mongo-server.js'
import { secondsSince, writeResults } from '../support.js'

const KEY = 'bench-key-000000000000000'
const T0 = Date.UTC(2026, 0, 1)
const SPAN = 90 * 86_400_000
const CREWS = 20
const CREW = 'crew-07'
const ZONE = 'Europe/Madrid'
const PAGE_SIZE = 100
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 100)
/** The old record-scan baseline takes seconds a run at 1M records: fewer runs. */
const BASELINE_ITERATIONS = Number(process.env.BENCH_BASELINE_ITERATIONS ?? 5)
const BUDGET_MS = 6_000 // per measured series (at least 3 runs)
const started = Date.now()
// The whole run stays under ~5 minutes: past this, series get one run and the Mongo path a note.
const DEADLINE = started + Number(process.env.BENCH_DEADLINE_S ?? 270) * 1000

interface Series {
  store: string
  n: number
  case: string
  runs: number
  p50: number
  p99: number
  baselineP50: number | null
  ratio: number | null
}
const results: Series[] = []

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!
}

async function time(fn: () => Promise<unknown>, iterations: number): Promise<number[]> {
  await fn() // warm-up
  const out: number[] = []
  const until = Date.now() + BUDGET_MS
  for (let i = 0; i < iterations && (i < 3 || Date.now() < until) && (i < 1 || Date.now() < DEADLINE); i++) {
    const t = performance.now()
    await fn()
    out.push(performance.now() - t)
  }
  return out
}

async function measure(store: string, n: number, name: string, http: () => Promise<unknown>, baseline: (() => Promise<unknown>) | null) {
  const a = await time(http, ITERATIONS)
  const b = baseline ? await time(baseline, BASELINE_ITERATIONS) : null
  const row: Series = {
    store,
    n,
    case: name,
    runs: a.length,
    p50: round(quantile(a, 0.5)),
    p99: round(quantile(a, 0.99)),
    baselineP50: b ? round(quantile(b, 0.5)) : null,
    ratio: b ? round(quantile(a, 0.5) / quantile(b, 0.5)) : null,
  }
  results.push(row)
  console.log(`${store.padEnd(7)} ${String(n).padStart(8)}  ${name.padEnd(34)} p50 ${String(row.p50).padStart(8)} ms  p99 ${String(row.p99).padStart(8)} ms  baseline p50 ${String(row.baselineP50 ?? '-').padStart(8)} ms  x${row.ratio ?? '-'}`)
}

const round = (x: number) => Math.round(x * 10) / 10

// Deterministic records: 90% account acme over CREWS crews, 10% globex; 90 days; a mix of
// statuses; log-normal-ish durations (median ~2 min); 1% still live.
function* records(n: number, chunk: number): Generator<SessionRecordDoc[]> {
  let seed = 12345
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
  const statuses = ['completed', 'completed', 'completed', 'completed', 'abandoned', 'transferred_to_human', 'error'] as const
  for (let start = 0; start < n; start += chunk) {
    const out: SessionRecordDoc[] = []
    for (let i = start; i < Math.min(n, start + chunk); i++) {
      const startTime = T0 + Math.floor((i / n) * SPAN) + Math.floor(random() * 1000)
      const live = random() < 0.01
      const duration = live ? null : Math.round(Math.exp(11.7 + (random() + random() + random() - 1.5) * 1.6))
      const id = `s${String(i).padStart(8, '0')}`
      const messages = 1 + Math.floor(random() * 30)
      out.push({
        _id: id,
        session_id: id,
        accountId: random() < 0.9 ? 'acme' : 'globex',
        crew_id: `crew-${String(Math.floor(random() * CREWS)).padStart(2, '0')}`,
        agent_id: 'agent-1',
        agents: ['agent-1'],
        start_time: startTime,
        end_time: duration === null ? null : startTime + duration,
        duration,
        status: live ? 'active' : statuses[Math.floor(random() * statuses.length)]!,
        messages,
        user_messages: Math.floor(messages / 2),
        assistant_messages: messages - Math.floor(messages / 2),
        tool_calls: Math.floor(random() * 4),
        transfers: random() < 0.1 ? 1 : 0,
        end_reason: live ? null : 'user_ended',
      })
    }
    yield out
  }
}

async function get(base: string, path: string) {
  const res = await fetch(base + path, { headers: { apikey: KEY } })
  const body = await res.json()
  if (res.status !== 200) throw new Error(`${res.status} ${JSON.stringify(body)}`)
  return body as any
}

type Run = {
  aggregate(pipeline: Record<string, unknown>[]): Promise<unknown[]>
  find(filter: Record<string, unknown>, options: { sort: Record<string, 1>; skip?: number; limit: number }): Promise<unknown[]>
  count(filter: Record<string, unknown>): Promise<number>
}

async function benchStore(label: string, n: number, mongoUrl: string | undefined, bare: (service: RunningService) => Promise<Run & { close(): Promise<void> }>) {
  // A fresh DATA_DIR each run: records left by an earlier run would be skipped as duplicates.
  const dataDir = mkdtempSync(join(tmpdir(), 'sb-bench-reports-'))
  // Retention off: the seeded sessions start on fixed dates that age past any retention.
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', API_KEYS: `${KEY}=acme:reports`, LOG_LEVEL: 'silent', DATA_DIR: dataDir, SESSION_RECORD_RETENTION_DAYS: '0', REPORT_BLOCK_RETENTION_DAYS: '0', ...(mongoUrl ? { MONGO_URL: mongoUrl } : {}) })
  const service: RunningService = await startService(config, { logger: createLogger('silent') })
  const base = `http://127.0.0.1:${service.port}`
  try {
    let t = Date.now()
    // Through the recorder: records plus their pre-aggregated report blocks, as the engine writes them.
    const recorder = new SessionRecorder(service.platform.store)
    for (const chunk of records(n, 10_000)) await recorder.insert(chunk)
    console.log(`${label} (${service.platform.store.kind}): seeded ${n} records and their report blocks in ${((Date.now() - t) / 1000).toFixed(1)} s`)
    const direct = await bare(service)

    // Range ends off the 15-minute grid, as a user's would be: the partial quarters are read too.
    const from0 = T0 + 433_000
    const to0 = T0 + SPAN - 180_000
    const range = `crew_id=${CREW}&start_ts=${from0}&end_ts=${to0}`
    const filter = { accountId: 'acme', crew_id: CREW, start_time: { $gte: from0, $lt: to0 } }
    const sort = { start_time: 1 as const, _id: 1 as const }
    const first = await get(base, `/engine/v1/api/reports/sessions-detail?${range}&page=0&pageSize=${PAGE_SIZE}`)
    const total: number = first.pagination.total
    const deep = Math.max(0, Math.ceil(total / PAGE_SIZE) - 1)
    const middle = Math.floor(deep / 2)
    console.log(`${label}: ${CREW} has ${total} sessions in 90 days; deep page = ${deep}`)
    const asOf = first.pagination.asOf
    // Baselines: the old path, a count over the range plus skip, straight on the store.
    for (const page of [0, middle, deep]) {
      await measure(label, n, `sessions-detail page ${page} (page number)`, () => get(base, `/engine/v1/api/reports/sessions-detail?${range}&page=${page}&pageSize=${PAGE_SIZE}&asOf=${asOf}`),
        () => Promise.all([direct.find(filter, { sort, skip: page * PAGE_SIZE, limit: PAGE_SIZE }), direct.count(filter)]))
    }
    if (deep > 0) {
      const before = await get(base, `/engine/v1/api/reports/sessions-detail?${range}&page=${deep - 1}&pageSize=${PAGE_SIZE}&asOf=${asOf}`)
      const cursor = before.pagination.nextCursor
      const last = before.data[before.data.length - 1]
      const seek = { ...filter, $or: [{ start_time: { $gt: last.start_time, $lt: to0 } }, { start_time: last.start_time, _id: { $gt: last.session_id } }] }
      await measure(label, n, `sessions-detail page ${deep} (cursor)`, () => get(base, `/engine/v1/api/reports/sessions-detail?${range}&page=${deep}&pageSize=${PAGE_SIZE}&cursor=${cursor}`),
        () => direct.find(seek, { sort, limit: PAGE_SIZE + 1 }))
    }

    const report = new CompiledReport(loadDefinitions('config/reports.json').get('sessions-overview')!)
    const cases: [string, Grouping | null][] = [
      [ZONE, null], [ZONE, 'hour'], [ZONE, 'day'], [ZONE, 'week'], [ZONE, 'month'],
      // A quarter-hour offset: local hours and days are not whole UTC hours.
      ['Asia/Kathmandu', 'hour'], ['Asia/Kathmandu', 'day'],
    ]
    for (const [zone, grouping] of cases) {
      const pageSize = 1000
      // The baseline is the old path: the same pipelines (main $group + duration histogram) over
      // the records of the page's span.
      let from = from0
      let to = to0
      if (grouping) {
        const series = bucketSeries(zone, grouping, from, to)
        const page = series.slice(0, pageSize)
        from = Math.max(from, page[0]!.startsAt)
        to = Math.min(to, series.endOf(page.length - 1))
      }
      const key = grouping ? bucketKeyExpression(grouping, offsetSegments(zone, from, to), 'start_time') : null
      const match = { accountId: 'acme', crew_id: CREW, start_time: { $gte: from, $lt: to } }
      const spec = report.histograms[0]!
      const pipelines = [
        [{ $match: match }, { $group: { _id: report.groupId(key), ...report.accumulators } }],
        [{ $match: { ...match, ...spec.filter, [spec.field]: { $gte: 0 } } }, report.histogramGroup(spec, key)],
      ]
      await measure(label, n, `execute-report ${grouping ?? 'none'}${zone === ZONE ? '' : ` ${zone}`}`,
        () => get(base, `/engine/v1/api/reports/execute-report/sessions-overview?${range}&page=0&pageSize=${pageSize}&timeZone=${encodeURIComponent(zone)}${grouping ? `&groupByTime=${grouping}` : ''}`),
        () => Promise.all(pipelines.map(p => direct.aggregate(p))))
    }
    await direct.close()
  } finally {
    await service.close()
    rmSync(dataDir, { recursive: true, force: true })
  }
}

const nMemory = Number(process.env.BENCH_N ?? 1_000_000)
await benchStore('embedded', nMemory, undefined, async service => {
  // The embedded store has no driver: the baseline is its collection API, in-process.
  const c = service.platform.store.collection(SESSION_RECORDS)
  return {
    aggregate: p => c.aggregate(p),
    find: (f, o) => c.find(f, o),
    count: f => c.countDocuments(f),
    close: async () => {},
  }
})

if (process.env.BENCH_SKIP_MONGO !== '1') {
  const nMongo = Number(process.env.BENCH_MONGO_N ?? (process.env.MONGO_URL ? 1_000_000 : 20_000))
  const server = await startMongoTestServer()
  try {
    const url = new URL(server.url)
    url.pathname = `/bench_reports_${Date.now()}`
    await benchStore('mongo', nMongo, url.toString(), async () => {
      // The bare driver on the same database: no service, no HTTP.
      const client = await new MongoClient(url.toString()).connect()
      const c = client.db().collection(SESSION_RECORDS)
      return {
        aggregate: p => c.aggregate(p).toArray(),
        find: (f, o) => c.find(f, o).toArray(),
        count: f => c.countDocuments(f),
        close: async () => {
          await c.drop().catch(() => undefined)
          await client.close()
        },
      }
    })
  } finally {
    await server.stop()
  }
}

writeResults(import.meta.url, started, {
  date: new Date().toISOString(),
  node: process.version,
  durationSeconds: secondsSince(started),
  setup: { span: '90 days', crews: CREWS, crew: CREW, pageSize: PAGE_SIZE, reportPageSize: 1000, timeZone: ZONE, report: 'sessions-overview' },
  results,
})
