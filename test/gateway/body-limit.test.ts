// A body over the limit is answered 413 PAYLOAD_TOO_LARGE whether it is sized (Content-Length)
// or chunked, and the client reads that answer: the gateway stops keeping the body once it is
// over, drops the rest as it arrives, then answers; the connection carries the next request.
// Over real sockets: node:http as a client that writes while the answer may already be out,
// raw TCP for keep-alive and what the connection does after.
import t from 'tap'
import { request } from 'node:http'
import net from 'node:net'
import { KEYS, call, startTestService } from '../support/harness.js'

const LIMIT = 4096
const PATH = '/dialer/v1/blocked-addresses'

/** Writes `body` in `pieces` writes, one per turn of the client's loop, as a streaming client does. */
function send(port: number, body: string, framing: 'chunked' | 'sized', pieces = 16) {
  return new Promise<{ status: number; json: any } | string>(resolve => {
    const headers: Record<string, string> = { apikey: KEYS.acme, 'content-type': 'application/json' }
    if (framing === 'chunked') headers['transfer-encoding'] = 'chunked'
    else headers['content-length'] = String(Buffer.byteLength(body))
    const req = request({ host: '127.0.0.1', port, method: 'POST', path: PATH, headers, agent: false })
    req.on('response', res => {
      let text = ''
      res.on('data', d => (text += d))
      res.on('end', () => resolve({ status: res.statusCode!, json: JSON.parse(text) }))
    })
    req.on('error', error => resolve(`client: ${error.message}`))
    const size = Math.ceil(body.length / pieces)
    let at = 0
    const next = () => {
      if (at + size >= body.length) return void req.end(body.slice(at))
      req.write(body.slice(at, (at += size)))
      setImmediate(next)
    }
    next()
  })
}

/** One raw connection: writes each part (numbers are pauses in ms), then reads for `readMs`. */
async function rawConnection(port: number, parts: Array<string | number>, readMs = 300) {
  const socket = net.connect(port, '127.0.0.1')
  let text = ''
  let closed = false
  socket.on('data', d => (text += d.toString('latin1')))
  socket.on('error', () => {})
  socket.on('close', () => (closed = true))
  await new Promise(resolve => socket.once('connect', resolve))
  for (const part of parts) {
    if (typeof part === 'number') await new Promise(r => setTimeout(r, part))
    else if (!closed) socket.write(part)
  }
  const until = Date.now() + readMs
  while (!closed && Date.now() < until) await new Promise(r => setTimeout(r, 20))
  socket.destroy()
  return { statuses: [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map(m => Number(m[1])), text, closed }
}

const head = (framing: string) => `POST ${PATH} HTTP/1.1\r\nHost: a\r\napikey: ${KEYS.acme}\r\ncontent-type: application/json\r\n${framing}\r\n`
const chunkedFrames = (body: string, size: number) => {
  let framed = ''
  for (let i = 0; i < body.length; i += size) framed += `${Math.min(size, body.length - i).toString(16)}\r\n${body.slice(i, i + size)}\r\n`
  return `${framed}0\r\n\r\n`
}
const bigBody = (addresses: number) => JSON.stringify({ addresses: Array.from({ length: addresses }, (_, i) => String(34600000000 + i)), addressType: 'phone' })
const good = JSON.stringify({ address: '34611111111', addressType: 'phone' })

t.test('a body over the limit answers 413, chunked as sized', async t => {
  const { service, base } = await startTestService(t, { env: { MAX_BODY_BYTES: String(LIMIT) } })
  const port = service.port
  // ~7 KB in 16 writes: the body crosses the limit while the client is still writing it (what
  // is drained: up to MAX_BODY_BYTES more).
  const over = bigBody(500)
  for (const framing of ['chunked', 'sized'] as const) {
    const answer = await send(port, over, framing)
    t.match(answer, { status: 413, json: { code: 'PAYLOAD_TOO_LARGE', message: `Request body exceeds the limit of ${LIMIT} bytes`, maxBytes: LIMIT } }, `${framing}, ${over.length} bytes: 413, read by the client`)
  }
  const under = await send(port, good, 'chunked', 3)
  t.match(under, { status: 200, json: { blocked: 1 } }, 'a chunked body within the limit is taken')
  t.equal((await call(base, 'GET', `${PATH}?address=34611111111`)).json.data.length, 1, 'and kept')
})

t.test('the connection of a refused body carries the next request', async t => {
  const { service } = await startTestService(t, { env: { MAX_BODY_BYTES: String(LIMIT) } })
  const port = service.port
  const next = head(`Content-Length: ${good.length}\r\n`) + good
  const framed = chunkedFrames(bigBody(500), 1000)
  // Sent in parts with pauses: the gateway sees the body cross its limit before it ends.
  const chunked = await rawConnection(port, [head('Transfer-Encoding: chunked\r\n') + framed.slice(0, 3000), 30, framed.slice(3000, 5000), 30, framed.slice(5000), 100, next])
  t.same(chunked.statuses, [413, 200], 'chunked: 413, then the next request on the same connection is served')
  t.notOk(chunked.closed, 'the connection stays open')
  const body = bigBody(500)
  const sized = await rawConnection(port, [head(`Content-Length: ${body.length}\r\n`) + body.slice(0, 3000), 30, body.slice(3000), 100, next])
  t.same(sized.statuses, [413, 200], 'sized: the same')
})

t.test('a body far past the limit, or stalled past it, is answered and its connection closed', async t => {
  const { service, base } = await startTestService(t, { env: { MAX_BODY_BYTES: String(LIMIT) } })
  const port = service.port
  const declared = await rawConnection(port, [head('Content-Length: 104857600\r\n') + 'x'.repeat(1000)], 1000)
  t.same(declared.statuses, [413], 'declared beyond what is drained: 413 at once')
  t.ok(declared.closed, 'and the connection closed')
  t.match(declared.text, /"code":"PAYLOAD_TOO_LARGE"/)

  const endless = 'x'.repeat(64 * 1024)
  const streamed = await rawConnection(port, [head('Transfer-Encoding: chunked\r\n'), ...Array.from({ length: 12 }, () => [chunkedFrames(endless, endless.length).slice(0, -5), 5]).flat()], 1000)
  t.same(streamed.statuses, [413], 'chunked beyond what is drained: 413')
  t.ok(streamed.closed, 'and the connection closed')

  const started = Date.now()
  const stalled = await rawConnection(port, [head('Transfer-Encoding: chunked\r\n') + chunkedFrames('x'.repeat(LIMIT + 10), LIMIT + 10).slice(0, -5)], 4000)
  t.same(stalled.statuses, [413], 'a client that stops sending past the limit still gets its 413')
  t.ok(stalled.closed && Date.now() - started < 4000, 'within the drain bound, and the connection closed')

  t.equal((await call(base, 'GET', '/healthz', { key: null })).status, 200, 'the service keeps serving')
})

t.test('a refused body takes nothing from the requests beside it', async t => {
  const { service, base } = await startTestService(t, { env: { MAX_BODY_BYTES: String(LIMIT) } })
  const addresses = Array.from({ length: 20 }, (_, i) => String(34620000000 + i))
  const answers = await Promise.all([
    ...Array.from({ length: 4 }, () => send(service.port, bigBody(500), 'chunked', 64)),
    ...addresses.map(address => call(base, 'POST', PATH, { body: { address, addressType: 'phone' } }).then(r => r.status)),
  ])
  t.same(answers.slice(0, 4).map(a => (typeof a === 'string' ? a : a.status)), [413, 413, 413, 413])
  t.same(answers.slice(4), addresses.map(() => 200), 'every request beside them is served')
  const listed = await call(base, 'GET', `${PATH}?limit=100`)
  t.same(addresses.filter(a => !listed.json.data.some((d: any) => d.address === a)), [], 'and everything they were told was kept is kept')
})
