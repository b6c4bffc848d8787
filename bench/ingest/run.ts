// Ingest benchmark: 1000-contact requests (POST /dialer/v1/batches/{id}/contacts) pushed over
// real HTTP (loopback) with a small fixed concurrency, as fast as the service acknowledges them.
//
// Figures, per store:
//   - ack contacts/s:        contacts / (first request sent -> last 202 received);
//   - end-to-end contacts/s: contacts / (first request sent -> every operation reads `succeeded`,
//                            polled every POLL_MS);
//   - ack latency p50/p99 per request.
// Rows:
//   - embedded: the default store (LMDB under a fresh DATA_DIR, durable work queue), 100 x 1000
//     contacts, 4 in flight. Baseline in the same run: the bare work of the same loads in this
//     process without the service: JSON.parse of the same bodies, the route's own validation
//     (parseContactsBody) and an upsert of each ContactDoc into a Map by (batchId, identifier).
//     Ratios: service / baseline, for ack and for end-to-end. A second baseline, the store's
//     floor: the same bare work written with lmdb-js directly (benchLmdbFloor), in transaction
//     callbacks as the service writes and with lmdb-js's asynchronous puts; end-to-end / floor.
//   - mongo (INGEST_MONGO=1 or MONGO_URL): the same against the MongoDB wire-protocol test server
//     (test/support/mongo-wire-server.py: mockupdb + mongomock, pure Python, every query a scan),
//     beside a bare `mongodb` driver insertMany loop of the same documents on the same server.
//     Those absolute figures say nothing about a real mongod (see the ratio only); set MONGO_URL
//     to bench one. Off by default: 30 requests take minutes there.
// Client, service and (Python) server share the same machine and cores.
//
//   node --import @tapjs/typescript/import bench/ingest/run.ts     (or: make bench BENCH=ingest)
// Env: INGEST_REQUESTS (100 embedded; 30 on the test server), INGEST_CONCURRENCY (4),
// INGEST_MONGO=1, MONGO_URL.
// Hard stop: 4 minutes from start; a row cut short says so and covers what finished.
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { createServer as createNetServer } from 'node:net'
import { fileURLToPath } from 'node:url'
import { rmSync } from 'node:fs'
import { type Database, type Key, open as openLmdb } from 'lmdb'
import { MongoClient } from 'mongodb'
import { v7 as orderedId } from 'uuid'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { startService, type RunningService } from '../../service.js'
import { COLLECTIONS, INDEXES, NO_PRIORITY_RANK, type ContactDoc } from '../../dialer/collections.js'
import { parseContactsBody } from '../../dialer/contact-input.js'
import { startMongoTestServer, type MongoTestServer } from '../../test/support/mongo-server.js'
import { runHeader, writeResults } from '../support.js'

const KEY = 'bench-ingest-key-00000000'
const PER_REQUEST = 1000
const WITH_MONGO = process.env.INGEST_MONGO === '1' || !!process.env.MONGO_URL
const REQUESTS = Number(process.env.INGEST_REQUESTS ?? 100)
const MONGO_REQUESTS = Number(process.env.INGEST_REQUESTS ?? (process.env.MONGO_URL ? 50 : 30))
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

/** The service's settings for a run (INGEST_ENV='K=V,K=V' adds settings to try, e.g. DIALER_WORKER_CONCURRENCY=8). */
const serviceEnv = (mongoUrl?: string): Record<string, string> => ({
  HOST: '127.0.0.1',
  API_KEYS: `${KEY}=bench:dialer`,
  LOG_LEVEL: 'silent',
  DATA_DIR: `/tmp/switchboard-bench-ingest-${randomUUID()}`,
  DIALER_MAX_ACTIVE_CONTACTS: '100000000',
  ...Object.fromEntries((process.env.INGEST_ENV ?? '').split(',').filter(Boolean).map(kv => kv.split('=') as [string, string])),
  ...(mongoUrl ? { MONGO_URL: mongoUrl } : {}),
})

/** The service in this process (the client shares its event loop and cores). */
async function inProcess(mongoUrl?: string): Promise<{ base: string; stop(): Promise<void> }> {
  const config = loadConfig({ ...serviceEnv(mongoUrl), PORT: '0' })
  const service: RunningService = await startService(config, { logger: createLogger('silent') })
  return {
    base: `http://127.0.0.1:${service.port}`,
    stop: async () => {
      await service.close()
      rmSync(config.dataDir, { recursive: true, force: true })
    },
  }
}

/** The built service (`make run`'s dist/main.js) in a process of its own, as a client meets it. */
async function ownProcess(): Promise<{ base: string; stop(): Promise<void> }> {
  const [port, metricsPort] = await freePorts(2)
  const env = serviceEnv()
  const child = spawn(process.execPath, [fileURLToPath(new URL('../../dist/main.js', import.meta.url))], {
    env: { ...process.env, ...env, PORT: String(port), METRICS_PORT: String(metricsPort) },
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  const base = `http://127.0.0.1:${port}`
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`dist/main.js exited (${child.exitCode}): run make build first`)
    const ok = await fetch(`${base}/healthz`).then(r => r.ok, () => false)
    if (ok) break
    if (i > 300) throw new Error('dist/main.js did not become healthy')
    await sleep(100)
  }
  return {
    base,
    stop: async () => {
      child.kill('SIGTERM')
      await new Promise(resolve => child.once('exit', resolve))
      rmSync(env.DATA_DIR!, { recursive: true, force: true })
    },
  }
}

/** Free TCP ports on loopback (bound, read, released). */
async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(Array.from({ length: n }, () => new Promise<import('node:net').Server>(resolve => {
    const server = createNetServer()
    server.listen(0, '127.0.0.1', () => resolve(server))
  })))
  const ports = servers.map(s => (s.address() as import('node:net').AddressInfo).port)
  await Promise.all(servers.map(s => new Promise(resolve => s.close(resolve))))
  return ports
}

async function benchService(store: string, REQUESTS: number, mongoUrl?: string, start: () => Promise<{ base: string; stop(): Promise<void> }> = () => inProcess(mongoUrl)): Promise<Row> {
  const service = await start()
  const base = service.base
  try {
    const batch = await api(base, 'POST', '/dialer/v1/batches', { name: `ingest ${store}`, channel: 'phone', duplicateStrategy: 'merge' })
    if (batch.status !== 201) throw new Error(`batch creation: ${batch.status} ${JSON.stringify(batch.json)}`)
    const path = `/dialer/v1/batches/${batch.json.batchId}/contacts`
    const bodies = Array.from({ length: REQUESTS }, (_, i) => JSON.stringify({ contacts: contacts(i) })) // built before timing
    // One untimed load into another batch first: under the TypeScript loader the validation and
    // apply threads compile their sources on first use (seconds), which a built service does not.
    const warm = await api(base, 'POST', '/dialer/v1/batches', { name: 'warm-up', channel: 'phone', duplicateStrategy: 'merge' })
    const warmLoad = await api(base, 'POST', `/dialer/v1/batches/${warm.json.batchId}/contacts`, { contacts: contacts(REQUESTS + 1) })
    while (['pending', 'running'].includes((await api(base, 'GET', `/dialer/v1/batches/operations/${warmLoad.json.operationId}`)).json.status)) await sleep(POLL_MS)
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
    await service.stop()
  }
}

/** The bare driver: the same documents (ContactDoc shape) by insertMany, 1000 per call. */
async function benchBare(mongoUrl: string, REQUESTS: number) {
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

/**
 * The baseline: the same loads' bare work in this process, no service, no I/O: parse each body,
 * validate it as the route does, upsert each contact (ContactDoc) into a Map by (batchId,
 * identifier). One thread, one request after the other.
 */
function benchBaseline(requests: number) {
  const bodies = Array.from({ length: requests }, (_, i) => JSON.stringify({ contacts: contacts(i) }))
  const byKey = new Map<string, ContactDoc>()
  const batchId = randomUUID()
  const t0 = performance.now()
  for (const body of bodies) {
    const now = Date.now()
    for (const c of parseContactsBody(JSON.parse(body), now)) {
      const identifier = c.identifier ?? randomUUID()
      const key = `${batchId}\u0000${identifier}`
      const at = new Date(now)
      const existing = byKey.get(key)
      if (existing) Object.assign(existing, { name: c.name, addresses: c.addresses, updatedAt: at })
      else byKey.set(key, { ...contactDoc(batchId, c, at), identifier })
    }
  }
  const seconds = (performance.now() - t0) / 1000
  return { contacts: byKey.size, seconds: Math.round(seconds * 1000) / 1000, contactsPerSecond: Math.round(byKey.size / seconds) }
}

/** A new contact's document, as the service stores it (time-ordered ids, as the service's). */
function contactDoc(batchId: string, c: ReturnType<typeof parseContactsBody>[number], at: Date): ContactDoc {
  return {
    _id: orderedId(), accountId: 'bench', batchId, identifier: c.identifier ?? randomUUID(), identifierGenerated: c.identifier === undefined, name: c.name,
    addresses: c.addresses as ContactDoc['addresses'], scheduledAt: null, contactPriority: null, priorityRank: NO_PRIORITY_RANK,
    customFields: c.customFields ?? {}, state: 'pending', nextAttemptAt: at, attempts: 0, addressAttempts: {}, createdAt: at, updatedAt: at,
  }
}

/**
 * The second baseline, the store's floor: the same bare work (parse, validate, build each
 * ContactDoc) written with lmdb-js directly, in this process: each document (MessagePack) and
 * one entry per index of the contacts that holds it (INDEXES, partial filters applied; the
 * counted ones left out: their numbers are a few puts per transaction), after a look for the
 * identifier in the unique index, one transaction per request, 4 in flight. No HTTP, no queue,
 * no plan, no operation. What any store that keeps these indexes on this disk has to do.
 *
 * Two ways of writing, as lmdb-js offers them: 'transaction' (puts inside a transaction
 * callback, run on this thread while lmdb-js holds the write lock: how the service writes) and
 * 'async-puts' (each put encoded here and queued; lmdb-js's own write thread applies the queue
 * in one transaction and commits). The second does its unique look outside the write, so it
 * could not refuse a duplicate sent by two requests at once: a floor, not a design.
 */
async function benchLmdbFloor(requests: number, mode: 'transaction' | 'async-puts') {
  const dir = `/tmp/switchboard-bench-ingest-floor-${randomUUID()}`
  const env = openLmdb({ path: dir, mapSize: 8 * 1024 ** 3 })
  try {
    const docs = env.openDB<ContactDoc, string>({ name: 'docs', sharedStructuresKey: Symbol.for('structures') })
    const specs = INDEXES[COLLECTIONS.contacts]!.filter(spec => !spec.counted)
    const indexes = specs.map(spec => ({
      db: env.openDB<Buffer, Key[]>({ name: spec.name, encoding: 'binary' }),
      fields: Object.keys(spec.key),
      unique: !!spec.unique,
      covers: (doc: Record<string, unknown>) => Object.entries(spec.partialFilterExpression ?? {}).every(([k, v]) => doc[k] === v),
    }))
    const keyPart = (v: unknown): Key => (v instanceof Date ? v.getTime() : (v as Key))
    const bodies = Array.from({ length: requests }, (_, i) => JSON.stringify({ contacts: contacts(i) }))
    const batchId = randomUUID()
    const empty = Buffer.alloc(0)
    let written = 0
    let entriesPerContact = 0
    const t0 = performance.now()
    await pool(requests, CONCURRENCY, async i => {
      const now = Date.now()
      const batch = parseContactsBody(JSON.parse(bodies[i]!), now).map(c => contactDoc(batchId, c, new Date(now)))
      const write = (put: (db: Database<unknown, Key>, key: Key, value: unknown) => unknown) => {
        let last: unknown
        for (const doc of batch) {
          const keys = indexes.filter(index => index.covers(doc as never)).map(index => ({ index, key: index.fields.map(f => keyPart((doc as never)[f])) }))
          const taken = keys.some(({ index, key }) => index.unique && [...index.db.getKeys({ start: key, end: [...key, '\uffff'], limit: 1 })].length > 0)
          if (taken) continue
          put(docs as Database<unknown, Key>, doc._id, doc)
          for (const { index, key } of keys) last = put(index.db as Database<unknown, Key>, [...key, doc._id], empty)
          entriesPerContact = keys.length
          written++
        }
        return last
      }
      if (mode === 'transaction') await env.transaction(() => write((db, key, value) => db.putSync(key, value)))
      else await write((db, key, value) => db.put(key, value))
    })
    const seconds = (performance.now() - t0) / 1000
    return { contacts: written, seconds: Math.round(seconds * 1000) / 1000, contactsPerSecond: Math.round(written / seconds), indexEntriesPerContact: entriesPerContact }
  } finally {
    await env.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

let server: MongoTestServer | undefined
// Last resort if something hangs past the hard stop: stop the wire server and leave.
const watchdog = setTimeout(async () => {
  console.error('hard stop: giving up')
  await server?.stop()
  process.exit(1)
}, HARD_STOP_MS + 20_000)
watchdog.unref()

console.log(`embedded: ${REQUESTS} x ${PER_REQUEST} contacts, ${CONCURRENCY} in flight`)
const baseline = benchBaseline(REQUESTS)
console.log(`baseline (parse + validate + upsert in memory): ${baseline.contactsPerSecond} contacts/s (${baseline.seconds} s)`)
const floor = await benchLmdbFloor(REQUESTS, 'transaction')
console.log(`store floor (the same work written to LMDB directly, ${floor.indexEntriesPerContact} index entries per contact): ${floor.contactsPerSecond} contacts/s (${floor.seconds} s)`)
const asyncFloor = await benchLmdbFloor(REQUESTS, 'async-puts')
console.log(`store floor with lmdb-js asynchronous puts (written by its write thread): ${asyncFloor.contactsPerSecond} contacts/s (${asyncFloor.seconds} s)`)
const rows: Row[] = [await benchService('embedded', REQUESTS)]
const embedded = rows[0]!
console.log(`embedded service: ${embedded.endToEndContactsPerSecond} contacts/s end to end, ack p50 ${embedded.ackLatencyP50Ms} ms p99 ${embedded.ackLatencyP99Ms} ms`)
// The same loads against the built service in a process of its own (what a client meets: its
// loop is not shared with the client). INGEST_OWN_PROCESS=0 leaves it out.
if (process.env.INGEST_OWN_PROCESS !== '0') {
  const own = await benchService('embedded, own process (dist/main.js)', REQUESTS, undefined, ownProcess)
  rows.push(own)
  console.log(`embedded service, own process: ${own.endToEndContactsPerSecond} contacts/s end to end (acknowledged ${own.ackContactsPerSecond}/s), ack p50 ${own.ackLatencyP50Ms} ms p99 ${own.ackLatencyP99Ms} ms`)
}
const ratio = (x: number) => Number(x.toPrecision(2))
const embeddedRatios = {
  endToEndOverBaseline: ratio(embedded.endToEndContactsPerSecond / baseline.contactsPerSecond),
  ackOverBaseline: ratio(embedded.ackContactsPerSecond / baseline.contactsPerSecond),
  endToEndOverStoreFloor: ratio(embedded.endToEndContactsPerSecond / floor.contactsPerSecond),
  endToEndOverAsyncPutsFloor: ratio(embedded.endToEndContactsPerSecond / asyncFloor.contactsPerSecond),
}

let bare: Awaited<ReturnType<typeof benchBare>> | undefined
if (WITH_MONGO && !pastDeadline()) {
  try {
    server = await startMongoTestServer()
    console.log(`mongo: ${process.env.MONGO_URL ? 'MONGO_URL' : 'wire-protocol test server (mockupdb + mongomock)'}; ${MONGO_REQUESTS} x ${PER_REQUEST} contacts`)
    bare = await benchBare(withDatabase(server.url, 'bench_ingest_bare'), MONGO_REQUESTS)
    rows.push(await benchService('mongo', MONGO_REQUESTS, withDatabase(server.url, 'bench_ingest')))
  } finally {
    await server?.stop()
  }
}
clearTimeout(watchdog)

const mongoRow = rows.find(r => r.store === 'mongo')
const mongoRatios = mongoRow && bare ? { endToEndOverBare: ratio(mongoRow.endToEndContactsPerSecond / bare.contactsPerSecond), ackOverBare: ratio(mongoRow.ackContactsPerSecond / bare.contactsPerSecond) } : undefined
const table = [
  '| store | contacts | ack contacts/s | end-to-end contacts/s | ack p50 ms | ack p99 ms | baseline contacts/s | end-to-end / baseline | ack / baseline |',
  '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ...rows.map(r => {
    const [base, e2e, ack] = r.store.startsWith('embedded')
      ? [`${baseline.contactsPerSecond} (parse+validate+upsert in memory)`, ratio(r.endToEndContactsPerSecond / baseline.contactsPerSecond), ratio(r.ackContactsPerSecond / baseline.contactsPerSecond)]
      : [`${bare!.contactsPerSecond} (bare insertMany)`, mongoRatios!.endToEndOverBare, mongoRatios!.ackOverBare]
    return `| ${r.store}${r.complete ? '' : ' (cut short at the hard stop)'} | ${r.contactsSucceeded} | ${r.ackContactsPerSecond} | ${r.endToEndContactsPerSecond} | ${r.ackLatencyP50Ms} | ${r.ackLatencyP99Ms} | ${base} | ${e2e} | ${ack} |`
  }),
].join('\n')
console.log('\n' + table + '\n')
console.log(`store floor: ${floor.contactsPerSecond} contacts/s (lmdb-js directly, ${floor.indexEntriesPerContact} index entries per contact); embedded end to end / floor: ${embeddedRatios.endToEndOverStoreFloor}`)
console.log(`store floor with asynchronous puts: ${asyncFloor.contactsPerSecond} contacts/s; embedded end to end / that floor: ${embeddedRatios.endToEndOverAsyncPutsFloor}\n`)

writeResults(import.meta.url, started, {
  ...runHeader(started),
  parameters: {
    requests: REQUESTS,
    contactsPerRequest: PER_REQUEST,
    concurrency: CONCURRENCY,
    pollMs: POLL_MS,
    duplicateStrategy: 'merge',
    mongo: WITH_MONGO ? { requests: MONGO_REQUESTS, server: process.env.MONGO_URL ? 'MONGO_URL' : 'wire-protocol test server (mockupdb + mongomock)' } : 'not run (INGEST_MONGO=1)',
  },
  baseline,
  storeFloor: floor,
  storeFloorAsyncPuts: asyncFloor,
  embeddedRatios,
  ...(bare ? { bare, mongoRatios } : {}),
  rows,
})
