// Uploads stay bounded (issue 10): an account holds a limited number of upload URLs and files no
// batch has imported, a file is deleted once imported, and the sweep removes files whose upload
// expired.
import t from 'tap'
import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { waitForOperation } from '../support/dialer.js'
import type { Clock } from '../../platform/clock.js'

class ManualClock implements Clock {
  time = Date.now()
  now() {
    return this.time
  }
}

const newUrl = (base: string, key: string = KEYS.acme) => call(base, 'POST', '/dialer/v1/batches/upload-url', { key, body: { fileName: 'c.csv', fileType: 'text/csv' } })
const put = (url: string, body: string) => fetch(url, { method: 'PUT', headers: { 'content-type': 'text/csv' }, body })

for (const store of STORES) {
  t.test(`upload bounds on the ${store} store`, async t => {
    const clock = new ManualClock()
    const { base, service } = await startTestService(t, { store, clock, env: { DIALER_MAX_OPEN_UPLOADS_PER_ACCOUNT: '2', DIALER_UPLOAD_SWEEP_MS: '50' } })
    const uploads = join(service.platform.config.dataDir, 'uploads')
    const files = () => (existsSync(uploads) ? readdirSync(uploads) : [])

    const first = await newUrl(base)
    const second = await newUrl(base)
    t.same([first.status, second.status], [201, 201])
    const third = await newUrl(base)
    t.equal(third.status, 429, 'a third URL while two are held')
    t.match(third.json, { code: 'UPLOAD_LIMIT_EXCEEDED' })
    t.ok(Number(third.headers.get('retry-after')) > 3000, 'Retry-After: when the oldest URL expires')
    t.equal((await newUrl(base, KEYS.globex)).status, 201, 'another account has its own allowance')

    // An uploaded file still counts until a batch imports it; once imported it is deleted.
    t.equal((await put(first.json.uploadUrl, 'id,name,phone\nr1,Ana,34600000001\n')).status, 200)
    t.equal((await newUrl(base)).status, 429, 'an uploaded, unimported file still counts')
    t.ok(files().includes(first.json.tempCsvKey), 'the file is stored')
    const batch = await call(base, 'POST', '/dialer/v1/batches', {
      body: { name: 'csv', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey: first.json.tempCsvKey, columnMapping: { identifier: 'id', name: 'name', phone: ['phone'] } },
    })
    t.equal(batch.status, 201)
    t.match(await waitForOperation(base, batch.json.importOperationId), { status: 'succeeded', insertedCount: 1 })
    // The import removes the file right after its last chunk is queued; the load may finish first.
    for (let i = 0; i < 100 && files().includes(first.json.tempCsvKey); i++) await new Promise(r => setTimeout(r, 20))
    t.notOk(files().includes(first.json.tempCsvKey), 'deleted once imported')
    t.equal((await newUrl(base)).status, 201, 'the imported upload no longer counts')

    // A file whose upload expired (retention 24 h) is removed by the sweep.
    t.equal((await put(second.json.uploadUrl, 'id,name,phone\nr2,Luis,34600000002\n')).status, 200)
    t.ok(files().includes(second.json.tempCsvKey))
    clock.time += 25 * 60 * 60 * 1000
    const until = Date.now() + 5000
    while (files().includes(second.json.tempCsvKey) && Date.now() < until) await new Promise(r => setTimeout(r, 50))
    t.notOk(files().includes(second.json.tempCsvKey), 'the sweep removed the expired upload')
  })
}
