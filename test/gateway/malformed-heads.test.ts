// What a client sees when a header of its request carries a byte the uWebSockets.js 20.30 parser
// refuses (a control byte in a value, a name that is not letters, digits and '-'), on every route
// the service has. The parser runs before any of our code and takes such a head for an incomplete
// one: it waits for more bytes until its HTTP idle timeout (10 s, swept every 4 s) and closes the
// connection without a status. Nothing in JavaScript sees the connection before a head parses, and
// that build has no option for the timeout (README, Edge limits and hygiene). A later uWS parser
// answers 400 at once, which this test also takes. Bytes the parser lets through reach our code
// and are answered at once.
import t from 'tap'
import { rawExchange, type RawOutcome } from '../support/raw-http.js'
import { KEYS, startTestService } from '../support/harness.js'
import { operationsOf } from '../fuzz/hostile.js'

// Far above the parser's idle timeout: the point is that the connection is never left open, not how fast.
const BOUND_MS = 30_000

function request(method: string, target: string, headers: string[]): string {
  const body = method === 'GET' || method === 'DELETE' ? '' : '{}'
  const framing = body ? ['Content-Type: application/json', `Content-Length: ${body.length}`] : []
  return [`${method} ${target} HTTP/1.1`, 'Host: a', ...headers, ...framing, 'Connection: close'].join('\r\n') + '\r\n\r\n' + body
}

/** A 400 from whichever parser, or a close without a single byte (the connection not left open). */
function refused(o: RawOutcome): boolean {
  return o.status === 400 || (o.text === '' && o.outcome === 'closed')
}

t.test('a control byte in apikey or Idempotency-Key is never answered and never left open, on every route', async t => {
  const { base } = await startTestService(t)
  const port = Number(new URL(base).port)
  const doc = await (await fetch(`${base}/openapi.json`)).json()
  const routes = [
    ...operationsOf(doc).map(op => ({ method: op.method.toUpperCase(), target: op.template.replace(/\{[^}]+\}/g, 'x') })),
    { method: 'GET', target: '/healthz' },
    { method: 'GET', target: '/openapi.json' },
    { method: 'GET', target: '/no/such/route' },
  ]
  t.ok(routes.length >= 40, `${routes.length} routes`)
  const variants = [
    { name: 'apikey: k\\x01', headers: ['apikey: k\x01'] },
    { name: 'apikey: \\x00k', headers: ['apikey: \x00k'] },
    { name: 'Idempotency-Key: a\\x1fb', headers: [`apikey: ${KEYS.acme}`, 'Idempotency-Key: a\x1fb'] },
  ]
  // All at once: each waits out the same idle timeout.
  const cases = routes.flatMap(route => variants.map(variant => ({ route, variant })))
  const pending = cases.map(({ route, variant }) => rawExchange(port, request(route.method, route.target, variant.headers), BOUND_MS))
  // The same heads without a bad byte (and without a key: 401, nothing created, the auth-failure
  // throttle not fed) reach our code and are answered.
  const clean = await Promise.all(routes.map(route => rawExchange(port, request(route.method, route.target, []), BOUND_MS)))
  clean.forEach((o, i) => t.ok(o.status !== undefined && o.status < 500, `${routes[i]!.method} ${routes[i]!.target} without the byte: answered ${o.status}`))
  t.equal((await fetch(`${base}/healthz`)).status, 200, 'the service answers others while those heads wait')

  const outcomes = await Promise.all(pending)
  const wrong = outcomes
    .map((o, i) => ({ o, c: cases[i]! }))
    .filter(({ o }) => !refused(o))
    .map(({ o, c }) => `${c.route.method} ${c.route.target} ${c.variant.name}: ${o.outcome}, ${JSON.stringify(o.text.slice(0, 80))}`)
  t.same(wrong, [], `${outcomes.length} heads: each answered 400 or closed without a byte, none left open`)
  const silent = outcomes.filter(o => o.status === undefined).length
  t.comment(`${silent} closed without an answer, ${outcomes.length - silent} answered 400`)
})

t.test('DEL or a non-ASCII byte in apikey or Idempotency-Key reaches the service and is answered', async t => {
  const { base } = await startTestService(t)
  const port = Number(new URL(base).port)
  const send = (headers: string[], method = 'POST') => rawExchange(port, request(method, '/dialer/v1/batches', headers), BOUND_MS)
  const [keyDel, keyHigh, idemDel, idemHigh, keyTrailingHigh] = await Promise.all([
    send(['apikey: k\x7fk'], 'GET'),
    send(['apikey: k\xe9k'], 'GET'),
    send([`apikey: ${KEYS.acme}`, 'Idempotency-Key: a\x7fb']),
    send([`apikey: ${KEYS.acme}`, 'Idempotency-Key: a\xf1b']),
    // uWS trims bytes above 0x7f at either end of a value as if they were spaces (it compares a
    // signed char): the key is read without them.
    send([`apikey: ${KEYS.acme}\xe9`], 'GET'),
  ])
  t.equal(keyDel.status, 401, 'DEL in apikey: 401')
  t.match(keyDel.text, /"code":"UNAUTHORIZED"/)
  t.equal(keyHigh.status, 401, 'a byte over 0x7f inside apikey: 401')
  t.equal(idemDel.status, 400, 'DEL in Idempotency-Key: 400')
  t.match(idemDel.text, /"code":"INVALID_IDEMPOTENCY_KEY"/)
  t.equal(idemHigh.status, 400, 'a byte over 0x7f in Idempotency-Key: 400')
  t.match(idemHigh.text, /"code":"INVALID_IDEMPOTENCY_KEY"/)
  t.equal(keyTrailingHigh.status, 200, 'a trailing byte over 0x7f is trimmed by uWS: the key is read without it')
})
