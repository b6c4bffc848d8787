// Idempotency records stay bounded (issue 10): a large error body is not kept (the key is
// released and a retry is validated again), and an account's new keys per 24 h are capped.
import t from 'tap'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { contact, createBatch } from '../support/dialer.js'

for (const store of STORES) {
  t.test(`idempotency bounds on the ${store} store`, async t => {
    const { base, service } = await startTestService(t, { store, env: { IDEMPOTENCY_MAX_KEYS_PER_ACCOUNT: '4' } })
    const records = service.platform.store.collection('dialer_idempotency_keys')

    t.test('a large 4xx body is answered but not kept; a small one is replayed', async t => {
      const batchId = await createBatch(base)
      const invalid = { contacts: Array.from({ length: 1000 }, (_, i) => contact(i, { name: '' })) }
      const headers = { 'Idempotency-Key': 'big-invalid' }
      const first = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: invalid, headers })
      t.equal(first.status, 400)
      t.equal(first.json.details.length, 1000, 'the client still gets every problem')
      t.equal(first.headers.get('idempotency-status'), 'not-stored')
      t.equal(await records.countDocuments({}), 0, 'no record kept for it')
      const retry = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: invalid, headers })
      t.equal(retry.status, 400)
      t.equal(retry.headers.get('idempotency-replayed'), 'false', 'validated again, not replayed')

      const small = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: contact(1, { name: '' }), headers: { 'Idempotency-Key': 'small-invalid' } })
      t.equal(small.status, 400)
      const replay = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: contact(1, { name: '' }), headers: { 'Idempotency-Key': 'small-invalid' } })
      t.equal(replay.headers.get('idempotency-replayed'), 'true')
      t.same(replay.json, small.json)
    })

    t.test('new keys per account are capped; replays and other accounts are not affected', async t => {
      // The first subtest spent acme's keys; globex starts with its whole allowance.
      const body = { name: 'capped', channel: 'phone', duplicateStrategy: 'merge' }
      const results = []
      for (let i = 0; i < 6; i++) results.push(await call(base, 'POST', '/dialer/v1/batches', { key: KEYS.globex, body, headers: { 'Idempotency-Key': `cap-${i}` } }))
      t.same(results.map(r => r.status), [201, 201, 201, 201, 429, 429])
      t.match(results[4]!.json, { code: 'IDEMPOTENCY_QUOTA_EXCEEDED', message: /4 Idempotency-Keys/ })
      t.ok(Number(results[4]!.headers.get('retry-after')) > 0, 'Retry-After')
      const replay = await call(base, 'POST', '/dialer/v1/batches', { key: KEYS.globex, body, headers: { 'Idempotency-Key': 'cap-0' } })
      t.equal(replay.status, 201, 'a replay of a kept key still answers')
      t.equal(replay.headers.get('idempotency-replayed'), 'true')
      const without = await call(base, 'POST', '/dialer/v1/batches', { key: KEYS.globex, body })
      t.equal(without.status, 201, 'a request without a key is served')
      const acme = await call(base, 'POST', '/dialer/v1/batches', { body, headers: { 'Idempotency-Key': 'acme-after-globex-cap' } })
      t.equal(acme.status, 201, 'another account has its own allowance')
    })
  })
}
