// Edge hygiene for API keys on a public port: repeated unknown keys from one address are slowed
// (429 with Retry-After) without touching other addresses, with bounded memory; the key-lookup
// cache is a bounded LRU that remembers unknown keys only briefly.
import t from 'tap'
import http from 'node:http'
import { createHash, randomBytes } from 'node:crypto'
import { KEYS, startTestService } from '../support/harness.js'

/** A GET over a real socket from a chosen loopback source address (127.0.0.0/8 is all loopback). */
function getFrom(base: string, path: string, from: string, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; json: any }>((resolve, reject) => {
    const req = http.request(base + path, { method: 'GET', headers, localAddress: from, agent: false }, res => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', chunk => (text += chunk))
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, json: text ? JSON.parse(text) : undefined }))
    })
    req.on('error', reject)
    req.end()
  })
}

const wrongKey = () => `wrong-${randomBytes(12).toString('hex')}`
const PATH = '/dialer/v1/batches'

t.test('repeated unknown keys from one address: 429 with Retry-After, other addresses unaffected', async t => {
  const { base } = await startTestService(t, { env: { AUTH_FAILURE_LIMIT: '5', AUTH_FAILURE_WINDOW_MS: '60000' } })
  const attacker = '127.0.0.2'
  const neighbour = '127.0.0.3'
  for (let i = 0; i < 3; i++) t.equal((await getFrom(base, PATH, attacker)).status, 401, 'a missing key is not a guess: not counted')
  for (let i = 0; i < 5; i++) t.equal((await getFrom(base, PATH, attacker, { apikey: wrongKey() })).status, 401, `guess ${i + 1}`)
  const slowed = await getFrom(base, PATH, attacker, { apikey: wrongKey() })
  t.equal(slowed.status, 429)
  t.equal(slowed.json.code, 'TOO_MANY_AUTH_FAILURES')
  t.type(slowed.json.message, 'string')
  const retryAfter = Number(slowed.headers['retry-after'])
  t.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After: ${retryAfter}`)
  t.equal((await getFrom(base, PATH, attacker, { apikey: KEYS.acme })).status, 429, 'a valid key from that address waits too (no oracle for guesses)')

  t.equal((await getFrom(base, PATH, neighbour, { apikey: KEYS.acme })).status, 200, 'another address is served')
  t.equal((await getFrom(base, PATH, neighbour, { apikey: wrongKey() })).status, 401, 'and has its own count')
  t.equal((await getFrom(base, '/healthz', attacker)).status, 200, 'routes without a key are not throttled')
})

t.test('the window ends: the address is served again', async t => {
  const { base } = await startTestService(t, { env: { AUTH_FAILURE_LIMIT: '2', AUTH_FAILURE_WINDOW_MS: '1000' } })
  const from = '127.0.0.4'
  for (let i = 0; i < 2; i++) await getFrom(base, PATH, from, { apikey: wrongKey() })
  t.equal((await getFrom(base, PATH, from, { apikey: KEYS.acme })).status, 429)
  await new Promise(r => setTimeout(r, 1100))
  t.equal((await getFrom(base, PATH, from, { apikey: KEYS.acme })).status, 200)
})

t.test('tracked addresses are bounded (LRU): the least recent are forgotten', async t => {
  const { base } = await startTestService(t, { env: { AUTH_FAILURE_LIMIT: '2', AUTH_FAILURE_TRACKED_ADDRESSES: '2' } })
  for (let i = 0; i < 2; i++) await getFrom(base, PATH, '127.0.0.5', { apikey: wrongKey() })
  t.equal((await getFrom(base, PATH, '127.0.0.5', { apikey: KEYS.acme })).status, 429)
  await getFrom(base, PATH, '127.0.0.6', { apikey: wrongKey() })
  await getFrom(base, PATH, '127.0.0.7', { apikey: wrongKey() })
  t.equal((await getFrom(base, PATH, '127.0.0.5', { apikey: KEYS.acme })).status, 200, 'two newer addresses pushed the oldest out')
})

t.test('behind a trusted proxy the client is the X-Forwarded-For address', async t => {
  const { base } = await startTestService(t, { env: { AUTH_FAILURE_LIMIT: '2', TRUSTED_PROXIES: '127.0.0.8' } })
  const proxy = '127.0.0.8'
  for (let i = 0; i < 2; i++) await getFrom(base, PATH, proxy, { apikey: wrongKey(), 'x-forwarded-for': '203.0.113.7' })
  t.equal((await getFrom(base, PATH, proxy, { apikey: KEYS.acme, 'x-forwarded-for': '203.0.113.7' })).status, 429)
  t.equal((await getFrom(base, PATH, proxy, { apikey: KEYS.acme, 'x-forwarded-for': '203.0.113.8' })).status, 200, 'another client behind the same proxy is served')
  // An untrusted peer cannot pick its identity with the header.
  for (let i = 0; i < 2; i++) await getFrom(base, PATH, '127.0.0.9', { apikey: wrongKey(), 'x-forwarded-for': `198.51.100.${i}` })
  t.equal((await getFrom(base, PATH, '127.0.0.9', { apikey: KEYS.acme, 'x-forwarded-for': '198.51.100.99' })).status, 429)
})

t.test('the key cache is bounded, and unknown keys are remembered only briefly', async t => {
  const { base, metricsBase, service } = await startTestService(t, {
    env: { AUTH_FAILURE_LIMIT: '0', KEY_CACHE_MAX: '50', KEY_CACHE_NEGATIVE_TTL_MS: '300' },
  })
  for (let i = 0; i < 200; i += 20) {
    await Promise.all(Array.from({ length: 20 }, () => getFrom(base, PATH, '127.0.0.10', { apikey: wrongKey() })))
  }
  const text = await (await fetch(`${metricsBase}/metrics`)).text()
  const unknown = Number(/^switchboard_api_key_cache_entries\{kind="unknown"\} (\d+)/m.exec(text)?.[1])
  t.ok(unknown > 0 && unknown <= 50, `200 random keys, ${unknown} cached (max 50)`)

  // A key unknown when first shown, then issued: accepted once the short negative entry expires.
  const key = `sk_${randomBytes(32).toString('base64url')}`
  t.equal((await getFrom(base, PATH, '127.0.0.11', { apikey: key })).status, 401)
  await service.platform.store.collection('api_keys').insertOne({
    _id: 'late-key',
    digest: createHash('sha256').update(key).digest('hex'),
    accountId: 'acme',
    roles: ['dialer'],
    name: 'issued after a first try',
    createdAt: new Date(),
    revokedAt: null,
  })
  await new Promise(r => setTimeout(r, 400))
  t.equal((await getFrom(base, PATH, '127.0.0.11', { apikey: key })).status, 200, 'not held as unknown for the positive TTL')
})

t.test('the throttle reads no address while no failure`s window is open (reading one costs a system call)', async t => {
  const { AuthThrottle } = await import('../../gateway/auth-throttle.js')
  let now = 1_000
  const throttle = new AuthThrottle({ limit: 2, windowMs: 60_000, maxAddresses: 10 }, () => now)
  t.notOk(throttle.active, 'no failure yet')
  throttle.recordFailure('203.0.113.1')
  t.ok(throttle.active, 'a failure`s window is open')
  now += 30_000
  throttle.recordFailure('203.0.113.2')
  now += 40_000
  t.ok(throttle.active, 'the first window ended, the second is open')
  t.equal(throttle.retryAfterSeconds('203.0.113.2'), 0, 'one failure is under the limit')
  now += 20_001
  t.notOk(throttle.active, 'every window ended')
  t.notOk(new AuthThrottle({ limit: 0, windowMs: 60_000, maxAddresses: 10 }).active, 'off when the limit is 0')
})
