// A `make run`-style process (embedded store, no external server) killed with SIGKILL while its
// attempts are in flight: the contacts it had claimed fill the batch's room. The next process on
// the same DATA_DIR must dial them again once the dead scheduler has been silent for
// DIALER_SCHEDULER_DEAD_AFTER_MS (2 s here; 60 s by default), not after the 1 h claim timeout;
// and webhook calls, which go on at the receiver, are followed to the outcome it reports instead
// of being closed as failed and called a second time.
import t from 'tap'
import { createHmac } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { API_KEYS, call } from '../support/harness.js'
import { startProcess, waitHealthy } from '../support/processes.js'
import { ADMIN, CHANNEL } from '../support/sse.js'
import { contact, createBatch, load, startBatch } from '../support/dialer.js'

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))

t.test('kill -9 with attempts in flight: the next process dials those contacts again and completes the batch', async t => {
  const dataDir = mkdtempSync(join(tmpdir(), 'sb-dialer-restart-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const env = { DATA_DIR: dataDir, API_KEYS, LOG_LEVEL: 'warn', DIALER_CYCLE_MS: '100', DIALER_SCHEDULER_DEAD_AFTER_MS: '2000' }
  // Calls that last ten minutes: they are still in flight at the kill.
  const first = await startProcess(t, 'dialer-1', { ...env, DIALER_SIM_LATENCY_MS: '600000' })
  await waitHealthy(first)
  const batchId = await createBatch(first.base, { rules: { maxInFlight: 3, maxAttempts: 2 } })
  const answered = { customFields: { simulatedOutcomes: 'answered' } }
  await load(first.base, batchId, { contacts: Array.from({ length: 5 }, (_, i) => contact(700 + i, answered)) })
  await startBatch(first.base, batchId)
  const progress = async (base: string) => (await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json
  for (let i = 0; i < 100 && (await progress(first.base)).progress.inProgress < 3; i++) await sleep(50)
  t.match((await progress(first.base)).progress, { inProgress: 3, pending: 2 }, 'the batch room is taken by attempts in flight')
  await first.kill()

  const second = await startProcess(t, 'dialer-2', { ...env, DIALER_SIM_LATENCY_MS: '0' })
  await waitHealthy(second)
  const started = Date.now()
  let batch = await progress(second.base)
  while (batch.status !== 'completed' && Date.now() - started < 30_000) {
    await sleep(200)
    batch = await progress(second.base)
  }
  t.equal(batch.status, 'completed', `completed ${Date.now() - started} ms after the restart`)
  t.match(batch.progress, { pending: 0, inProgress: 0, done: 5 })
  const attempts = (await call(second.base, 'GET', `/dialer/v1/batches/${batchId}/attempts?limit=100`)).json.data
  const lost = attempts.filter((a: { outcome: string }) => a.outcome === 'failed')
  t.equal(lost.length, 3, 'the dead process\'s three attempts are closed as failed')
  t.ok(lost.every((a: { detail: string }) => /scheduler lost/.test(a.detail)), lost.map((a: { detail: string }) => a.detail).join('; '))
  t.equal(attempts.filter((a: { outcome: string }) => a.outcome === 'answered').length, 5, 'every contact dialed and answered once')
  t.equal(await second.terminate(), 0)
  t.notMatch(second.output(), /"level":"(error|warn)"/, 'a clean stop: nothing failed (the scheduler drains and removes its beat)')
})

const SECRET = 'restart-webhook-secret-0123456789abcdef'

/** A local webhook receiver (the carrier's side): takes every attempt, reports only when told. */
async function startReceiver(t: { teardown(fn: () => unknown): void }) {
  const deliveries: { attemptId: string; identifier: string }[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', c => chunks.push(c))
    req.on('end', () => {
      deliveries.push(JSON.parse(Buffer.concat(chunks).toString('utf8')))
      res.writeHead(200).end()
    })
  })
  await new Promise<void>(r => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>(r => (server.closeAllConnections(), server.close(() => r()))))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/calls`, deliveries }
}

/** The receiver's signed report of an attempt's outcome, to whichever process is up (README: the webhook provider). */
async function report(base: string, attemptId: string, outcome: string) {
  const raw = JSON.stringify({ outcome, detail: 'carrier report' })
  const timestamp = String(Math.floor(Date.now() / 1000))
  const signature = `sha256=${createHmac('sha256', SECRET).update(`switchboard.callback.v1.${timestamp}.${attemptId}.${raw}`).digest('hex')}`
  const res = await fetch(`${base}/dialer/v1/attempts/${attemptId}/outcome`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-switchboard-timestamp': timestamp, 'x-switchboard-signature': signature },
    body: raw,
  })
  return res.status
}

t.test('kill -9 during webhook calls: the next process follows them to the outcomes the receiver reports; nobody is called twice', async t => {
  const dataDir = mkdtempSync(join(tmpdir(), 'sb-dialer-webhook-restart-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const receiver = await startReceiver(t)
  const env = {
    DATA_DIR: dataDir,
    API_KEYS,
    LOG_LEVEL: 'warn',
    DIALER_SCHEDULER_DEAD_AFTER_MS: '2000',
    DIALER_PROVIDERS: 'phone=webhook',
    DIALER_WEBHOOK_URL: receiver.url,
    DIALER_WEBHOOK_SECRET: SECRET,
  }
  const first = await startProcess(t, 'webhook-1', { ...env, DIALER_CYCLE_MS: '100' })
  await waitHealthy(first)
  const batchId = await createBatch(first.base, { rules: { maxInFlight: 3, maxAttempts: 2 } })
  await load(first.base, batchId, { contacts: Array.from({ length: 4 }, (_, i) => contact(800 + i)) })
  await startBatch(first.base, batchId)
  for (let i = 0; i < 200 && receiver.deliveries.length < 3; i++) await sleep(50)
  t.equal(receiver.deliveries.length, 3, 'three calls placed with the receiver')
  await first.kill()

  // The calls go on at the carrier; two end and are reported to the process that is up (its
  // scheduler off: the reports are in before any scheduler looks at the lost claims).
  const second = await startProcess(t, 'webhook-2', { ...env, DIALER_CYCLE_MS: '0' })
  await waitHealthy(second)
  const [one, two, three] = receiver.deliveries
  t.equal(await report(second.base, one!.attemptId, 'answered'), 200, 'a report after the crash is accepted')
  t.equal(await report(second.base, two!.attemptId, 'voicemail'), 200)
  t.equal(await second.terminate(), 0)

  const third = await startProcess(t, 'webhook-3', { ...env, DIALER_CYCLE_MS: '100' })
  await waitHealthy(third)
  // Its scheduler takes the dead one's three attempts over: the two reported end at once, which
  // frees room for the fourth contact; the third call is still going on at the receiver.
  for (let i = 0; i < 300 && receiver.deliveries.length < 4; i++) await sleep(50)
  t.equal(receiver.deliveries.length, 4, 'the fourth contact is called once the reported attempts are recorded')
  const attemptsNow = async () => new Map<string, any>((await call(third.base, 'GET', `/dialer/v1/batches/${batchId}/attempts?limit=100`)).json.data.map((a: any) => [a.attemptId, a]))
  t.match((await attemptsNow()).get(three!.attemptId), { outcome: null }, 'the call never reported is still in flight, followed by the new process')
  t.equal(await report(third.base, three!.attemptId, 'busy'), 200)
  t.equal(await report(third.base, receiver.deliveries[3]!.attemptId, 'answered'), 200)
  const started = Date.now()
  let batch: any
  do {
    await sleep(100)
    batch = (await call(third.base, 'GET', `/dialer/v1/batches/${batchId}`)).json
  } while (batch.progress.inProgress > 0 && Date.now() - started < 30_000)
  // Voicemail and busy are retried later (rules.retryDelayMinutes): those two contacts wait, pending.
  t.match(batch.progress, { done: 2, pending: 2, inProgress: 0 }, `every attempt recorded (${JSON.stringify(batch.progress)})`)
  const byId = await attemptsNow()
  t.match(byId.get(one!.attemptId), { outcome: 'answered', detail: 'carrier report' }, 'the answer reported after the crash is the attempt\'s outcome')
  t.match(byId.get(two!.attemptId), { outcome: 'voicemail' })
  t.match(byId.get(three!.attemptId), { outcome: 'busy', detail: 'carrier report' }, 'the call that ended after the restart too')
  t.equal(byId.size, 4, 'no attempt was closed as failed and dialed again')
  t.same(
    receiver.deliveries.map(d => d.identifier).sort(),
    ['c800', 'c801', 'c802', 'c803'],
    'each contact called once',
  )
  t.equal(await third.terminate(), 0)
})

// A kill -9, and a clean stop (a rolling restart): either way the conversation goes on.
for (const stop of ['kill', 'terminate'] as const) {
  t.test(`${stop === 'kill' ? 'kill -9' : 'a clean stop'} during an assistant attempt: the next process follows its session to its end; the contact is not called twice`, async t => {
    const dataDir = mkdtempSync(join(tmpdir(), 'sb-dialer-assistant-restart-'))
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
    const env = { DATA_DIR: dataDir, API_KEYS, LOG_LEVEL: 'warn', DIALER_CYCLE_MS: '100', DIALER_SCHEDULER_DEAD_AFTER_MS: '2000', DIALER_PROVIDERS: 'phone=assistant' }
    const first = await startProcess(t, 'assistant-1', env)
    await waitHealthy(first)
    const batchId = await createBatch(first.base, { rules: { maxAttempts: 2 } })
    await load(first.base, batchId, contact(900))
    await startBatch(first.base, batchId)
    const attempts = async (base: string) => (await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts?limit=10`)).json.data as any[]
    let inFlight: any
    for (let i = 0; i < 200 && !inFlight; i++) {
      inFlight = (await attempts(first.base)).find(a => a.outcome === null)
      if (!inFlight) await sleep(50)
    }
    t.ok(inFlight, 'an assistant attempt in flight')
    // The attempt is recorded before its session is created: wait for the session itself (a kill
    // before its insert leaves nothing to follow, and that attempt is failed and retried).
    const opened = async () => (await call(first.base, 'GET', `${ADMIN}/${inFlight.attemptId}/history`, { headers: { UserId: 'supervisor-1' } })).status === 200
    for (let i = 0; i < 200 && !(await opened()); i++) await sleep(50)
    t.ok(await opened(), 'its session is open')
    if (stop === 'kill') await first.kill()
    else t.equal(await first.terminate(), 0, 'stopped cleanly with the attempt in flight')

    // The session (id: the attempt id) lives on in the store; the new process's scheduler takes
    // the attempt over and follows the session, which restores it on this engine.
    const second = await startProcess(t, 'assistant-2', env)
    await waitHealthy(second)
    t.match((await attempts(second.base)).find(a => a.attemptId === inFlight.attemptId), { outcome: null }, 'not closed as failed by the stop')
    const live = async () => /switchboard_sessions_live\{crew="demo"\} 1/.test(await (await fetch(`${second.metricsBase}/metrics`)).text())
    for (let i = 0; i < 200 && !(await live()); i++) await sleep(50)
    t.ok(await live(), 'the session is restored to be followed')
    const ended = await call(second.base, 'DELETE', `${CHANNEL}/${inFlight.attemptId}`, { body: { reason: 'finished' } })
    t.equal(ended.status, 201, 'the conversation ends (the customer hangs up)')
    let done: any
    for (let i = 0; i < 200 && !done; i++) {
      done = (await attempts(second.base)).find(a => a.attemptId === inFlight.attemptId && a.outcome !== null)
      if (!done) await sleep(50)
    }
    t.match(done, { outcome: 'answered', detail: /followed after its scheduler died\) closed: finished/ }, 'its outcome comes from how the session ended')
    t.equal((await attempts(second.base)).length, 1, 'one attempt: the contact was not called again')
    t.equal(await second.terminate(), 0)
  })
}
