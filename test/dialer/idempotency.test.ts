// Idempotency-Key on dialer writes (spec section 5).
import t from 'tap'
import { createServer } from 'node:net'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { contact, createBatch, waitForOperation } from '../support/dialer.js'
import type { Clock } from '../../platform/clock.js'

class ManualClock implements Clock {
  constructor(private time = Date.now()) {}
  now() {
    return this.time
  }
  advance(ms: number) {
    this.time += ms
  }
}

for (const store of STORES) {
  t.test(`idempotency on the ${store} store`, async t => {
    const { base } = await startTestService(t, { store })

    t.test('a retry with the same key and body replays the original response', async t => {
      const batchId = await createBatch(base)
      const headers = { 'Idempotency-Key': `load-${batchId}` }
      const first = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: contact(1), headers })
      t.equal(first.status, 202)
      t.equal(first.headers.get('idempotency-replayed'), 'false')
      const second = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: contact(1), headers })
      t.equal(second.status, 202)
      t.equal(second.headers.get('idempotency-replayed'), 'true')
      t.same(second.json, first.json)
      t.equal(second.headers.get('location'), first.headers.get('location'))
      await waitForOperation(base, first.json.operationId)
      const logs = await call(base, 'GET', `/dialer/v1/batches/${batchId}/logs`)
      t.equal(logs.json.data.filter((l: any) => l.operation === 'contacts_added').length, 1, 'processed once')
    })

    t.test('batch creation is protected too', async t => {
      const body = { name: 'Once', channel: 'email', duplicateStrategy: 'skip' }
      const headers = { 'Idempotency-Key': 'create-once-1' }
      const a = await call(base, 'POST', '/dialer/v1/batches', { body, headers })
      const b = await call(base, 'POST', '/dialer/v1/batches', { body, headers })
      t.equal(a.status, 201)
      t.equal(b.json.batchId, a.json.batchId)
      const all = await call(base, 'GET', '/dialer/v1/batches?limit=1000')
      t.equal(all.json.data.filter((x: any) => x.name === 'Once').length, 1)
    })

    t.test('the same key with a different body is 422', async t => {
      const headers = { 'Idempotency-Key': 'reused-key' }
      await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: { address: '34600000001', addressType: 'phone' }, headers })
      const res = await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: { address: '34600000002', addressType: 'phone' }, headers })
      t.equal(res.status, 422)
      t.equal(res.json.code, 'IDEMPOTENCY_KEY_REUSED')
    })

    t.test('keys are scoped per account and per route', async t => {
      const headers = { 'Idempotency-Key': 'shared-key' }
      const mine = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'A', channel: 'phone', duplicateStrategy: 'skip' }, headers })
      const theirs = await call(base, 'POST', '/dialer/v1/batches', { key: KEYS.globex, body: { name: 'A', channel: 'phone', duplicateStrategy: 'skip' }, headers })
      t.equal(theirs.headers.get('idempotency-replayed'), 'false')
      t.not(theirs.json.batchId, mine.json.batchId)
      const otherRoute = await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: { address: '34600000003', addressType: 'phone' }, headers })
      t.equal(otherRoute.status, 200, 'another route with the same key is a new request')
    })

    t.test('malformed keys are 400, never ignored', async t => {
      // (Non-ASCII bytes never reach the handler: uWebSockets.js drops them from header values.)
      for (const key of ['', 'x'.repeat(256), 'tab\there', 'line\u007fdel']) {
        const res = await fetch(`${base}/dialer/v1/blocked-addresses`, {
          method: 'POST',
          headers: { apikey: KEYS.acme, 'content-type': 'application/json', 'Idempotency-Key': key },
          body: JSON.stringify({ address: '34600000004', addressType: 'phone' }),
        }).catch(() => null)
        if (!res) continue // fetch itself refuses some header values; the server never saw them
        t.equal(res.status, 400, JSON.stringify(key))
        t.equal((await res.json()).code, 'INVALID_IDEMPOTENCY_KEY')
      }
    })

    t.test('4xx outcomes are stored and replayed', async t => {
      const headers = { 'Idempotency-Key': 'bad-body-once' }
      const a = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'X' }, headers })
      const b = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'X' }, headers })
      t.equal(a.status, 400)
      t.equal(b.status, 400)
      t.equal(b.headers.get('idempotency-replayed'), 'true')
    })

    t.test('concurrent retries: exactly one is processed, the others replay or get 409 with Retry-After', async t => {
      const batchId = await createBatch(base)
      const headers = { 'Idempotency-Key': `burst-${batchId}` }
      const body = { contacts: Array.from({ length: 500 }, (_, i) => contact(i)) }
      const results = await Promise.all(Array.from({ length: 6 }, () => call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body, headers })))
      const fresh = results.filter(r => r.status === 202 && r.headers.get('idempotency-replayed') === 'false')
      const replays = results.filter(r => r.status === 202 && r.headers.get('idempotency-replayed') === 'true')
      const inFlight = results.filter(r => r.status === 409)
      t.equal(fresh.length, 1, 'one request did the work')
      t.equal(replays.length + inFlight.length, 5)
      for (const r of inFlight) {
        t.equal(r.json.code, 'IDEMPOTENCY_KEY_IN_FLIGHT')
        t.match(r.headers.get('retry-after'), /^\d+$/)
      }
      for (const r of replays) t.equal(r.json.operationId, fresh[0]!.json.operationId)
    })
  })
}

t.test('a key held by a request still in flight answers 409', async t => {
  const { base, service } = await startTestService(t)
  // Another gateway process is mid-request with this key: its record is in the shared store.
  const { createHash } = await import('node:crypto')
  const url = '/dialer/v1/blocked-addresses'
  const id = createHash('sha256').update(`acme\npost\n${url}\nheld-key`).digest('hex')
  const body = JSON.stringify({ address: '34600000005', addressType: 'phone' })
  await service.platform.store.collection('dialer_idempotency_keys').insertOne({
    _id: id,
    state: 'in_flight',
    fingerprint: createHash('sha256').update(body).digest('hex'),
    response: null,
    lockedUntil: new Date(Date.now() + 30_000),
    expiresAt: new Date(Date.now() + 86_400_000),
  })
  const res = await call(base, 'POST', url, { raw: body, headers: { 'content-type': 'application/json', 'Idempotency-Key': 'held-key' } })
  t.equal(res.status, 409)
  t.equal(res.json.code, 'IDEMPOTENCY_KEY_IN_FLIGHT')
  t.ok(Number(res.headers.get('retry-after')) >= 1)
})

t.test('keys are kept 24 hours', async t => {
  const clock = new ManualClock()
  const { base } = await startTestService(t, { clock })
  const headers = { 'Idempotency-Key': 'day-old' }
  const body = { name: 'Daily', channel: 'phone', duplicateStrategy: 'skip' }
  const first = await call(base, 'POST', '/dialer/v1/batches', { body, headers })
  clock.advance(23 * 3600_000)
  const replay = await call(base, 'POST', '/dialer/v1/batches', { body, headers })
  t.equal(replay.json.batchId, first.json.batchId)
  clock.advance(3600_000 + 1)
  const after = await call(base, 'POST', '/dialer/v1/batches', { body, headers })
  t.equal(after.headers.get('idempotency-replayed'), 'false')
  t.not(after.json.batchId, first.json.batchId, 'processed again once the key expired')
})

t.test('an unreachable idempotency store: processed anyway, marked bypassed', async t => {
  // A port with nothing listening: the idempotency backend is down for real.
  const port = await new Promise<number>(resolve => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })
  const { base } = await startTestService(t, { store: 'mongo', env: { IDEMPOTENCY_MONGO_URL: `mongodb://127.0.0.1:${port}/idem?directConnection=true` } })
  const headers = { 'Idempotency-Key': 'unprotected' }
  const res = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'B', channel: 'phone', duplicateStrategy: 'skip' }, headers })
  t.equal(res.status, 201)
  t.equal(res.headers.get('idempotency-status'), 'bypassed')
  const again = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'B', channel: 'phone', duplicateStrategy: 'skip' }, headers })
  t.not(again.json.batchId, res.json.batchId, 'that request was unprotected')
  const plain = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'C', channel: 'phone', duplicateStrategy: 'skip' } })
  t.equal(plain.status, 201, 'requests without a key are unaffected')
  t.equal(plain.headers.get('idempotency-status'), null)
})
