// The gateway's error boundary, with routes that fail on purpose in every place a request can
// fail: a handler that throws or rejects with a non-Error, a result that cannot be serialized,
// an upload handler that throws mid-body, a stream that throws after its head was sent, an SSE
// writer whose timer throws. A real Gateway on a real socket; the process must survive each one,
// and each answer is the JSON envelope (500 for our faults), logged once and counted.
import t from 'tap'
import { Gateway } from '../../gateway/server.js'
import { KeyRegistry, parseBootstrapKeys } from '../../gateway/auth.js'
import { AuthThrottle } from '../../gateway/auth-throttle.js'
import { HeartbeatWheel, SseStream } from '../../gateway/sse.js'
import { loadNativeUws } from '../../gateway/uws.js'
import { ApiError, type Route } from '../../platform/http.js'
import { createLogger } from '../../platform/logger.js'
import { createMetrics } from '../../platform/metrics.js'
import { MemoryStore } from '../../platform/store/index.js'
import { openSse } from '../support/sse.js'
import { call, KEYS } from '../support/harness.js'

const deep = () => {
  let value: unknown = 1
  for (let i = 0; i < 100_000; i++) value = [value]
  return value
}

const routes: Route[] = [
  { method: 'get', path: '/t/throws', summary: '', tag: 't', role: null, handle: async () => { throw new Error('handler bug') } },
  { method: 'get', path: '/t/rejects-string', summary: '', tag: 't', role: null, handle: () => Promise.reject('not an Error') },
  { method: 'get', path: '/t/sync-throw', summary: '', tag: 't', role: null, handle: (() => { throw new TypeError('thrown before any promise') }) as never },
  { method: 'get', path: '/t/unserializable', summary: '', tag: 't', role: null, handle: async () => ({ status: 200, body: { n: 10n } }) },
  { method: 'get', path: '/t/too-deep-result', summary: '', tag: 't', role: null, handle: async () => ({ status: 200, body: deep() }) },
  { method: 'get', path: '/t/deep-api-error', summary: '', tag: 't', role: null, handle: async () => { throw new ApiError(422, 'ODD', 'odd value', { received: deep(), big: 'x'.repeat(5_000_000) }) } },
  {
    method: 'post', path: '/t/upload-throws', summary: '', tag: 't', role: null, kind: 'upload',
    handle: async (_ctx, body) => {
      for await (const _chunk of body) throw new Error('upload consumer bug')
      return { status: 200 }
    },
  },
  {
    method: 'get', path: '/t/stream-throws', summary: '', tag: 't', role: null, kind: 'stream',
    open: async (_ctx, start) => {
      const sink = start()
      sink.write('event: first\ndata: {}\n\n')
      throw new Error('stream bug after the head')
    },
  },
  {
    method: 'get', path: '/t/sse-timer-throws', summary: '', tag: 't', role: null, kind: 'stream',
    open: async (_ctx, start) => {
      let beats = 0
      const stream = new SseStream(start(), {
        heartbeats: new HeartbeatWheel(20, 'event: hearthbeat\ndata: {}\n\n'),
        currentId: () => {
          if (++beats > 2) throw new Error('writer bug in a timer')
          return beats
        },
        onDropped: () => {},
      })
      stream.send(1, 'event: hello\ndata: {}\n\n')
    },
  },
  { method: 'get', path: '/t/ok', summary: '', tag: 't', role: 'dialer', handle: async () => ({ status: 200, body: { ok: true } }) },
]

t.test('every kind of failure becomes an answer; the process keeps serving', async t => {
  const lines: Record<string, any>[] = []
  const logger = createLogger('info', {}, line => lines.push(JSON.parse(line)))
  const metrics = createMetrics()
  const store = new MemoryStore()
  t.teardown(() => store.close())
  const gateway = new Gateway({
    uws: loadNativeUws(),
    routes,
    keys: new KeyRegistry(parseBootstrapKeys(`${KEYS.acme}=acme`), store),
    metrics,
    logger,
    maxBodyBytes: 1024 * 1024,
    maxUploadBytes: 1024 * 1024,
    maxJsonDepth: 64,
    streamBufferBytes: 64 * 1024,
    authThrottle: new AuthThrottle({ limit: 0, windowMs: 1000, maxAddresses: 10 }),
    publicDocuments: { '/t/doc-throws': async () => { throw new Error('document bug') } },
  })
  const port = await gateway.listen(0, '127.0.0.1')
  t.teardown(() => gateway.close())
  const base = `http://127.0.0.1:${port}`

  for (const path of ['/t/throws', '/t/rejects-string', '/t/sync-throw', '/t/unserializable', '/t/too-deep-result', '/t/doc-throws']) {
    const rid = `rid-${path.slice(3)}`
    const res = await call(base, 'GET', path, { key: null, headers: { 'x-request-id': rid } })
    t.equal(res.status, 500, path)
    t.match(res.json, { code: 'INTERNAL', message: 'Unexpected server error', requestId: rid }, path)
    t.notMatch(res.text, /bug|not an Error|BigInt|stack/i, `${path}: no internals leak to the client`)
    const logged = lines.filter(l => l.requestId === rid)
    t.equal(logged.length, 1, `${path}: logged once`)
    t.match(logged[0], { level: 'error', msg: 'request failed', status: 500 })
  }

  const odd = await call(base, 'GET', '/t/deep-api-error', { key: null })
  t.equal(odd.status, 422, "an ApiError keeps its status though its extras are hostile")
  t.equal(odd.json.code, 'ODD')
  t.ok(odd.text.length <= 256 * 1024, `the body is bounded (${odd.text.length} bytes)`)

  const upload = await fetch(`${base}/t/upload-throws`, { method: 'POST', body: 'a,b\n1,2\n' })
  t.equal(upload.status, 500)
  t.equal((await upload.json()).code, 'INTERNAL')

  // A stream that fails after its head was sent cannot answer JSON: it is ended, not left hanging.
  const broken = await openSse(base, 'GET', '/t/stream-throws', { key: null })
  t.equal(broken.status, 200)
  await Promise.race([broken.stream!.done, new Promise((_, reject) => setTimeout(() => reject(new Error('stream left open')), 3000))])
  t.same(broken.stream!.names(), ['first'], 'what was written before the fault arrives')

  // A throw inside an SSE writer's timer ends that stream only, and is logged.
  const beating = await openSse(base, 'GET', '/t/sse-timer-throws', { key: null })
  await Promise.race([beating.stream!.done, new Promise((_, reject) => setTimeout(() => reject(new Error('stream left open')), 3000))])
  t.ok(beating.stream!.names().includes('hello'))
  t.ok(lines.some(l => l.msg === 'request fault' && /writer bug in a timer/.test(l.error?.message)), 'the writer fault is logged')

  const after = await call(base, 'GET', '/t/ok')
  t.equal(after.status, 200, 'the gateway keeps serving')
  const text = await metrics.registry.metrics()
  t.match(text, /switchboard_http_errors_total\{status="500",code="INTERNAL"\} 8/, 'each 500 counted by status and code')
  t.match(text, /switchboard_http_errors_total\{status="422",code="ODD"\} 1/)
  t.match(text, /switchboard_http_errors_total\{status="500",code="FAULT"\} 1/, 'the timer fault is counted')
})
