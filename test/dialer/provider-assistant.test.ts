// The assistant provider end to end, in-process: a running batch whose channel uses the
// assistant provider opens one outbound session per attempt on the engine (through its public
// transport), visible to administration under the attempt's id; the session's end decides the
// attempt's outcome (ended -> answered, idle timeout -> no_answer, not opened -> failed) and so the
// contact's state.
import t from 'tap'
import { call, startTestService } from '../support/harness.js'
import { contact, createBatch, load, phone, startBatch } from '../support/dialer.js'
import { schedulerOf } from '../../dialer/scheduler/index.js'
import { AssistantProvider, outcomeOfClose, type AttemptRequest } from '../../dialer/providers/index.js'
import type { SessionTransport } from '../../engine/transport.js'
import { randomUUID } from 'node:crypto'
import { createEngine } from '../../engine/index.js'
import { parseCrews } from '../../engine/crews.js'
import { MemoryBus } from '../../platform/bus/index.js'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { createMetrics } from '../../platform/metrics.js'
import { MemoryStore } from '../../platform/store/index.js'
import type { Platform } from '../../platform/index.js'
import { DEFAULT_CREWS } from '../engine/fixtures/crews.js'

const ADMIN = '/engine/api/administration/session'
const CHANNEL = '/assistants-channel/api/v1/channel/api/eventstream'
const ADMIN_HEADERS = { UserId: 'supervisor-1' }

const attemptsOf = async (base: string, batchId: string) => (await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts`)).json.data
const contactsOf = async (base: string, batchId: string) => (await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts`)).json.data

/** The attempt's session opens just after the attempt is recorded (its crew slot and record are committed first). */
async function historyOnceOpen(base: string, sessionId: string) {
  let history = await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: ADMIN_HEADERS })
  // Up to 10 s: on a loaded machine (the whole suite in parallel) the opening can take seconds.
  for (let i = 0; i < 500 && history.status === 404; i++) {
    await new Promise(r => setTimeout(r, 20))
    history = await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: ADMIN_HEADERS })
  }
  return history
}

t.test('a phone attempt opens an outbound session; ending it answers the attempt', async t => {
  const { base, service } = await startTestService(t, {
    env: { DIALER_CYCLE_MS: '0', DIALER_PROVIDERS: 'phone=assistant,whatsapp=assistant' },
  })
  const scheduler = schedulerOf(service.platform)
  const batchId = await createBatch(base, { rules: { crewId: 'demo', outboundText: 'Hello {{name}}, calling about your renewal.' } })
  await load(base, batchId, { contacts: [contact(1, { customFields: { plan: 'gold', customerId: 'C-77' } })] })
  await startBatch(base, batchId)

  t.equal((await scheduler.runCycle()).claimed, 1)
  t.equal(scheduler.attemptsInFlight, 1, 'the attempt lasts as long as the session')
  const [attempt] = await attemptsOf(base, batchId)
  t.match(attempt, { provider: 'assistant', outcome: null, address: phone(1) })
  const [inFlight] = await contactsOf(base, batchId)
  t.equal(inFlight.state, 'in_progress')

  // The session is the attempt's id: administration sees the outbound opening and the arguments.
  const history = await historyOnceOpen(base, attempt.attemptId)
  t.equal(history.status, 200, history.text)
  const entries: any[] = history.json.entries ?? history.json.data ?? history.json
  const created = entries.find(e => e.type === 'session.created')
  t.match(created, { crewId: 'demo', outbound: 'static', arguments: { plan: 'gold', customerId: 'C-77' } })
  const opening = entries.find(e => e.type === 'message.assistant')
  t.match(opening, { source: 'outbound', text: 'Hello Contact 1, calling about your renewal.' })

  // The contact talks to it; the session ends normally.
  const said = await call(base, 'PUT', `${ADMIN}/${attempt.attemptId}/whisper`, { headers: ADMIN_HEADERS, body: { text: 'be brief' } })
  t.ok(said.status < 300, `whisper ${said.status} ${said.text}`)
  const ended = await call(base, 'DELETE', `${CHANNEL}/${attempt.attemptId}`, { body: { reason: 'finished' } })
  t.equal(ended.status, 201, ended.text)
  await scheduler.drain()

  const [done] = await attemptsOf(base, batchId)
  t.match(done, { outcome: 'answered', detail: `session ${attempt.attemptId} on crew demo closed: finished` })
  const [c] = await contactsOf(base, batchId)
  t.match(c, { state: 'done', attempts: 1 })
  const detail = (await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts/${c.contactId}`)).json
  t.match(detail, { lastOutcome: 'answered', doneReason: 'final_outcome' })
  t.equal((await call(base, 'GET', `${ADMIN}/${attempt.attemptId}/history`, { headers: ADMIN_HEADERS })).status, 404, 'the session is gone')

  // Batches of several contacts: one session each; an admin destroy is `answered` as well.
  const many = await createBatch(base, { channel: 'whatsapp', rules: {} })
  await load(base, many, {
    contacts: [2, 3].map(n => contact(n, { addresses: [{ address: phone(n), type: 'whatsapp', priority: 1 }] })),
  })
  await startBatch(base, many)
  t.equal((await scheduler.runCycle()).claimed, 2)
  const open = await attemptsOf(base, many)
  for (const a of open) {
    const h = await historyOnceOpen(base, a.attemptId)
    const first = (h.json.entries ?? h.json.data ?? h.json).find((e: any) => e.type === 'message.assistant')
    t.match(first, { source: 'outbound', text: /^Hello Contact [23], this is an automated call/ }, 'the default opening, with the name')
    t.equal((await call(base, 'DELETE', `${ADMIN}/${a.attemptId}`, { headers: ADMIN_HEADERS })).status, 204)
  }
  await scheduler.drain()
  t.same((await attemptsOf(base, many)).map((a: any) => a.outcome), ['answered', 'answered'])
  t.match((await call(base, 'GET', `/dialer/v1/batches/${many}`)).json.progress, { done: 2, byOutcome: { answered: 2 } })
})

t.test('nobody speaks: the idle timeout is no_answer, and the contact is retried', async t => {
  const { base, service } = await startTestService(t, {
    env: { DIALER_CYCLE_MS: '0', DIALER_PROVIDERS: 'phone=assistant', SESSION_IDLE_TIMEOUT_MS: '300' },
  })
  const scheduler = schedulerOf(service.platform)
  const batchId = await createBatch(base, { rules: { retryDelayMinutes: { no_answer: 15 } } })
  await load(base, batchId, { contacts: [contact(4)] })
  await startBatch(base, batchId)
  const started = Date.now()
  await scheduler.runCycle()
  await scheduler.drain()
  t.ok(Date.now() - started >= 250, 'ended by the idle timeout')
  const [attempt] = await attemptsOf(base, batchId)
  t.match(attempt, { provider: 'assistant', outcome: 'no_answer', detail: /closed: idle_timeout$/ })
  const [c] = await contactsOf(base, batchId)
  t.match(c, { state: 'pending', attempts: 1 })
  t.ok(Date.parse(c.nextAttemptAt) - Date.parse(attempt.endedAt) >= 15 * 60_000 - 1000, 'retried after the no_answer delay')
})

t.test('a session that cannot be opened is failed; the service stops with a session open', async t => {
  const { base, service, close } = await startTestService(t, { env: { DIALER_CYCLE_MS: '0', DIALER_PROVIDERS: 'phone=assistant' } })
  const scheduler = schedulerOf(service.platform)
  const batchId = await createBatch(base, { rules: { crewId: 'no-such-crew' } })
  await load(base, batchId, { contacts: [contact(5)] })
  await startBatch(base, batchId)
  await scheduler.runCycle()
  await scheduler.drain()
  t.match((await attemptsOf(base, batchId))[0], { outcome: 'failed', detail: /assistant session not opened on crew no-such-crew: Crew no-such-crew does not exist/ })

  const open = await createBatch(base, { rules: { provider: 'assistant' } })
  await load(base, open, { contacts: [contact(6)] })
  await startBatch(base, open)
  await scheduler.runCycle()
  const [attempt] = await attemptsOf(base, open)
  t.equal(attempt.outcome, null)
  // Stopping the service does not wait for the conversation: the attempt is closed as failed.
  const stopped = await Promise.race([close().then(() => true), new Promise(r => setTimeout(() => r(false), 10_000))])
  t.ok(stopped, 'the service stopped with a session open')
})

t.test('at shutdown an attempt whose session is still open is handed over, not recorded', async t => {
  const created: any[] = []
  const transport: SessionTransport = {
    create: async request => {
      created.push(request)
      return { unsubscribe: () => undefined }
    },
    command: async () => undefined,
    subscribe: async () => ({ unsubscribe: () => undefined, position: { seq: 0, epoch: 0 } }),
    replay: async () => [],
    lastEvent: async () => null,
    closeReason: async () => null,
  }
  const provider = new AssistantProvider(() => transport, 'demo')
  const request: AttemptRequest = {
    attemptId: '6f1d2c1e-8a0b-4c7e-9d2a-1b2c3d4e5f60',
    accountId: 'acme',
    batchId: 'b',
    contactId: 'c',
    identifier: 'c1',
    channel: 'whatsapp',
    address: { address: phone(9), type: 'whatsapp', priority: 1 },
    attemptNumber: 1,
    name: 'Ana',
    customFields: { plan: 'gold' },
  }
  const pending = provider.forBatch({ outboundText: 'Hi {{name}}' }).dial(request)
  await new Promise(r => setImmediate(r))
  t.match(created[0], { sessionId: request.attemptId, accountId: 'acme', crewId: 'demo', arguments: { plan: 'gold' }, outbound: { type: 'static', parameters: { text: 'Hi Ana' } } })
  provider.close()
  await t.rejects(pending, { name: 'AttemptHandedOver', message: /service stopped during session .*: the next scheduler follows it/ }, 'left in flight for the next scheduler')
  t.match(await provider.dial({ ...request, channel: 'email' }), { outcome: 'failed', detail: /phone and whatsapp only/ })
  t.match(await new AssistantProvider(() => undefined, 'demo').dial(request), { outcome: 'failed', detail: /no assistant engine in this process/ })
})

t.test('close reasons map to outcomes', async t => {
  t.equal(outcomeOfClose('finished'), 'answered')
  t.equal(outcomeOfClose('admin_destroyed'), 'answered')
  t.equal(outcomeOfClose('transferred_to_human'), 'answered')
  t.equal(outcomeOfClose('idle_timeout'), 'no_answer')
  t.equal(outcomeOfClose('error'), 'failed')
})

t.test('a session that ended before the next scheduler followed it: its tombstone decides the outcome', async t => {
  const logger = createLogger('silent')
  const platform: Platform = {
    config: loadConfig({ LOG_LEVEL: 'silent', SESSION_IDLE_TIMEOUT_MS: '1000' }),
    store: new MemoryStore(),
    bus: new MemoryBus(logger),
    clock: { now: () => Date.now() },
    logger,
    metrics: createMetrics(),
  }
  const engine = createEngine(platform, { crews: parseCrews(DEFAULT_CREWS) })
  await engine.start()
  t.teardown(() => engine.stop())
  const provider = new AssistantProvider(() => engine.transport, 'demo')
  /** Opens an outbound session; `closed` resolves with its close reason. */
  const open = async (sessionId: string) => {
    let ended!: (reason: string) => void
    const closed = new Promise<string>(resolve => (ended = resolve))
    await engine.transport.create(
      { sessionId, consumerId: randomUUID(), accountId: 'acme', crewId: 'demo', arguments: {}, outbound: { type: 'static', parameters: { text: 'Hi' } } },
      event => void (event.kind === 'closed' && ended(event.reason)),
    )
    return { closed }
  }
  const resumed = (attemptId: string, accountId = 'acme') => provider.resume({ attemptId, accountId, startedAt: Date.now() })

  // Ended by the contact while no scheduler watched it.
  const finished = randomUUID()
  const first = await open(finished)
  await engine.transport.command({ sessionId: finished, accountId: 'acme' }, { type: 'session.destroy', reason: 'finished', by: 'channel' })
  t.equal(await first.closed, 'finished')
  t.match(await resumed(finished), { outcome: 'answered', detail: /had closed before its scheduler's successor followed it: finished/ })

  // Nobody answered: the session expired on its own.
  const unanswered = randomUUID()
  const second = await open(unanswered)
  t.equal(await second.closed, 'idle_timeout')
  t.match(await resumed(unanswered), { outcome: 'no_answer', detail: /idle_timeout/ })

  // Another account's session, and one that never existed, say nothing about their end.
  t.match(await resumed(finished, 'other-account'), { outcome: 'failed', detail: /could not be followed after its scheduler died/ })
  t.match(await resumed(randomUUID()), { outcome: 'failed', detail: /could not be followed after its scheduler died/ })
})
