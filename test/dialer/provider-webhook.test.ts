// The webhook provider against a real HTTP receiver on 127.0.0.1: the attempt POST and its
// HMAC signature, the outcome posted back to the callback URL, retries with backoff (a receiver
// that fails twice), a bounded failure (a receiver that never answers), a refusal (4xx), and the
// callback endpoint's authentication (bad, missing, stale signature, an attempt POST replayed as
// a callback) and idempotency (409). Signatures are computed here from the documented string
// (README, the webhook provider), not with the implementation's own signing function.
import t from 'tap'
import { createHmac } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { call, eventually, STORES, startTestService } from '../support/harness.js'
import { freePort } from '../support/nats-server.js'
import { contact, createBatch, load, phone, startBatch } from '../support/dialer.js'
import { schedulerOf } from '../../dialer/scheduler/index.js'
import { WEBHOOK_REPORTS, WebhookProvider, type WebhookReportDoc } from '../../dialer/providers/index.js'
import { MemoryStore } from '../../platform/store/index.js'
import { loadConfig } from '../../platform/config.js'

const SECRET = 'test-webhook-secret-0123456789abcdef'

/**
 * As documented: "sha256=" + hex HMAC-SHA256(secret, "<label>.<timestamp>.<attempt id>.<raw body>"),
 * the label switchboard.attempt.v1 on attempt POSTs and switchboard.callback.v1 on callbacks.
 */
const hmac = (label: 'switchboard.attempt.v1' | 'switchboard.callback.v1', timestamp: string, attemptId: string, raw: string, secret = SECRET) =>
  `sha256=${createHmac('sha256', secret).update(`${label}.${timestamp}.${attemptId}.${raw}`, 'utf8').digest('hex')}`

interface Delivery {
  headers: IncomingMessage['headers']
  raw: string
  body: any
  signatureOk: boolean
}

type Handler = (delivery: Delivery, res: ServerResponse) => void

/** A receiver that checks every delivery's signature and lets each test decide the answer. */
async function startReceiver(t: { teardown(fn: () => unknown): void }) {
  const deliveries: Delivery[] = []
  let handler: Handler = (_d, res) => res.writeHead(200).end()
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', c => chunks.push(c))
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8')
      const timestamp = String(req.headers['x-switchboard-timestamp'])
      const signatureOk = req.headers['x-switchboard-signature'] === hmac('switchboard.attempt.v1', timestamp, JSON.parse(raw).attemptId, raw)
      const delivery = { headers: req.headers, raw, body: JSON.parse(raw), signatureOk }
      deliveries.push(delivery)
      handler(delivery, res)
    })
  })
  await new Promise<void>(r => server.listen(0, '127.0.0.1', r))
  t.teardown(
    () =>
      new Promise<void>(r => {
        server.closeAllConnections()
        server.close(() => r())
      }),
  )
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/attempts`,
    deliveries,
    on(next: Handler) {
      handler = next
      deliveries.length = 0
    },
  }
}

const attemptOf = (callbackUrl: string) => /attempts\/([^/]+)\/outcome/.exec(callbackUrl)![1]!

/** Posts an outcome to a callback URL the way a receiver does: signed over "switchboard.callback.v1.<timestamp>.<attempt id>.<body>". */
async function report(callbackUrl: string, body: unknown, options: { secret?: string; timestamp?: number; headers?: Record<string, string>; signedFor?: string } = {}) {
  const raw = JSON.stringify(body)
  const timestamp = String(options.timestamp ?? Math.floor(Date.now() / 1000))
  const res = await fetch(callbackUrl, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-switchboard-timestamp': timestamp,
      'x-switchboard-signature': hmac('switchboard.callback.v1', timestamp, options.signedFor ?? attemptOf(callbackUrl), raw, options.secret),
      ...options.headers,
    },
    body: raw,
  })
  const text = await res.text()
  return { status: res.status, json: text ? JSON.parse(text) : undefined }
}

const attemptsOf = async (base: string, batchId: string) => (await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts`)).json.data
const contactsOf = async (base: string, batchId: string) => (await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts`)).json.data

for (const store of STORES) {
  t.test(`webhook provider on the ${store} store`, async t => {
    const receiver = await startReceiver(t)
    // A known port, so the callback URLs the service builds (http://127.0.0.1:PORT/...) are right.
    const port = await freePort()
    const { base, service } = await startTestService(t, {
      store,
      env: {
        PORT: String(port),
        DIALER_CYCLE_MS: '0',
        DIALER_SIM_LATENCY_MS: '0',
        DIALER_PROVIDERS: 'phone=webhook',
        DIALER_WEBHOOK_URL: receiver.url,
        DIALER_WEBHOOK_SECRET: SECRET,
        DIALER_WEBHOOK_TIMEOUT_MS: '300',
        DIALER_WEBHOOK_MAX_TRIES: '3',
        DIALER_WEBHOOK_BACKOFF_MS: '50',
        DIALER_WEBHOOK_POLL_MS: '50',
        DIALER_WEBHOOK_OUTCOME_TIMEOUT_MS: '2000',
      },
    })
    const scheduler = schedulerOf(service.platform)
    const cycle = async () => {
      const report = await scheduler.runCycle()
      await scheduler.drain()
      return report
    }

    t.test('a signed POST per attempt; the outcome comes back on the callback; a second report is 409', async t => {
      const callbacks: Promise<{ status: number; json: any }>[] = []
      receiver.on((d, res) => {
        res.writeHead(202).end()
        // Reported after the answer, as a real dialing platform would.
        callbacks.push(report(d.body.callbackUrl, { outcome: 'answered', detail: 'talked 42 s' }))
      })
      const batchId = await createBatch(base)
      await load(base, batchId, { contacts: [contact(1, { customFields: { plan: 'gold', vip: true } })] })
      await startBatch(base, batchId)
      t.equal((await cycle()).claimed, 1)

      t.equal(receiver.deliveries.length, 1)
      const [d] = receiver.deliveries
      t.ok(d!.signatureOk, 'the signature verifies with the shared secret')
      t.match(d!.headers, { 'content-type': 'application/json', 'x-switchboard-delivery': '1', 'x-switchboard-signature': /^sha256=[0-9a-f]{64}$/ })
      const [attempt] = await attemptsOf(base, batchId)
      const [c] = await contactsOf(base, batchId)
      t.same(d!.body, {
        attemptId: attempt.attemptId,
        batchId,
        contactId: c.contactId,
        identifier: 'c1',
        address: phone(1),
        type: 'phone',
        customFields: { plan: 'gold', vip: true },
        callbackUrl: `http://127.0.0.1:${port}/dialer/v1/attempts/${attempt.attemptId}/outcome`,
      })
      t.match(await callbacks[0], { status: 200, json: { attemptId: attempt.attemptId, outcome: 'answered', status: 'accepted' } })
      t.match(attempt, { provider: 'webhook', outcome: 'answered', detail: 'talked 42 s' })
      t.match(c, { state: 'done' })

      const again = await report(d!.body.callbackUrl, { outcome: 'busy' })
      t.equal(again.status, 409, 'a finished attempt takes no second report')
      t.match(again.json, { code: 'ATTEMPT_FINISHED', outcome: 'answered' })
    })

    t.test('5xx twice, then accepted: retried with backoff', async t => {
      const times: number[] = []
      receiver.on((d, res) => {
        times.push(Date.now())
        if (receiver.deliveries.length <= 2) return void res.writeHead(503).end()
        res.writeHead(200).end()
        void report(d.body.callbackUrl, { outcome: 'busy' })
      })
      const batchId = await createBatch(base)
      await load(base, batchId, { contacts: [contact(2)] })
      await startBatch(base, batchId)
      await cycle()
      t.equal(receiver.deliveries.length, 3)
      t.same(receiver.deliveries.map(d => d.headers['x-switchboard-delivery']), ['1', '2', '3'])
      t.ok(receiver.deliveries.every(d => d.signatureOk && d.raw === receiver.deliveries[0]!.raw), 'the same signed body each time')
      t.ok(times[1]! - times[0]! >= 45, `1st backoff ${times[1]! - times[0]!} ms`)
      t.ok(times[2]! - times[1]! >= 95, `2nd backoff doubled: ${times[2]! - times[1]!} ms`)
      const [attempt] = await attemptsOf(base, batchId)
      t.match(attempt, { outcome: 'busy' })
      const [c] = await contactsOf(base, batchId)
      t.match(c, { state: 'pending', attempts: 1 }, 'busy is retried later')
    })

    t.test('a receiver that never answers: bounded tries, then failed', async t => {
      receiver.on(() => undefined) // holds every request open
      const batchId = await createBatch(base)
      await load(base, batchId, { contacts: [contact(3)] })
      await startBatch(base, batchId)
      // The cycle ends: each try is cut at its timeout (the detail below says so), never left waiting.
      await cycle()
      t.equal(receiver.deliveries.length, 3, 'DIALER_WEBHOOK_MAX_TRIES')
      const [attempt] = await attemptsOf(base, batchId)
      t.match(attempt, { outcome: 'failed', detail: /webhook not delivered: gave up after 3 tries \(last: no answer within 300 ms\)/ })
    })

    t.test('a 4xx refusal is not retried; an accepted attempt without a report times out as failed', async t => {
      receiver.on((_d, res) => res.writeHead(422).end())
      const batchId = await createBatch(base)
      await load(base, batchId, { contacts: [contact(4)] })
      await startBatch(base, batchId)
      await cycle()
      t.equal(receiver.deliveries.length, 1)
      t.match((await attemptsOf(base, batchId))[0], { outcome: 'failed', detail: /refused with HTTP 422/ })

      receiver.on((_d, res) => res.writeHead(200).end())
      const silent = await createBatch(base)
      await load(base, silent, { contacts: [contact(5)] })
      await startBatch(base, silent)
      await cycle()
      const [attempt] = await attemptsOf(base, silent)
      t.match(attempt, { outcome: 'failed', detail: /reported no outcome within 2000 ms/ })
      const late = await report(receiver.deliveries[0]!.body.callbackUrl, { outcome: 'answered' })
      t.match(late, { status: 409, json: { code: 'ATTEMPT_FINISHED', outcome: 'failed' } })
    })

    t.test('the callback is authenticated by the signature, not an apikey', async t => {
      let callbackUrl = ''
      let captured: Delivery | undefined
      let release: () => void = () => undefined
      const accepted = new Promise<void>(r => (release = r))
      receiver.on((d, res) => {
        callbackUrl = d.body.callbackUrl
        captured = d
        res.writeHead(200).end()
        release()
      })
      const batchId = await createBatch(base)
      await load(base, batchId, { contacts: [contact(6)] })
      await startBatch(base, batchId)
      await scheduler.runCycle()
      await accepted

      // Whoever sees an attempt POST (the receiver, a log, a proxy) holds a fresh signature over
      // that attempt id: it must not pass as that attempt's callback.
      const replayedPost = await fetch(callbackUrl, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-switchboard-timestamp': String(captured!.headers['x-switchboard-timestamp']),
          'x-switchboard-signature': String(captured!.headers['x-switchboard-signature']),
        },
        body: captured!.raw,
      })
      t.equal(replayedPost.status, 401, 'a captured attempt POST replayed as the callback is refused as unsigned, not read as a bad body')
      t.match(await replayedPost.json(), { code: 'INVALID_SIGNATURE' })
      const postSignedAsCallback = await fetch(callbackUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-switchboard-timestamp': String(captured!.headers['x-switchboard-timestamp']), 'x-switchboard-signature': String(captured!.headers['x-switchboard-signature']) },
        body: '{"outcome":"answered"}',
      })
      t.equal(postSignedAsCallback.status, 401, "the attempt POST's signature over another body is refused too")
      const attemptLabel = await fetch(callbackUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-switchboard-timestamp': String(Math.floor(Date.now() / 1000)), 'x-switchboard-signature': hmac('switchboard.attempt.v1', String(Math.floor(Date.now() / 1000)), attemptOf(callbackUrl), '{"outcome":"answered"}') },
        body: '{"outcome":"answered"}',
      })
      t.equal(attemptLabel.status, 401, 'a report signed with the attempt label is refused')

      const wrongSecret = await report(callbackUrl, { outcome: 'answered' }, { secret: 'not-the-secret' })
      t.match(wrongSecret, { status: 401, json: { code: 'INVALID_SIGNATURE', message: /does not match/ } })
      const tampered = await fetch(callbackUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-switchboard-timestamp': '1', 'x-switchboard-signature': hmac('switchboard.callback.v1', '1', attemptOf(callbackUrl), '{"outcome":"answered"}') },
        body: '{"outcome":"answered"}',
      })
      t.equal(tampered.status, 401, 'a stale timestamp (replay) is refused')
      const bare = await call(base, 'POST', new URL(callbackUrl).pathname, { body: { outcome: 'answered' } })
      t.match(bare, { status: 401, json: { code: 'INVALID_SIGNATURE' } }, 'an apikey is no substitute')
      const badBody = await report(callbackUrl, { outcome: 'hung_up' })
      t.equal(badBody.status, 400)
      const otherAttempt = callbackUrl.replace(/attempts\/[^/]+/, 'attempts/00000000-0000-4000-8000-000000000000')
      const replayed = await report(otherAttempt, { outcome: 'answered' }, { signedFor: attemptOf(callbackUrl) })
      t.match(replayed, { status: 401, json: { code: 'INVALID_SIGNATURE' } }, "a report signed for one attempt is refused on another (another account's included)")
      const unknown = await report(otherAttempt, { outcome: 'answered' })
      t.match(unknown, { status: 404, json: { code: 'ATTEMPT_NOT_FOUND' } })
      t.equal((await attemptsOf(base, batchId))[0].outcome, null, 'still in flight after the refused reports')

      const [first, second] = await Promise.all([report(callbackUrl, { outcome: 'voicemail' }), report(callbackUrl, { outcome: 'answered' })])
      t.same([first.status, second.status].sort(), [200, 409], 'of two racing reports exactly one is taken')
      await scheduler.drain()
      const winner = first.status === 200 ? 'voicemail' : 'answered'
      t.match((await attemptsOf(base, batchId))[0], { outcome: winner })
    })

    t.test('rules.provider overrides the channel mapping', async t => {
      receiver.on((_d, res) => res.writeHead(500).end())
      const batchId = await createBatch(base, { rules: { provider: 'simulated' } })
      await load(base, batchId, { contacts: [contact(7, { customFields: { simulatedOutcomes: 'answered' } })] })
      await startBatch(base, batchId)
      await cycle()
      t.equal(receiver.deliveries.length, 0)
      t.match((await attemptsOf(base, batchId))[0], { provider: 'simulated', outcome: 'answered' })
      const refused = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'x', channel: 'email', duplicateStrategy: 'merge', rules: { provider: 'assistant' } } })
      t.equal(refused.status, 400, 'no assistant on an e-mail batch')
      const unknown = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'x', channel: 'phone', duplicateStrategy: 'merge', rules: { provider: 'carrier-pigeon' } } })
      t.equal(unknown.status, 400)
    })
  })
}

t.test('stopping the service ends an attempt still being retried, without further tries', async t => {
  const receiver = await startReceiver(t)
  receiver.on((_d, res) => res.writeHead(503).end())
  const provider = new WebhookProvider({
    url: receiver.url,
    secret: SECRET,
    callbackBaseUrl: 'http://127.0.0.1:1',
    timeoutMs: 1000,
    maxTries: 10,
    // Long enough that the stop comes while it waits to try again, however slow the machine.
    backoffMs: 2000,
    outcomeTimeoutMs: 60_000,
    pollMs: 1000,
  })
  const pending = provider.dial({
    attemptId: 'a1',
    accountId: 'acme',
    batchId: 'b',
    contactId: 'c',
    identifier: 'c1',
    channel: 'phone',
    address: { address: phone(1), type: 'phone', priority: 1 },
    attemptNumber: 1,
    name: 'x',
    customFields: {},
  })
  await eventually(async () => receiver.deliveries.length, n => n >= 1)
  provider.close()
  // The receiver never took it (503 each time): failed, not handed over. The wait in progress is
  // not cut short: the attempt ends when it is over, instead of trying again.
  t.match(await pending, { outcome: 'failed', detail: /webhook not delivered: service stopping \(after 1 tries/ })
  await new Promise(r => setTimeout(r, 400))
  t.equal(receiver.deliveries.length, 1, 'no delivery after the stop')
})

t.test('a DIALER_WEBHOOK_SECRET shorter than 32 bytes stops the start with a clear error', async t => {
  const webhook = { DIALER_PROVIDERS: 'phone=webhook', DIALER_WEBHOOK_URL: 'http://127.0.0.1:9/calls' }
  t.throws(() => loadConfig({ ...webhook, DIALER_WEBHOOK_SECRET: 'x'.repeat(31) }), { name: 'ConfigError', message: /DIALER_WEBHOOK_SECRET must be at least 32 bytes \(got 31\)/ })
  t.throws(() => loadConfig({ DIALER_WEBHOOK_SECRET: 'short' }), { name: 'ConfigError', message: /DIALER_WEBHOOK_SECRET must be at least 32 bytes/ }, 'also when no channel uses the webhook yet (callbacks are checked with it)')
  t.equal(loadConfig({ ...webhook, DIALER_WEBHOOK_SECRET: 'x'.repeat(32) }).dialer.webhook.secret, 'x'.repeat(32))
  t.equal(loadConfig({ ...webhook, DIALER_WEBHOOK_SECRET: 'é'.repeat(16) }).dialer.webhook.secret.length, 16, 'bytes, not characters: 16 × é is 32 bytes')
  t.equal(loadConfig({}).dialer.webhook.secret, '', 'unset: no webhook, callbacks refused')
})

t.test('DIALER_PROVIDERS is checked at start', async t => {
  t.same(loadConfig({}).dialer.providers, { phone: 'simulated', email: 'simulated', whatsapp: 'simulated' })
  t.same(loadConfig({ DIALER_PROVIDERS: 'phone=assistant, whatsapp=assistant' }).dialer.providers, { phone: 'assistant', email: 'simulated', whatsapp: 'assistant' })
  t.throws(() => loadConfig({ DIALER_PROVIDERS: 'fax=simulated' }), /unknown channel "fax"/)
  t.throws(() => loadConfig({ DIALER_PROVIDERS: 'phone=pigeon' }), /unknown provider "pigeon"/)
  t.throws(() => loadConfig({ DIALER_PROVIDERS: 'email=assistant' }), /phone and whatsapp only/)
  t.throws(() => loadConfig({ DIALER_PROVIDERS: 'email=webhook' }), /DIALER_WEBHOOK_URL and DIALER_WEBHOOK_SECRET/)
  t.throws(() => loadConfig({ DIALER_PROVIDERS: 'email=webhook', DIALER_WEBHOOK_URL: 'ftp://x', DIALER_WEBHOOK_SECRET: 's' }), /DIALER_WEBHOOK_URL must use/)
})

t.test('stopping the service hands over an attempt the receiver took; resume() in the next process follows it to its report', async t => {
  const receiver = await startReceiver(t)
  const reports = new MemoryStore().collection<WebhookReportDoc>(WEBHOOK_REPORTS)
  const options = { url: receiver.url, secret: SECRET, callbackBaseUrl: 'http://127.0.0.1:1', timeoutMs: 1000, maxTries: 1, backoffMs: 0, outcomeTimeoutMs: 60_000, pollMs: 50 }
  const request = {
    attemptId: 'a2',
    accountId: 'acme',
    batchId: 'b',
    contactId: 'c',
    identifier: 'c2',
    channel: 'phone' as const,
    address: { address: phone(2), type: 'phone' as const, priority: 1 },
    attemptNumber: 1,
    name: 'x',
    customFields: {},
  }
  const provider = new WebhookProvider(options, reports)
  const pending = provider.dial(request)
  for (let i = 0; i < 100 && receiver.deliveries.length === 0; i++) await new Promise(r => setTimeout(r, 20))
  await new Promise(r => setTimeout(r, 50))
  provider.close()
  await t.rejects(pending, { name: 'AttemptHandedOver' }, 'the call goes on at the receiver: handed over, not recorded as failed')

  const next = new WebhookProvider(options, reports)
  const followed = next.resume({ attemptId: 'a2', accountId: 'acme', startedAt: Date.now() })
  await reports.insertOne({ _id: 'a2', outcome: 'answered', detail: 'carrier', receivedAt: new Date() })
  t.match(await followed, { outcome: 'answered', detail: 'carrier' }, 'its report, stored by any process, ends it')
  const late = await next.resume({ attemptId: 'a3', accountId: 'acme', startedAt: Date.now() - 60_000 })
  t.match(late, { outcome: 'failed', detail: /reported no outcome within 60000 ms/ }, 'the outcome timeout counts from the attempt\'s start')
})
