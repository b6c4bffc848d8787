// An answer given before the request body was read (a refused upload, a 414, a 401) reaches a
// client that is still sending: the gateway reads the rest first (bounded), because uWS closes
// the connection when the answer goes out early and the client would see a reset instead.
// Found by the fuzz suite (FUZZ_SEED=241425522: an upload PUT refused while its 600 KB chunked
// body was still arriving gave the client EPIPE); this keeps the plain cases in view.
import t from 'tap'
import { request } from 'node:http'
import { KEYS, startTestService } from '../support/harness.js'

function send(port: number, method: string, path: string, body: string, headers: Record<string, string>) {
  return new Promise<{ status: number; text: string } | string>(resolve => {
    const req = request({ host: '127.0.0.1', port, method, path, headers: { 'transfer-encoding': 'chunked', ...headers }, agent: false })
    req.on('response', res => {
      let text = ''
      res.on('data', d => (text += d))
      res.on('end', () => resolve({ status: res.statusCode!, text }))
    })
    req.on('error', error => resolve(error.message))
    const half = Math.floor(body.length / 2)
    req.write(body.slice(0, half))
    setImmediate(() => req.end(body.slice(half)))
  })
}

t.test('early answers reach a client that is still sending its body', async t => {
  const { service } = await startTestService(t)
  const body = 'x'.repeat(600_000)
  for (const path of ['/dialer/v1/uploads/b1efc5db-399b-4c65-ab77-9c2f4099b67d', '/dialer/v1/uploads/csv_00000000000000000000000000000000?expires=1&signature=x']) {
    const upload = await send(service.port, 'PUT', path, body, { 'content-type': 'application/json' })
    t.match(upload, { status: 403 }, `a refused upload gets its 403, not a reset (${path.slice(0, 40)})`)
  }
  const unauthenticated = await send(service.port, 'POST', '/dialer/v1/batches', body, { 'content-type': 'application/json', apikey: 'not-a-key-000000000000000' })
  t.match(unauthenticated, { status: 401 }, 'a 401 before the body is read')
  const longUrl = await send(service.port, 'POST', `/dialer/v1/batches?x=${'y'.repeat(9000)}`, body, { 'content-type': 'application/json', apikey: KEYS.acme })
  t.match(longUrl, { status: 414 })
})
