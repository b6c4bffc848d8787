// What a client sees, byte for byte, for heads at the edge of the uWebSockets.js 20.30 parser
// (@trufflesuite/uws-js-unofficial). The parser cannot tell "malformed" from "incomplete": a bad
// head shorter than its 4 KiB carry-over buffer waits for more bytes until the HTTP idle timeout
// (10 s, swept every 4 s: 8-12 s) and the connection is closed without a status; a bad head that
// fills the buffer is closed at once. Our code answers what reaches it (414, 431, 400). This test
// records each outcome so that a change (a new uWS build, a proxy in front) is visible; the same
// table is in docs/deploy.md. "At once" is told from "after the idle timeout" by a connection
// opened alongside that sends nothing (uWS closes it at the idle timeout), not by a wall-clock bound.
import t from 'tap'
import { rawExchange, type RawOutcome } from '../support/raw-http.js'
import { KEYS, startTestService } from '../support/harness.js'
import net from 'node:net'

// Far above the idle timeout: only a connection left open stalls until it.
const BOUND_MS = 30_000
const head = (lines: string[]) => lines.join('\r\n') + '\r\n\r\n'
const headers = (n: number, size = 1) => Array.from({ length: n }, (_, i) => `x-h${i}: ${'v'.repeat(size)}`)

/** Writes a head in two parts with a pause, so it spans two reads on the server. */
function splitExchange(port: number, parts: string[], boundMs: number): Promise<RawOutcome> {
  return new Promise(resolve => {
    const started = Date.now()
    let text = ''
    const socket = net.connect(port, '127.0.0.1', async () => {
      for (const part of parts) {
        socket.write(part)
        await new Promise(r => setTimeout(r, 100))
      }
    })
    const done = (outcome: 'closed' | 'stalled') => {
      clearTimeout(timer)
      socket.destroy()
      resolve({ text, outcome, status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]) || undefined, ms: Date.now() - started })
    }
    const timer = setTimeout(() => done('stalled'), boundMs)
    socket.on('data', chunk => (text += chunk.toString('latin1')))
    socket.on('error', () => {})
    socket.on('close', () => done('closed'))
  })
}

t.test('the uWS parser: what a client sees', async t => {
  const { base } = await startTestService(t)
  const port = Number(new URL(base).port)
  const get = (extra: string[], target = '/dialer/v1/batches') => head([`GET ${target} HTTP/1.1`, 'Host: a', `apikey: ${KEYS.acme}`, ...extra, 'Connection: close'])

  // All at once: the idle-timeout cases take 8-12 s each.
  const more = Promise.all([
    rawExchange(port, get(['x_note: k']), BOUND_MS), // a token character uWS does not take in a name
    rawExchange(port, get(['x.note: k']), BOUND_MS),
    rawExchange(port, get(['x-note: k', ' folded']), BOUND_MS), // obs-fold
    rawExchange(port, get(['x-note: k\rz']), BOUND_MS),
    rawExchange(port, get(['x-note: k\x01']), BOUND_MS, { halfClose: true }),
    rawExchange(port, get(['Content-Length: 1e3']), BOUND_MS),
    rawExchange(port, head(['get /healthz HTTP/1.1', 'Host: a', 'Connection: close']), BOUND_MS),
    rawExchange(port, get(['x-note: k\x7fz']), BOUND_MS),
    rawExchange(port, get(['x-note: k\x80z']), BOUND_MS),
  ])
  const [idle, ctl, nul, many, manyLarge, badLine, http10, bareLf, teCl, noHost, bigInOneRead, bigSplit, hugeHead, longUrl, bigHeaders, dupCl, fine] = await Promise.all([
    rawExchange(port, '', BOUND_MS), // says nothing: closed by the idle timeout
    rawExchange(port, get(['x-note: k\x01']), BOUND_MS),
    rawExchange(port, get(['x-note: k\x00z']), BOUND_MS),
    rawExchange(port, get(headers(300)), BOUND_MS), // ~3.3 KB: fits the carry-over buffer, waits
    rawExchange(port, get(headers(300, 10)), BOUND_MS), // ~6 KB: over it, closed at once
    rawExchange(port, 'GARBAGE\r\n\r\n', BOUND_MS),
    rawExchange(port, 'GET /healthz HTTP/1.0\r\n\r\n', BOUND_MS),
    rawExchange(port, 'GET /healthz HTTP/1.1\nHost: a\nConnection: close\n\n', BOUND_MS),
    rawExchange(port, head(['POST /dialer/v1/batches HTTP/1.1', 'Host: a', 'Content-Length: 3', 'Transfer-Encoding: chunked']) + '3\r\nabc\r\n0\r\n\r\n', BOUND_MS),
    rawExchange(port, head(['GET /healthz HTTP/1.1', 'Connection: close']), BOUND_MS),
    rawExchange(port, get([`x-big: ${'a'.repeat(10_000)}`], '/healthz'), BOUND_MS),
    splitExchange(port, [`GET /healthz HTTP/1.1\r\nHost: a\r\nx-big: ${'a'.repeat(3000)}`, 'a'.repeat(3000)], BOUND_MS),
    rawExchange(port, get([`x-big: ${'a'.repeat(600 * 1024)}`], '/healthz'), BOUND_MS),
    rawExchange(port, get([], `/dialer/v1/batches?x=${'a'.repeat(10_000)}`), BOUND_MS),
    rawExchange(port, get(headers(40, 500)), BOUND_MS),
    rawExchange(port, head(['POST /dialer/v1/batches HTTP/1.1', 'Host: a', 'Content-Length: 3', 'Content-Length: 5']) + 'abcde', BOUND_MS),
    rawExchange(port, get([]), BOUND_MS),
  ])
  const silentAfterIdle = (name: string, o: RawOutcome) => {
    t.equal(o.text, '', `${name}: no status, no bytes`)
    t.equal(o.outcome, 'closed', `${name}: closed by the server`)
    t.ok(o.ms >= 7000 && o.ms < BOUND_MS, `${name}: after the idle timeout (${o.ms} ms)`)
  }
  const silentAtOnce = (name: string, o: RawOutcome) => {
    t.equal(o.text, '', `${name}: no status, no bytes`)
    t.equal(o.outcome, 'closed', `${name}: closed by the server`)
    t.ok(o.ms < idle.ms, `${name}: at once, before the idle timeout (${o.ms} ms, idle ${idle.ms} ms)`)
  }
  silentAfterIdle('a connection that sends nothing', idle)
  silentAfterIdle('control byte in a header value', ctl)
  silentAfterIdle('NUL in a header value', nul)
  silentAfterIdle('300 header fields (3.3 KB)', many)
  silentAtOnce('300 header fields (6 KB)', manyLarge)
  silentAfterIdle('a bad request line', badLine)
  silentAfterIdle('HTTP/1.0', http10)
  silentAfterIdle('bare LF line endings', bareLf)
  silentAtOnce('Transfer-Encoding with Content-Length', teCl)
  silentAtOnce('no Host header', noHost)
  t.equal(bigInOneRead.status, 200, 'a 10 KB header in one read is parsed by uWS; under MAX_HEADER_BYTES it is served')
  silentAtOnce('a head over 4 KiB arriving in two reads', bigSplit)
  silentAtOnce('a 600 KiB head (over the 512 KiB read buffer)', hugeHead)

  t.equal(longUrl.status, 414, 'a 10 KB URL: 414 from our code')
  t.match(longUrl.text, /"code":"URI_TOO_LONG"/)
  t.equal(bigHeaders.status, 431, '20 KB of headers parsed by uWS: 431 from our code')
  t.match(bigHeaders.text, /"code":"HEADERS_TOO_LARGE"/)
  t.equal(dupCl.status, 400, 'conflicting Content-Length: 400 from our code')
  t.match(dupCl.text, /"code":"INVALID_HEADER"/)
  t.equal(dupCl.outcome, 'closed', 'and the connection is closed')

  const [underscore, dot, fold, bareCr, halfClosed, badCl, lowerMethod, del, high] = await more
  silentAfterIdle('an underscore in a header name', underscore)
  silentAfterIdle('a dot in a header name', dot)
  silentAfterIdle('an obs-fold continuation line', fold)
  silentAfterIdle('a bare CR in a header value', bareCr)
  silentAtOnce('a control byte in a value, then the client half-closes', halfClosed)
  silentAtOnce('a Content-Length that is not digits', badCl)
  silentAtOnce('a method uWS does not list (lower case, or any other token): no route, closed', lowerMethod)
  t.equal(del.status, 200, 'DEL in a header value passes uWS and reaches our code')
  t.equal(high.status, 200, 'a byte over 0x7f in a header value passes uWS and reaches our code')

  t.equal(fine.status, 200)
  // The identifying header is written by the prebuilt binary itself (no way to turn it off from
  // JS in 20.30); a proxy in front strips it (docs/deploy.md).
  t.match(fine.text, /\r\nuWebSockets: 20\r\n/, 'the binary still writes its uWebSockets: 20 header')
  t.equal((await fetch(`${base}/healthz`)).status, 200, 'the service is alive after all of it')
})
