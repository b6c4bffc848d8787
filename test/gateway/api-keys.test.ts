// Keys issued by the CLI into the store: accepted by the gateway, stored only as digests,
// rejected once revoked; a body over the limit is 413.
import t from 'tap'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { call, startTestService } from '../support/harness.js'

const run = promisify(execFile)

t.test('keys issued and revoked with the CLI', async t => {
  const { base, mongoUrl, service } = await startTestService(t, { store: 'mongo' })
  const cli = (...args: string[]) =>
    run(process.execPath, ['--import', '@tapjs/typescript/import', 'cli/keys.ts', ...args], { env: { ...process.env, MONGO_URL: mongoUrl! } })

  const issued = JSON.parse((await cli('issue', '--account', 'initech', '--roles', 'dialer', '--name', 'CRM')).stdout)
  t.match(issued, { keyId: /^[0-9a-f-]{36}$/, account: 'initech', roles: ['dialer'], key: /^sk_/ })

  const stored = await service.platform.store.collection('api_keys').findOne({ _id: issued.keyId })
  t.ok(stored, 'the key record is in the store')
  t.notMatch(JSON.stringify(stored), issued.key, 'the key itself is never stored')

  const ok = await call(base, 'GET', '/dialer/v1/batches', { key: issued.key })
  t.equal(ok.status, 200)
  t.same(ok.json.data, [], 'a new account sees nothing of others')
  const forbidden = await call(base, 'GET', '/engine/v1/api/reports/sessions-detail', { key: issued.key })
  t.equal(forbidden.status, 403, 'only the roles it was issued with')

  const listed = JSON.parse((await cli('list', '--account', 'initech')).stdout)
  t.equal(listed.length, 1)
  t.notOk('key' in listed[0])

  t.match((await cli('revoke', issued.keyId)).stdout, /revoked/)
  // The gateway caches a key for at most 10 s; a fresh service sees the revocation at once.
  const fresh = await startTestService(t, { env: { MONGO_URL: mongoUrl! } })
  t.equal((await call(fresh.base, 'GET', '/dialer/v1/batches', { key: issued.key })).status, 401)
})

t.test('bodies over MAX_BODY_BYTES are 413', async t => {
  const { base } = await startTestService(t, { env: { MAX_BODY_BYTES: '2048' } })
  const res = await call(base, 'POST', '/dialer/v1/blocked-addresses', {
    body: { addresses: Array.from({ length: 500 }, (_, i) => String(34600000000 + i)), addressType: 'phone' },
  })
  t.equal(res.status, 413)
  t.equal(res.json.code, 'PAYLOAD_TOO_LARGE')
  const small = await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: { address: '34600000001', addressType: 'phone' } })
  t.equal(small.status, 200, 'the service keeps serving')
})

t.test('the API key never appears in logs', async t => {
  const lines: string[] = []
  const { createLogger } = await import('../../platform/logger.js')
  const logger = createLogger('debug', {}, line => lines.push(line))
  logger.info('request', { headers: { apikey: 'secret-key-123', host: 'x' }, apiKey: 'k2' })
  t.notMatch(lines.join('\n'), /secret-key-123|k2/)
  t.match(lines[0], /\[redacted\]/)
})
