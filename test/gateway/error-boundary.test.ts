// The edge's error boundary against the whole service over real HTTP: inputs that used to end
// the process (a bad percent-encoding in a path, a deeply nested JSON value echoed in an error)
// answer 400 with the envelope, are logged once with the request id and counted in /metrics,
// and the service keeps serving.
import t from 'tap'
import { call, startTestService } from '../support/harness.js'
import { createLogger } from '../../platform/logger.js'

function capturingLogger() {
  const lines: Record<string, any>[] = []
  return { lines, logger: createLogger('debug', {}, line => lines.push(JSON.parse(line))) }
}

async function metric(metricsBase: string, pattern: RegExp): Promise<number> {
  const text = await (await fetch(`${metricsBase}/metrics`)).text()
  return Number(pattern.exec(text)?.[1] ?? 0)
}

const nested = (depth: number, leaf = '1') => '['.repeat(depth) + leaf + ']'.repeat(depth)

t.test('malformed percent-encoding in a path or query is 400 INVALID_URL_ENCODING, before auth', async t => {
  const { lines, logger } = capturingLogger()
  const { base, metricsBase } = await startTestService(t, { logger })
  for (const path of [
    '/dialer/v1/batches/%E0%A4%A', // the reported request: a truncated UTF-8 sequence in a path parameter
    '/dialer/v1/batches/%zz',
    '/dialer/v1/batches/%C0%80/contacts', // an overlong encoding
    '/dialer/v1/batches?status=%E0%A4%A',
    '/dialer/v1/batches?x=%',
    '/no-such-route/%E0%A4%A',
    '/healthz?x=%FF',
  ]) {
    const res = await call(base, 'GET', path, { key: null })
    t.equal(res.status, 400, path)
    t.equal(res.json?.code, 'INVALID_URL_ENCODING', path)
    t.type(res.json?.message, 'string')
  }
  const withKey = await call(base, 'DELETE', '/dialer/v1/batches/%E0%A4%A')
  t.equal(withKey.status, 400, 'a valid key does not change it')

  t.equal((await call(base, 'GET', '/healthz', { key: null })).status, 200, 'the process keeps serving')
  t.equal((await call(base, 'GET', '/dialer/v1/batches/%E2%9C%93')).status, 404, 'a well-formed encoding is routed as before')

  const rid = 'trace-0001'
  const traced = await call(base, 'GET', '/dialer/v1/batches/%E0%A4%A', { key: null, headers: { 'x-request-id': rid } })
  t.equal(traced.headers.get('x-request-id'), rid)
  t.equal(lines.filter(l => l.requestId === rid).length, 1, 'logged once with the request id')
  t.match(lines.find(l => l.requestId === rid), { level: 'info', msg: 'request rejected', status: 400, code: 'INVALID_URL_ENCODING' })
  t.equal(await metric(metricsBase, /^switchboard_http_errors_total\{status="400",code="INVALID_URL_ENCODING"\} (\d+)/m), 9, 'counted by status and code')
})

t.test('JSON nesting is bounded before parsing: 400 JSON_TOO_DEEP', async t => {
  const { base, metricsBase } = await startTestService(t)
  const headers = { 'content-type': 'application/json' }
  // 100,000 levels: JSON.parse itself (and everything after it) would overflow the stack.
  const deepest = await call(base, 'POST', '/dialer/v1/batches', { raw: nested(100_000), headers })
  t.equal(deepest.status, 400)
  t.equal(deepest.json.code, 'JSON_TOO_DEEP')
  t.equal(deepest.json.maxDepth, 64)
  // 10,000 levels inside an otherwise valid field.
  const inField = await call(base, 'POST', '/dialer/v1/batches', { raw: `{"name":"x","channel":"phone","extra":${nested(10_000)}}`, headers })
  t.equal(inField.status, 400)
  t.equal(inField.json.code, 'JSON_TOO_DEEP')
  // Brackets inside strings are text, not nesting.
  const brackets = await call(base, 'POST', '/dialer/v1/batches', { body: { name: '[{'.repeat(50), channel: 'phone', duplicateStrategy: 'merge' } })
  t.equal(brackets.status, 201, 'brackets in strings do not count')
  const malformed = await call(base, 'POST', '/dialer/v1/batches', { raw: '{"name": ', headers })
  t.equal(malformed.status, 400)
  t.equal(malformed.json.code, 'INVALID_JSON')
  t.equal(await metric(metricsBase, /^switchboard_http_errors_total\{status="400",code="JSON_TOO_DEEP"\} (\d+)/m), 2)
  t.equal((await call(base, 'GET', '/healthz', { key: null })).status, 200)
})

t.test('MAX_JSON_DEPTH is configurable', async t => {
  const { base } = await startTestService(t, { env: { MAX_JSON_DEPTH: '3' } })
  const res = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'x', channel: 'phone', extra: [[[1]]] } })
  t.equal(res.status, 400)
  t.equal(res.json.code, 'JSON_TOO_DEEP')
  t.equal(res.json.maxDepth, 3)
})

t.test('an error echoing a 10,000-deep value answers, bounded, and the process lives', async t => {
  // With the depth guard raised, the deep value reaches schema validation, whose 400 echoes it
  // (meta.received): serializing that echo overflowed the stack in Gateway.fail.
  const { base } = await startTestService(t, { env: { MAX_JSON_DEPTH: '100000' } })
  const res = await call(base, 'POST', '/dialer/v1/batches', {
    raw: `{"name":"x","channel":${nested(10_000)},"duplicateStrategy":"merge"}`,
    headers: { 'content-type': 'application/json' },
  })
  t.equal(res.status, 400)
  t.equal(res.json.code, 'VALIDATION_FAILED')
  t.notMatch(res.text, /received/, 'the deep value is not echoed (the validator leaves large values out; the gateway would cut what it got)')
  t.ok(res.text.length < 300 * 1024, 'the error body is bounded')
  // A long string echoed in an error is cut too (20,000 characters: as long as a string of this
  // route may be before the body is parsed; longer ones are refused unparsed, 413).
  const long = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'x', channel: 'y'.repeat(20_000), duplicateStrategy: 'merge' } })
  t.equal(long.status, 400)
  t.ok(long.text.length < 2048, `a 20,000-character echo is cut (${long.text.length} bytes)`)
  const huge = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'x', channel: 'y'.repeat(1_000_000), duplicateStrategy: 'merge' } })
  t.match(huge, { status: 413, json: { code: 'PAYLOAD_TOO_LARGE' } }, 'a 1 MB string is refused before parsing')
  t.equal((await call(base, 'GET', '/healthz', { key: null })).status, 200, 'the process keeps serving')
})

t.test('conflicting Content-Length headers are refused and the connection closed', async t => {
  const { base } = await startTestService(t)
  const { rawExchange } = await import('../support/raw-http.js')
  const port = Number(new URL(base).port)
  const seen = await rawExchange(port, 'POST /dialer/v1/batches HTTP/1.1\r\nHost: a\r\napikey: x\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabcde', 3000)
  t.match(seen.text, /^HTTP\/1\.1 400 Bad Request\r\n/)
  t.match(seen.text, /"code":"INVALID_HEADER"/)
  t.equal(seen.outcome, 'closed', 'the connection is closed after the answer')
})
