// CSV import: signed upload URL, PUT without a key, batch creation with a column mapping,
// progress on the batch, per-row errors, and the streamed import of a large file.
import t from 'tap'
import { request } from 'node:http'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { waitForOperation } from '../support/dialer.js'

async function uploadUrl(base: string) {
  const res = await call(base, 'POST', '/dialer/v1/batches/upload-url', { body: { fileName: 'contacts.csv', fileType: 'text/csv' } })
  if (res.status !== 201) throw new Error(`upload-url failed: ${res.status} ${res.text}`)
  return res.json as { uploadUrl: string; tempCsvKey: string; expiresAt: string }
}

const put = (url: string, body: string | AsyncIterable<Uint8Array> | ReadableStream, contentType = 'text/csv') =>
  fetch(url, { method: 'PUT', headers: { 'content-type': contentType }, body: body as any, duplex: 'half' } as RequestInit)

const MAPPING = { identifier: 'id', name: 'full_name', phone: ['mobile', 'home'], email: ['mail'], customFields: ['plan'] }

for (const store of STORES) {
  t.test(`CSV import on the ${store} store`, async t => {
    const { base } = await startTestService(t, { store, env: { DIALER_CHUNK_SIZE: '50' } })

    t.test('upload, create the batch, read progress and per-row errors', async t => {
      const { uploadUrl: url, tempCsvKey, expiresAt } = await uploadUrl(base)
      t.ok(Date.parse(expiresAt) - Date.now() > 59 * 60_000, 'valid for an hour')
      const csv = [
        'id,full_name,mobile,home,mail,plan',
        'r1,Ana,34600000001,,ana@example.com,gold',
        'r2,Luis,,34600000002,,silver',
        'r3,,34600000003,,,bronze', // no name
        'r4,Eva,+34600000004,,,gold', // bad phone
        'r5,Sin Direccion,,,,gold', // no address at all
      ].join('\n')
      const upload = await put(url, csv)
      t.equal(upload.status, 200, 'no apikey needed')
      const create = await call(base, 'POST', '/dialer/v1/batches', {
        body: { name: 'From CSV', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey, columnMapping: MAPPING },
      })
      t.equal(create.status, 201)
      t.match(create.json, { source: 'csv', tempCsvKey, status: 'created' })
      const op = await waitForOperation(base, create.json.importOperationId)
      t.match(op, { kind: 'contacts.load', type: 'contacts.import', status: 'partial', requestedCount: 5, insertedCount: 2, invalidCount: 3 })
      const batch = await call(base, 'GET', `/dialer/v1/batches/${create.json.batchId}`)
      t.match(batch.json, { uploadStatus: 'completed', uploadProgress: 100, totalContacts: 2, importErrorCount: 3 })
      const errors = await call(base, 'GET', `/dialer/v1/batches/${create.json.batchId}/import-errors`)
      t.same(errors.json.data.map((e: any) => [e.row, e.field, e.code]), [
        [3, 'name', 'REQUIRED'],
        [4, 'addresses[0].address', 'INVALID_PHONE_FORMAT'],
        [5, 'addresses', 'REQUIRED'],
      ])
      const contacts = await call(base, 'GET', `/dialer/v1/batches/${create.json.batchId}/contacts`)
      const ana = contacts.json.data.find((c: any) => c.identifier === 'r1')
      t.same(ana.addresses, [
        { address: '34600000001', type: 'phone', priority: 1 },
        { address: 'ana@example.com', type: 'email', priority: 2 },
      ])
      t.same(ana.customFields, { plan: 'gold' })

      const reuse = await call(base, 'POST', '/dialer/v1/batches', {
        body: { name: 'Again', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey, columnMapping: MAPPING },
      })
      t.equal(reuse.status, 409, 'an upload is imported once')
    })

    t.test('the signed URL is checked', async t => {
      const { uploadUrl: url } = await uploadUrl(base)
      const tampered = url.replace(/signature=[^&]+/, 'signature=AAAA')
      t.equal((await put(tampered, 'a,b\n')).status, 403)
      const otherKey = url.replace(/uploads\/[^?]+/, 'uploads/csv_0000')
      t.equal((await put(otherKey, 'a,b\n')).status, 403)
      t.equal((await put(url, 'a,b\n', 'application/json')).status, 415)
    })

    t.test('mapping problems are caught at batch creation', async t => {
      const { uploadUrl: url, tempCsvKey } = await uploadUrl(base)
      const notYet = await call(base, 'POST', '/dialer/v1/batches', {
        body: { name: 'X', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey, columnMapping: MAPPING },
      })
      t.equal(notYet.status, 400)
      t.equal(notYet.json.code, 'UPLOAD_NOT_READY')
      await put(url, 'id,full_name,mobile\n1,A,34600000001\n')
      const missing = await call(base, 'POST', '/dialer/v1/batches', {
        body: { name: 'X', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey, columnMapping: MAPPING },
      })
      t.equal(missing.status, 400)
      t.match(missing.json, { code: 'UNKNOWN_COLUMNS', missing: ['home', 'mail', 'plan'] })
      const noAddress = await call(base, 'POST', '/dialer/v1/batches', {
        body: { name: 'X', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey, columnMapping: { name: 'full_name' } },
      })
      t.equal(noAddress.status, 400, 'at least one address column is required')
      const unknown = await call(base, 'POST', '/dialer/v1/batches', {
        body: { name: 'X', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey: 'csv_nope', columnMapping: MAPPING },
      })
      t.equal(unknown.json.code, 'UPLOAD_NOT_FOUND')
    })
  })
}

/** POST upload-url with the Host and X-Forwarded-Host a client chooses (fetch will not send a Host of our choice). */
function uploadUrlWithHost(port: number, host: string) {
  const body = JSON.stringify({ fileName: 'c.csv', fileType: 'text/csv' })
  return new Promise<{ status: number; json: any }>((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/dialer/v1/batches/upload-url',
        headers: { host, 'x-forwarded-host': host, 'x-forwarded-proto': 'https', apikey: KEYS.acme, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      res => {
        let text = ''
        res.on('data', chunk => (text += chunk))
        res.on('end', () => resolve({ status: res.statusCode!, json: JSON.parse(text) }))
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

t.test('the upload URL points at this service whatever Host the client sends', async t => {
  const { service } = await startTestService(t)
  const res = await uploadUrlWithHost(service.port, 'evil.example')
  t.equal(res.status, 201)
  const url = new URL(res.json.uploadUrl)
  t.equal(url.origin, `http://127.0.0.1:${service.port}`, 'the listener\'s own host and port')
  t.notMatch(res.json.uploadUrl, /evil\.example/)
  t.equal((await put(url.toString(), 'id,full_name,mobile\n1,A,34600000001\n')).status, 200, 'and the URL works as given')

  const behindProxy = await startTestService(t, { env: { PUBLIC_BASE_URL: 'https://switchboard.example.com/' } })
  const proxied = await uploadUrlWithHost(behindProxy.service.port, 'evil.example')
  t.equal(proxied.status, 201)
  t.match(proxied.json.uploadUrl, /^https:\/\/switchboard\.example\.com\/dialer\/v1\/uploads\/csv_/, 'PUBLIC_BASE_URL when set')
})

t.test('a large CSV is streamed through the import', async t => {
  const { base } = await startTestService(t, { env: { DIALER_CHUNK_SIZE: '1000' } })
  const rows = 50_000
  const { uploadUrl: url, tempCsvKey } = await uploadUrl(base)
  async function* generate() {
    yield new TextEncoder().encode('id,full_name,mobile,home,mail,plan\n')
    for (let i = 0; i < rows; i += 1000) {
      let block = ''
      for (let j = i; j < i + 1000; j++) block += `id${j},Name ${j},${34600000000 + j},,,p${j % 3}\n`
      yield new TextEncoder().encode(block)
    }
  }
  const upload = await put(url, generate())
  t.equal(upload.status, 200)
  t.equal((await upload.json()).size > 1_000_000, true)
  const create = await call(base, 'POST', '/dialer/v1/batches', {
    body: { name: 'Big', channel: 'phone', duplicateStrategy: 'skip', tempCsvKey, columnMapping: MAPPING },
  })
  const op = await waitForOperation(base, create.json.importOperationId, undefined, 120_000)
  t.match(op, { status: 'succeeded', requestedCount: rows, insertedCount: rows, totalChunks: rows / 1000 })
  const batch = await call(base, 'GET', `/dialer/v1/batches/${create.json.batchId}`)
  t.equal(batch.json.totalContacts, rows)
})

t.test('a row longer than 1 MiB ends the import with a row error saying which row, and the process stays well', async t => {
  const { base } = await startTestService(t, { env: { DIALER_CHUNK_SIZE: '2' } })
  const { uploadUrl: url, tempCsvKey } = await uploadUrl(base)
  // Without a bound the parser holds the whole line (a 1 GiB one-line upload takes the heap).
  const csv = ['id,full_name,mobile,home,mail,plan', 'r1,Ana,34600000001,,,gold', 'r2,Luis,34600000002,,,gold', `r3,${'x'.repeat(1_100_000)},34600000003,,,gold`, 'r4,Eva,34600000004,,,gold'].join('\n')
  t.equal((await put(url, csv)).status, 200)
  const create = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'long row', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey, columnMapping: MAPPING } })
  t.equal(create.status, 201)
  const op = await waitForOperation(base, create.json.importOperationId)
  t.equal(op.status, 'failed')
  const batch = await call(base, 'GET', `/dialer/v1/batches/${create.json.batchId}`)
  t.match(batch.json, { uploadStatus: 'failed', importErrorCount: 1 })
  const errors = await call(base, 'GET', `/dialer/v1/batches/${create.json.batchId}/import-errors`)
  t.match(errors.json.data, [{ row: 3, code: 'CSV_RECORD_TOO_LARGE' }])
  t.equal((await call(base, 'GET', '/healthz', { key: null })).status, 200)
})
