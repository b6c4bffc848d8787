// The dialer scaled out over NATS with real processes: one gateway (ROLE=gateway) and two
// workers (ROLE=worker) started from main.ts, sharing one MongoDB database (the wire-protocol
// test server) and one real nats-server. Loads go in through the gateway; one worker is killed
// with SIGKILL while chunks are in flight; every operation must still end `succeeded` with exact
// counters, and the batch must hold exactly the contacts sent (nothing lost, nothing doubled).
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { NatsBus } from '../../platform/bus/index.js'
import { streamName } from '../../platform/bus/nats-bus.js'
import { LOAD_QUEUE } from '../../dialer/loads.js'
import { createLogger } from '../../platform/logger.js'
import { API_KEYS, call, mongoUrlFor } from '../support/harness.js'
import { contact, createBatch } from '../support/dialer.js'
import { startNatsServer } from '../support/nats-server.js'
import { startProcess, waitHealthy, type Proc } from '../support/processes.js'

const REQUESTS = 20
const PER_REQUEST = 500
const CHUNK_SIZE = 100
const CONCURRENCY = 2
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))


async function chunksProcessed(proc: Proc): Promise<number> {
  const text = await (await fetch(`${proc.metricsBase}/metrics`)).text()
  const match = /switchboard_dialer_chunks_processed_total\{outcome="ok"\} (\d+)/.exec(text)
  return match ? Number(match[1]) : 0
}

t.test('loads through a gateway, applied by two worker processes, one killed -9 mid-flight', async t => {
  const started = Date.now()
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const dataDir = join(tmpdir(), `sb-workers-${randomUUID()}`)
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const env = {
    MONGO_URL: mongoUrl,
    NATS_URL: nats.url,
    NATS_ACK_WAIT_MS: '3000', // a dead worker's chunk comes back after 3 s
    API_KEYS,
    UPLOAD_SIGNING_SECRET: 'test-signing-secret-0123456789abcdef',
    DATA_DIR: dataDir,
    DIALER_CHUNK_SIZE: String(CHUNK_SIZE),
    DIALER_WORKER_CONCURRENCY: String(CONCURRENCY),
    LOG_LEVEL: 'warn',
  }
  const [gateway, worker1, worker2] = await Promise.all([
    startProcess(t, 'gateway', { ...env, ROLE: 'gateway' }),
    startProcess(t, 'worker-1', { ...env, ROLE: 'worker' }),
    startProcess(t, 'worker-2', { ...env, ROLE: 'worker' }),
  ])
  const [gh, w1h] = await Promise.all([waitHealthy(gateway), waitHealthy(worker1), waitHealthy(worker2)])
  t.match(gh, { role: 'gateway', bus: 'nats', store: 'mongo', dialerWorkers: false })
  t.match(w1h, { role: 'worker', bus: 'nats', modules: ['dialer'], dialerWorkers: true })
  t.equal((await call(`http://127.0.0.1:${worker1.port}`, 'GET', '/dialer/v1/batches')).status, 404, 'a worker serves no API routes')
  t.equal((await fetch(`${worker1.metricsBase}/metrics`)).status, 200, 'a worker serves /metrics (on its metrics listener)')
  t.comment(`processes ready after ${Date.now() - started} ms`)

  const base = `http://127.0.0.1:${gateway.port}`
  const batchId = await createBatch(base)
  const operationIds = await Promise.all(
    Array.from({ length: REQUESTS }, async (_, r) => {
      const contacts = Array.from({ length: PER_REQUEST }, (_, i) => contact(r * PER_REQUEST + i))
      const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: { contacts } })
      if (res.status !== 202) throw new Error(`load refused: ${res.status} ${res.text}`)
      return res.json.operationId as string
    }),
  )
  t.comment(`${REQUESTS} loads accepted after ${Date.now() - started} ms`)

  // Kill worker 1 once it is demonstrably working on the queue (it has finished chunks, so it
  // holds more in flight with the backlog still there).
  const deadline = Date.now() + 30_000
  while ((await chunksProcessed(worker1)) < 2) {
    if (Date.now() > deadline) throw new Error(`worker-1 processed no chunks:\n${worker1.output()}\n${worker2.output()}`)
    await sleep(25)
  }
  const probe = await NatsBus.connect({ servers: nats.url }, createLogger('silent'))
  t.teardown(() => probe.close())
  const stream = streamName('SB', LOAD_QUEUE)
  const before = await probe.jsm.consumers.info(stream, 'workers')
  worker1.child.kill('SIGKILL')
  await worker1.exited
  t.comment(`worker-1 killed after ${Date.now() - started} ms; chunks unacked at the kill: ${before.num_ack_pending}, waiting: ${before.num_pending}`)
  t.ok(before.num_pending + before.num_ack_pending > 0, 'work was still queued or in flight when the worker died')

  // Every operation ends succeeded, with exact counters.
  const finalDeadline = Date.now() + 60_000
  const results = new Map<string, any>()
  while (results.size < operationIds.length) {
    if (Date.now() > finalDeadline) throw new Error(`operations unfinished: ${operationIds.filter(id => !results.has(id)).join(', ')}\n${worker2.output()}`)
    for (const id of operationIds) {
      if (results.has(id)) continue
      const res = await call(base, 'GET', `/dialer/v1/batches/operations/${id}`)
      if (res.status === 200 && !['pending', 'running'].includes(res.json.status)) results.set(id, res.json)
    }
    if (results.size < operationIds.length) await sleep(200)
  }
  t.comment(`all operations finished after ${Date.now() - started} ms`)
  const chunksPerLoad = PER_REQUEST / CHUNK_SIZE
  for (const id of operationIds) {
    t.match(
      results.get(id),
      {
        status: 'succeeded',
        requestedCount: PER_REQUEST,
        insertedCount: PER_REQUEST,
        updatedCount: 0,
        duplicateCount: 0,
        invalidCount: 0,
        recontactedCount: 0,
        totalChunks: chunksPerLoad,
        chunksCompleted: chunksPerLoad,
        errors: [],
      },
      `operation ${id} exact`,
    )
  }

  const total = REQUESTS * PER_REQUEST
  const listed = await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts?limit=1`)
  t.equal(listed.json.total, total, 'the batch holds exactly the contacts sent')
  const batch = await call(base, 'GET', `/dialer/v1/batches/${batchId}`)
  t.equal(batch.json.totalContacts, total, 'batch.totalContacts is exact')
  const after = await probe.jsm.streams.info(stream)
  t.equal(after.state.messages, 0, 'every chunk was acked: the work-queue stream is empty')
  // Deliveries beyond one per message are redeliveries: the chunks the killed worker held.
  const consumer = await probe.jsm.consumers.info(stream, 'workers')
  const redelivered = consumer.delivered.consumer_seq - consumer.delivered.stream_seq
  t.comment(`chunks: ${consumer.delivered.stream_seq}, deliveries: ${consumer.delivered.consumer_seq}`)
  t.equal(consumer.delivered.stream_seq, REQUESTS * chunksPerLoad, 'every chunk was published once')
  t.ok(redelivered >= 1, 'the chunks held by the killed worker were redelivered to the survivor')
  t.ok(worker2.child.exitCode === null, 'the surviving worker is still running')
  t.comment(`done in ${Date.now() - started} ms`)
})
