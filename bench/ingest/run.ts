// Ingest benchmark: 1000-contact requests (POST /dialer/v1/batches/{id}/contacts) pushed over
// real HTTP (loopback) with a small fixed concurrency, as fast as the service acknowledges them.
//
// Figures, per store:
//   - ack contacts/s:        contacts / (first request sent -> last 202 received);
//   - end-to-end contacts/s: contacts / (first request sent -> every operation reads `succeeded`,
//                            polled every POLL_MS);
//   - ack latency p50/p99 per request.
// Baseline (Mongo path only): the same number of contact documents, same shape as the service
// writes (ContactDoc), written by a bare `mongodb` driver insertMany loop (1000 per call, the same
// concurrency) into a fresh database on the same wire server, with the same indexes as the
// service's contacts collection. Ratios: service / bare, for ack and for end-to-end.
//
// What the figures mean: the Mongo path runs against the wire-protocol test server
// (test/support/mongo-wire-server.py: mockupdb + mongomock, pure Python, every query a scan),
// which is orders of magnitude slower than mongod. The absolute contacts/s on that row say
// nothing about production; the ratio to the bare insertMany loop on the same server in the same
// run (how much the service's extra work - validation, cap check, operation document, plan,
// upserts, counters - costs on top of the raw writes) is what transfers to a real mongod, and
// even that only roughly. The test server runs every command under one global lock, looks up
// only by _id or a full unique-index equality, and scans the whole collection for anything
// else: the service's per-request cap count (accountId + state), per-chunk plan read (batchId +
// identifier $in) and per-load total count (batchId) each scan every contact stored so far,
// where mongod would use an index, while insertMany scans nothing. So on this server the
// ratio is pessimistic for the service and can fall as N grows. Set MONGO_URL to bench a real
// mongod.
// The memory row is the embedded store: no baseline, shown for scale. Client, service and
// (Python) server share the same machine and cores.
//
//   node --import @tapjs/typescript/import bench/ingest/run.ts     (or: make bench BENCH=ingest)
// Env: INGEST_REQUESTS (30 on the test server, where 50 does not finish within the hard stop on
// a 2-core machine; 50 with MONGO_URL), INGEST_CONCURRENCY (4), INGEST_SKIP_MEMORY=1, MONGO_URL.
// Hard stop: 4 minutes from start; a row cut short says so and covers what finished.
import { randomUUID } from 'node:crypto'
import { MongoClient } from 'mongodb'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { startService, type RunningService } from '../../service.js'
import { COLLECTIONS, INDEXES, NO_PRIORITY_RANK, type ContactDoc } from '../../dialer/collections.js'
import { startMongoTestServer, type MongoTestServer } from '../../test/support/mongo-server.js'
import { runHeader, writeResults } from '../support.js'

const KEY = 'bench-ingest-key-00000000'
const PER_REQUEST = 1000
const REQUESTS = Number(process.env.INGEST_REQUESTS ?? (process.env.MONGO_URL ? 50 : 30))
const CONCURRENCY = Number(process.env.INGEST_CONCURRENCY ?? 4)
const POLL_MS = 75
const HARD_STOP_MS = 4 * 60_000
const started = Date.now()
const deadline = started + HARD_STOP_MS

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)] ?? NaN
}
const round = (x: number) => Math.round(x * 10) / 10
const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))
const pastDeadline = () => Date.now() > deadline

/** Runs job(0..n-1) with at most `concurrency` in flight; stops issuing at the hard stop. */
async function pool(n: number, concurrency: number, job: (i: number) => Promise<void>) {
  let next = 0
  const worker = async () => {
    while (next < n && !pastDeadline()) await job(next++)
  }
  await Promise.all(Array.from({ length: Math.min(n, concurrency) }, worker))
}

/** Request i's contacts: unique identifiers, valid phones 346 + 8 digits. */
const contacts = (i: number) =>
  Array.from({ length: PER_REQUEST }, (_, j) => {
    const n = i * PER_REQUEST + j
    return { identifier: `c${n}`, name: `Contact ${n}`, addresses: [{ address: `346${String(n).padStart(8, '0')}`, type: 'phone', priority: 1 }] }
  })

async function api(base: string, method: string, path: string, body?: unknown) {
  const res = await fetch(base + path, {
    method,
    headers: { apikey: KEY, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  })
  return { status: res.status, json: (await res.json()) as any }
}

interface Row {
  store: string
  /** False if the hard stop cut the run short: the figures then cover what finished. */
  complete: boolean
  requests: number
  contactsAcknowledged: number
  contactsSucceeded: number
  ackSeconds: number
  ackContactsPerSecond: number
  endToEndSeconds: number
  endToEndContactsPerSecond: number
  ackLatencyP50Ms: number
  ackLatencyP99Ms: number
}

async function benchService(store: string, mongoUrl?: string): Promise<Row> {
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    API_KEYS: `${KEY}=bench:dialer`,
    LOG_LEVEL: 'silent',
    DATA_DIR: `/tmp/switchboard-bench-ingest-${randomUUID()}`,
    DIALER_MAX_ACTIVE_CONTACTS: '100000000',
    ...(mongoUrl ? { MONGO_URL: mongoUrl } : {}),
  })
  const service: RunningService = await startService(config, { logger: createLogger('silent') })
  const base = `http://127.0.0.1:${service.port}`
  try {
    const batch = await api(base, 'POST', '/dialer/v1/batches', { name: `ingest ${store}`, channel: 'phone', duplicateStrategy: 'merge' })
    if (batch.status !== 201) throw new Error(`batch creation: ${batch.status} ${JSON.stringify(batch.json)}`)
    const path = `/dialer/v1/batches/${batch.json.batchId}/contacts`
    const bodies = Array.from({ length: REQUESTS }, (_, i) => JSON.stringify({ contacts: contacts(i) })) // built before timing
    const operations: string[] = []
    const latencies: number[] = []

    const t0 = performance.now()
    let lastAck = t0
    let pushing = true
    // Polls acknowledged operations in order (they finish roughly in order), one GET per tick.
    const poller = (async () => {
      let done = 0
      while ((pushing || done < operations.length) && !pastDeadline()) {
        if (done >= operations.length) { await sleep(POLL_MS); continue }
        const op = await api(base, 'GET', `/dialer/v1/batches/operations/${operations[done]}`)
        if (op.status !== 200) throw new Error(`operation read: ${op.status} ${JSON.stringify(op.json)}`)
        if (op.json.status === 'succeeded') done++
        else if (['pending', 'running'].includes(op.json.status)) await sleep(POLL_MS)
        else throw new Error(`operation ${operations[done]} ended ${op.json.status}: ${JSON.stringify(op.json)}`)
      }
      return { at: performance.now(), done }
    })()
    poller.catch(() => undefined) // awaited below; this only keeps an early push failure from leaving it unhandled
    try {
      await pool(REQUESTS, CONCURRENCY, async i => {
        const t = performance.now()
        const res = await fetch(base + path, { method: 'POST', headers: { apikey: KEY, 'content-type': 'application/json' }, body: bodies[i] })
        const json = (await res.json()) as any
        if (res.status !== 202) throw new Error(`load refused: ${res.status} ${JSON.stringify(json)}`)
        lastAck = performance.now()
        latencies.push(lastAck - t)
        operations.push(json.operationId)
      })
    } finally {
      pushing = false
    }
    const end = await poller

    const acked = operations.length * PER_REQUEST
    const succeeded = end.done * PER_REQUEST
    const ackSeconds = (lastAck - t0) / 1000
    const endToEndSeconds = (end.at - t0) / 1000
    return {
      store,
      complete: end.done === REQUESTS,
      requests: REQUESTS,
      contactsAcknowledged: acked,
      contactsSucceeded: succeeded,
      ackSeconds: round(ackSeconds),
      ackContactsPerSecond: Math.round(acked / ackSeconds),
      endToEndSeconds: round(endToEndSeconds),
      endToEndContactsPerSecond: Math.round(succeeded / endToEndSeconds),
      ackLatencyP50Ms: round(quantile(latencies, 0.5)),
      ackLatencyP99Ms: round(quantile(latencies, 0.99)),
    }
  } finally {
    await service.close()
  }
}

/** The bare driver: the same documents (ContactDoc shape) by insertMany, 1000 per call. */
async function benchBare(mongoUrl: string) {
  const client = await new MongoClient(mongoUrl).connect()
  try {
    const collection = client.db().collection<ContactDoc>(COLLECTIONS.contacts)
    await collection.createIndexes(INDEXES[COLLECTIONS.contacts]!.map(({ name, key, unique }) => ({ name, key, ...(unique ? { unique } : {}) })))
    const batchId = randomUUID()
    const docs = Array.from({ length: REQUESTS }, (_, i) => {
      const at = new Date()
      return contacts(i).map((c): ContactDoc => ({
        _id: randomUUID(),
        accountId: 'bench',
        batchId,
        identifier: c.identifier,
        identifierGenerated: false,
        name: c.name,
        addresses: c.addresses as ContactDoc['addresses'],
        scheduledAt: null,
        contactPriority: null,
        priorityRank: NO_PRIORITY_RANK,
        customFields: {},
        state: 'pending',
        nextAttemptAt: at,
        attempts: 0,
        addressAttempts: {},
        createdAt: at,
        updatedAt: at,
      }))
    })
    let written = 0
    const t0 = performance.now()
    await pool(REQUESTS, CONCURRENCY, async i => {
      await collection.insertMany(docs[i]!, { ordered: true })
      written += PER_REQUEST
    })
    const seconds = (performance.now() - t0) / 1000
    await client.db().dropDatabase().catch(() => undefined)
    return { contacts: written, seconds: round(seconds), contactsPerSecond: Math.round(written / seconds) }
  } finally {
    await client.close()
  }
}

function withDatabase(url: string, name: string) {
  const parsed = new URL(url)
  parsed.pathname = `/${name}_${randomUUID().replace(/-/g, '').slice(0, 12)}`
  return parsed.toString()
}

let server: MongoTestServer | undefined
// Last resort if something hangs past the hard stop: stop the wire server and leave.
const watchdog = setTimeout(async () => {
  console.error('hard stop: giving up')
  await server?.stop()
  process.exit(1)
}, HARD_STOP_MS + 20_000)
watchdog.unref()

const rows: Row[] = []
let bare!: Awaited<ReturnType<typeof benchBare>>
try {
  server = await startMongoTestServer()
  console.log(`mongo: ${process.env.MONGO_URL ? 'MONGO_URL' : 'wire-protocol test server (mockupdb + mongomock)'}; ${REQUESTS} x ${PER_REQUEST} contacts, ${CONCURRENCY} in flight`)
  bare = await benchBare(withDatabase(server.url, 'bench_ingest_bare'))
  console.log(`mongo bare insertMany: ${bare.contactsPerSecond} contacts/s (${bare.seconds} s)`)
  rows.push(await benchService('mongo', withDatabase(server.url, 'bench_ingest')))
  console.log(`mongo service: done at ${round((Date.now() - started) / 1000)} s`)
} finally {
  await server?.stop()
}
if (process.env.INGEST_SKIP_MEMORY !== '1' && !pastDeadline()) rows.push(await benchService('memory'))
clearTimeout(watchdog)

const mongoRow = rows.find(r => r.store === 'mongo')!
const ratios = {
  endToEndOverBare: Number((mongoRow.endToEndContactsPerSecond / bare.contactsPerSecond).toPrecision(2)),
  ackOverBare: Number((mongoRow.ackContactsPerSecond / bare.contactsPerSecond).toPrecision(2)),
}
const table = [
  '| store | contacts | ack contacts/s | end-to-end contacts/s | ack p50 ms | ack p99 ms | bare insertMany contacts/s | end-to-end / bare | ack / bare |',
  '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ...rows.map(r => {
    const b = r.store === 'mongo'
    return `| ${r.store}${r.complete ? '' : ' (cut short at the hard stop)'} | ${r.contactsSucceeded} | ${r.ackContactsPerSecond} | ${r.endToEndContactsPerSecond} | ${r.ackLatencyP50Ms} | ${r.ackLatencyP99Ms} | ${b ? bare.contactsPerSecond : '-'} | ${b ? ratios.endToEndOverBare : '-'} | ${b ? ratios.ackOverBare : '-'} |`
  }),
].join('\n')
console.log('\n' + table + '\n')

writeResults(import.meta.url, started, {
  ...runHeader(started),
  parameters: {
    requests: REQUESTS,
    contactsPerRequest: PER_REQUEST,
    concurrency: CONCURRENCY,
    pollMs: POLL_MS,
    mongo: process.env.MONGO_URL ? 'MONGO_URL' : 'wire-protocol test server (mockupdb + mongomock)',
    duplicateStrategy: 'merge',
  },
  bare,
  ratios,
  rows,
})
