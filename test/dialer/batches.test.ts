// Batches: creation, reads, the lifecycle state machine with its operations, and the batch log.
import t from 'tap'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { contact, createBatch, load, waitForOperation } from '../support/dialer.js'

for (const store of STORES) {
  t.test(`batches on the ${store} store`, async t => {
    const { base } = await startTestService(t, { store })

    t.test('creation answers directly with the batch, no operation', async t => {
      const res = await call(base, 'POST', '/dialer/v1/batches', {
        body: { source: 'api', name: 'Renewals', channel: 'phone', duplicateStrategy: 'merge', rules: { maxAttempts: 3 } },
      })
      t.equal(res.status, 201)
      t.match(res.json, { batchId: /^[0-9a-f-]{36}$/, status: 'created', source: 'api', name: 'Renewals', channel: 'phone', duplicateStrategy: 'merge', totalContacts: 0, rules: { maxAttempts: 3 } })
      t.equal(res.json.operationId, undefined)
      t.equal(res.headers.get('location'), null)
      const read = await call(base, 'GET', `/dialer/v1/batches/${res.json.batchId}`)
      t.equal(read.status, 200)
      t.same(read.json, res.json)
    })

    t.test('duplicateStrategy is required and not nullable; every problem listed', async t => {
      const missing = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'X', channel: 'phone' } })
      t.equal(missing.status, 400)
      t.match(missing.json.details, [{ field: 'duplicateStrategy', code: 'REQUIRED' }])
      const nulled = await call(base, 'POST', '/dialer/v1/batches', { body: { name: '', channel: 'fax', duplicateStrategy: null } })
      t.equal(nulled.status, 400)
      const fields = nulled.json.details.map((d: any) => d.field).sort()
      t.same(fields, ['channel', 'duplicateStrategy', 'name'])
    })

    t.test('list is per account, newest first', async t => {
      const a = await createBatch(base, { name: 'first' })
      const b = await createBatch(base, { name: 'second' })
      await createBatch(base, { name: 'theirs' }, KEYS.globex)
      const res = await call(base, 'GET', '/dialer/v1/batches?limit=2')
      t.equal(res.status, 200)
      t.same(res.json.data.map((x: any) => x.batchId), [b, a])
      t.ok(res.json.total >= 2)
      const theirs = await call(base, 'GET', '/dialer/v1/batches', { key: KEYS.globex })
      t.notOk(theirs.json.data.some((x: any) => x.batchId === a), 'another account never sees it')
      const bad = await call(base, 'GET', '/dialer/v1/batches?limit=0')
      t.equal(bad.status, 400)
      t.equal(bad.json.parameter, 'limit')
    })

    t.test('another account\'s batch is 404 everywhere', async t => {
      const batchId = await createBatch(base)
      for (const [method, path] of [
        ['GET', `/dialer/v1/batches/${batchId}`],
        ['GET', `/dialer/v1/batches/${batchId}/logs`],
        ['GET', `/dialer/v1/batches/${batchId}/contacts`],
        ['POST', `/dialer/v1/batches/${batchId}/start`],
        ['DELETE', `/dialer/v1/batches/${batchId}`],
      ] as const) {
        const res = await call(base, method, path, { key: KEYS.globex })
        t.equal(res.status, 404, `${method} ${path}`)
        t.equal(res.json.code, 'NOT_FOUND')
      }
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status, 'created', 'untouched')
    })

    t.test('lifecycle: start, stop, archive with operations and log entries; illegal moves are 409', async t => {
      const batchId = await createBatch(base)
      const start = await call(base, 'POST', `/dialer/v1/batches/${batchId}/start`)
      t.equal(start.status, 202)
      t.equal(start.headers.get('location'), `/dialer/v1/batches/operations/${start.json.operationId}`)
      const op = await waitForOperation(base, start.json.operationId)
      t.match(op, { kind: 'batch.lifecycle', type: 'batch.start', batchId, status: 'succeeded', stage: 'done', progress: 100 })
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status, 'running')

      const archiveRunning = await call(base, 'POST', `/dialer/v1/batches/${batchId}/archive`)
      t.equal(archiveRunning.status, 409)
      t.match(archiveRunning.json, { code: 'INVALID_BATCH_TRANSITION', status: 'running', allowedFrom: ['created', 'stopped', 'completed'] })
      t.equal((await call(base, 'POST', `/dialer/v1/batches/${batchId}/start`)).status, 409, 'start twice')

      t.equal((await call(base, 'POST', `/dialer/v1/batches/${batchId}/stop`)).status, 202)
      t.equal((await call(base, 'POST', `/dialer/v1/batches/${batchId}/start`)).status, 202, 'restart after stop')
      t.equal((await call(base, 'POST', `/dialer/v1/batches/${batchId}/stop`)).status, 202)
      const archive = await call(base, 'POST', `/dialer/v1/batches/${batchId}/archive`)
      t.equal(archive.status, 202)
      await waitForOperation(base, archive.json.operationId)
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status, 'archived')
      t.equal((await call(base, 'POST', `/dialer/v1/batches/${batchId}/start`)).status, 409, 'archived is final for dialing')

      const logs = await call(base, 'GET', `/dialer/v1/batches/${batchId}/logs`)
      t.equal(logs.status, 200)
      t.same(logs.json.data.map((l: any) => l.operation), ['archived', 'stopped', 'started', 'stopped', 'started', 'created'])
      t.equal(logs.json.total, 6)
      const entry = logs.json.data[0]
      t.match(entry, { id: /^[0-9a-f-]{36}$/, batchId, performedBy: /^[0-9a-f-]{36}$/, details: { reason: 'manual' }, user: { id: entry.performedBy } })
      t.type(entry.createdAt, 'string')
      const paged = await call(base, 'GET', `/dialer/v1/batches/${batchId}/logs?limit=2&offset=1`)
      t.same(paged.json.data.map((l: any) => l.operation), ['stopped', 'started'])
      t.equal(paged.json.total, 6)
    })

    t.test('delete removes the batch and its contacts; it then answers 404', async t => {
      const batchId = await createBatch(base)
      await load(base, batchId, { contacts: [contact(1), contact(2)] })
      const del = await call(base, 'DELETE', `/dialer/v1/batches/${batchId}`)
      t.equal(del.status, 202)
      const op = await waitForOperation(base, del.json.operationId)
      t.match(op, { type: 'batch.delete', status: 'succeeded' })
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).status, 404)
      t.equal((await call(base, 'DELETE', `/dialer/v1/batches/${batchId}`)).status, 404)
    })

    t.test('contacts_added is logged with its count', async t => {
      const batchId = await createBatch(base)
      await load(base, batchId, { contacts: [contact(1), contact(2), contact(3)] })
      const logs = await call(base, 'GET', `/dialer/v1/batches/${batchId}/logs`)
      t.match(logs.json.data[0], { operation: 'contacts_added', details: { count: 3 } })
    })
  })
}
