// The HTTP edge: health, metrics, the OpenAPI document, auth and the error envelope.
import t from 'tap'
import { call, startTestService } from '../support/harness.js'

t.test('public endpoints answer without a key', async t => {
  const { base, metricsBase } = await startTestService(t)
  const health = await call(base, 'GET', '/healthz', { key: null })
  t.equal(health.status, 200)
  t.equal(health.json.status, 'ok')
  t.equal(health.json.store, 'lmdb')

  const openapi = await call(base, 'GET', '/openapi.json', { key: null })
  t.equal(openapi.status, 200)
  t.equal(openapi.json.openapi, '3.1.0')
  t.ok(openapi.json.components.schemas['dialer.contact'], 'request schemas are published')

  const metrics = await fetch(`${metricsBase}/metrics`)
  t.equal(metrics.status, 200)
  t.match(await metrics.text(), /switchboard_http_requests_total/)
  t.equal((await fetch(`${metricsBase}/healthz`)).status, 200, 'the metrics listener answers health probes too')
})

t.test('/metrics is not served on the public API port', async t => {
  const { base } = await startTestService(t)
  const res = await call(base, 'GET', '/metrics', { key: null })
  t.equal(res.status, 404)
  t.equal(res.json.code, 'NOT_FOUND')
  t.notMatch(res.text, /switchboard_/)
})

t.test('METRICS_PORT=off: no metrics listener', async t => {
  const { service } = await startTestService(t, { env: { METRICS_PORT: 'off' } })
  t.equal(service.metricsPort, undefined)
})

t.test('unknown routes answer 404 with the error envelope', async t => {
  const { base } = await startTestService(t)
  const res = await call(base, 'GET', '/nope')
  t.equal(res.status, 404)
  t.equal(res.json.code, 'NOT_FOUND')
  t.type(res.json.message, 'string')
})

t.test('the native uWebSockets.js binary is what runs', async t => {
  const { loadNativeUws } = await import('../../gateway/uws.js')
  const uws = loadNativeUws()
  // The JS fallback has no getParts (multipart parser lives in the native addon).
  t.type(uws.getParts, 'function')
})
