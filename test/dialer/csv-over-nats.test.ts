// CSV import scaled out without a shared disk: a gateway (ROLE=gateway) and a worker (ROLE=worker)
// started from main.ts, each with its own DATA_DIR, sharing one MongoDB database (the
// wire-protocol test server) and one real nats-server. The CSV is uploaded through the gateway,
// which also reads its header when the batch is created; the worker imports it. The file lives in
// the JetStream object store (`sb_uploads`), never in either DATA_DIR, and is gone once imported.
// Then, in process: NATS away while a file is uploaded or a batch reads its header is a 503.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { existsSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { connect } from '@nats-io/transport-node'
import { NatsBlobStore } from '../../platform/blobs-nats.js'
import { API_KEYS, call, eventually, mongoUrlFor, startTestService } from '../support/harness.js'
import { waitForOperation } from '../support/dialer.js'
import { startNatsServer } from '../support/nats-server.js'
import { startProcess, waitHealthy } from '../support/processes.js'

const ROWS = 10_000
const INVALID_EVERY = 1000 // rows 1000, 2000, ... have no name

function csv() {
  const lines = ['id,full_name,mobile,plan']
  for (let i = 1; i <= ROWS; i++) lines.push(`r${i},${i % INVALID_EVERY === 0 ? '' : `Contact ${i}`},${34600000000 + i},p${i % 3}`)
  return lines.join('\n') + '\n'
}

t.test('a CSV uploaded through a gateway is imported by a worker with another DATA_DIR', async t => {
  const started = Date.now()
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const dataDirs = { gateway: join(tmpdir(), `sb-gw-${randomUUID()}`), worker: join(tmpdir(), `sb-wk-${randomUUID()}`) }
  t.teardown(() => Object.values(dataDirs).forEach(dir => rmSync(dir, { recursive: true, force: true })))
  const env = {
    MONGO_URL: mongoUrl,
    NATS_URL: nats.url,
    API_KEYS,
    UPLOAD_SIGNING_SECRET: 'test-signing-secret-0123456789abcdef',
    DIALER_CHUNK_SIZE: '1000',
    LOG_LEVEL: 'warn',
  }
  const [gateway, worker] = await Promise.all([
    startProcess(t, 'gateway', { ...env, ROLE: 'gateway', DATA_DIR: dataDirs.gateway }),
    startProcess(t, 'worker', { ...env, ROLE: 'worker', DATA_DIR: dataDirs.worker }),
  ])
  await Promise.all([waitHealthy(gateway), waitHealthy(worker)])
  t.comment(`processes ready after ${Date.now() - started} ms`)
  const outputs = () => `--- gateway\n${gateway.output().slice(-4000)}\n--- worker\n${worker.output().slice(-4000)}`

  const nc = await connect({ servers: nats.url })
  t.teardown(() => nc.close())
  const uploads = new NatsBlobStore(nc)

  const base = `http://127.0.0.1:${gateway.port}`
  const url = await call(base, 'POST', '/dialer/v1/batches/upload-url', { body: { fileName: 'contacts.csv', fileType: 'text/csv' } })
  t.equal(url.status, 201)
  const { uploadUrl, tempCsvKey } = url.json
  const body = csv()
  const put = await fetch(uploadUrl, { method: 'PUT', headers: { 'content-type': 'text/csv' }, body })
  t.equal(put.status, 200, 'uploaded through the gateway')
  t.same(await put.json(), { tempCsvKey, size: Buffer.byteLength(body) })
  t.equal(await uploads.size(tempCsvKey), Buffer.byteLength(body), 'the file is in the object store')
  t.notOk(existsSync(join(dataDirs.gateway, 'uploads')), 'not in the gateway\'s DATA_DIR')

  const create = await call(base, 'POST', '/dialer/v1/batches', {
    body: { name: 'From CSV', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey, columnMapping: { identifier: 'id', name: 'full_name', phone: ['mobile'], customFields: ['plan'] } },
  })
  t.equal(create.status, 201, 'batch created (the gateway read the header from the object store)', { body: create.text })
  const unknown = await call(base, 'POST', '/dialer/v1/batches', {
    body: { name: 'X', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey, columnMapping: { name: 'nope', phone: ['mobile'] } },
  })
  t.equal(unknown.status, 409, 'the upload is consumed once')

  const op = await waitForOperation(base, create.json.importOperationId, undefined, 120_000).catch(error => {
    throw new Error(`${error.message}\n${outputs()}`)
  })
  const invalid = ROWS / INVALID_EVERY
  t.match(op, { status: 'partial', requestedCount: ROWS, insertedCount: ROWS - invalid, invalidCount: invalid, totalChunks: ROWS / 1000 }, 'the worker imported every row')
  const batch = await call(base, 'GET', `/dialer/v1/batches/${create.json.batchId}`)
  t.match(batch.json, { uploadStatus: 'completed', uploadProgress: 100, totalContacts: ROWS - invalid, importErrorCount: invalid })
  const errors = await call(base, 'GET', `/dialer/v1/batches/${create.json.batchId}/import-errors?limit=100`)
  t.same(errors.json.data.map((e: any) => e.row), Array.from({ length: invalid }, (_, k) => (k + 1) * INVALID_EVERY))

  t.equal(await uploads.size(tempCsvKey), null, 'the imported file is removed from the object store')
  t.same(await uploads.list(10), [], 'nothing left in the bucket')
  t.notOk(existsSync(join(dataDirs.worker, 'uploads')), 'the worker\'s DATA_DIR never held it')
  t.ok(gateway.alive() && worker.alive(), 'both processes still running')
  t.comment(`done in ${Date.now() - started} ms`)
})

t.test('NATS away: the upload and the batch creation that reads the header answer 503', async t => {
  const nats = await startNatsServer(t)
  const { base } = await startTestService(t, { env: { NATS_URL: nats.url, UPLOAD_SIGNING_SECRET: 'test-signing-secret-0123456789abcdef' } })
  const urls = await Promise.all([0, 1].map(() => call(base, 'POST', '/dialer/v1/batches/upload-url', { body: { fileName: 'c.csv', fileType: 'text/csv' } })))
  const put = (url: string) => fetch(url, { method: 'PUT', headers: { 'content-type': 'text/csv' }, body: 'id,full_name,mobile\nr1,Ana,34600000001\n' })
  t.equal((await put(urls[0]!.json.uploadUrl)).status, 200, 'uploaded while NATS is there')

  const back = nats.restart({ downMs: 9000 }) // longer than a JetStream request's 5 s timeout
  await new Promise(r => setTimeout(r, 300))
  const [upload, create] = await Promise.all([
    put(urls[1]!.json.uploadUrl),
    call(base, 'POST', '/dialer/v1/batches', {
      body: { name: 'X', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey: urls[0]!.json.tempCsvKey, columnMapping: { name: 'full_name', phone: ['mobile'] } },
    }),
  ])
  t.equal(upload.status, 503, 'the upload')
  t.match(await upload.json(), { code: 'UPLOAD_STORAGE_UNAVAILABLE' })
  t.equal(create.status, 503, 'the batch creation (its header cannot be read)')
  t.match(create.json, { code: 'UPLOAD_STORAGE_UNAVAILABLE' })
  await back
  // Once the client has reconnected, the same request goes through.
  const again = await eventually(
    () => call(base, 'POST', '/dialer/v1/batches', {
      body: { name: 'X', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey: urls[0]!.json.tempCsvKey, columnMapping: { name: 'full_name', phone: ['mobile'] } },
    }),
    res => res.status !== 503,
  )
  t.equal(again.status, 201, 'with NATS back the same request goes through', { body: again.text })
})
