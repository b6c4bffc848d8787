// A session whose store writes keep failing (issue 10: the write-behind once retried every
// 250 ms forever): the writer backs off, gives up after ENGINE_PERSIST_MAX_FAILURES, says so in
// /healthz and /metrics, and the session and the process keep serving.
import t from 'tap'
import { call, startTestService } from '../support/harness.js'
import { CHANNEL, createSession } from '../support/sse.js'

// Faults are injected by replacing a collection method of the service's store object, so the
// engine writes through that object here (ENGINE_WRITE_THREAD=0). With the write thread, a
// refused write reaches the write-behind as the same rejected promise (test/platform/write-thread.test.ts).
const ON_THE_LOOP = { ENGINE_WRITE_THREAD: '0' }
/** A checkpoint with every batch of entries (by default one is written every few dozen entries or seconds). */
const CHECKPOINT_EVERY_TURN = { ENGINE_CHECKPOINT_ENTRIES: '1' }

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))

async function metric(metricsBase: string, name: string): Promise<number> {
  const text = await (await fetch(`${metricsBase}/metrics`)).text()
  const match = new RegExp(`^${name} (\\d+)`, 'm').exec(text)
  return match ? Number(match[1]) : NaN
}

t.test('a session whose checkpoint write always fails stops retrying and is reported', async t => {
  const { base, metricsBase, service } = await startTestService(t, { env: { ...ON_THE_LOOP, ...CHECKPOINT_EVERY_TURN, ENGINE_PERSIST_MAX_FAILURES: '3' } })
  const { stream, sessionId, consumerId } = await createSession(base)
  t.teardown(() => stream.close())

  // The store refuses every checkpoint write of this session (a value it cannot encode, a full disk).
  const sessions = service.platform.store.collection('engine_sessions')
  const updateOne = sessions.updateOne.bind(sessions)
  sessions.updateOne = async (filter, update, options) => {
    if (filter._id === sessionId) throw new Error('Maximum call stack size exceeded')
    return updateOne(filter, update, options)
  }

  const sent = await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'hola' } })
  t.equal(sent.status, 201, sent.text)
  await stream.next('assistant.message')

  let health: any
  for (let i = 0; i < 100; i++) {
    health = (await call(base, 'GET', '/healthz', { key: null })).json
    if (health.sessionsNotPersisted === 1) break
    await sleep(50)
  }
  t.equal(health.sessionsNotPersisted, 1, '/healthz names the session count')
  t.equal(await metric(metricsBase, 'switchboard_sessions_persistence_stopped'), 1)
  const failures = await metric(metricsBase, 'switchboard_session_persistence_failures_total')
  t.equal(failures, 3, 'three tries, then it stopped')
  await sleep(1500)
  t.equal(await metric(metricsBase, 'switchboard_session_persistence_failures_total'), failures, 'no retry after giving up')

  // The conversation goes on; the process lives.
  const again = await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'sigues ahí?' } })
  t.equal(again.status, 201, again.text)
  await stream.next('assistant.message')
  const closed = await call(base, 'DELETE', `${CHANNEL}/${sessionId}`, { body: { reason: 'user_closed' } })
  t.equal(closed.status, 201)
  for (let i = 0; i < 50 && (await call(base, 'GET', '/healthz', { key: null })).json.sessionsNotPersisted !== 0; i++) await sleep(50)
  t.equal((await call(base, 'GET', '/healthz', { key: null })).json.sessionsNotPersisted, 0, 'cleared once the session ended')
})

t.test('a user message whose history entry cannot be written is not acknowledged (503), and is once the store takes writes again', async t => {
  const { base, service } = await startTestService(t, { env: { ...ON_THE_LOOP, ENGINE_PERSIST_MAX_FAILURES: '2' } })
  const { stream, sessionId, consumerId } = await createSession(base)
  t.teardown(() => stream.close())
  await stream.next('crew.status.waiting')
  // The embedded store acknowledges a message once its entry is committed; here the journal refuses.
  const journal = service.platform.store.orderedLog('engine_session_journal')
  const write = journal.write.bind(journal)
  let refusing = true
  journal.write = async records => {
    if (refusing && records.some(r => r.stream === sessionId)) throw new Error('disk full')
    return write(records)
  }
  const refused = await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'hola' } })
  t.equal(refused.status, 503, refused.text)
  t.match(refused.json, { code: 'SESSION_NOT_PERSISTED' })
  t.ok(refused.headers.get('retry-after'), 'with Retry-After')
  refusing = false
  const accepted = await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'otra vez' } })
  t.equal(accepted.status, 201, accepted.text)
  const history = (await call(base, 'GET', `/engine/api/administration/session/${sessionId}/history`, { headers: { UserId: 'sup' } })).json.data
  t.ok(history.some((e: any) => e.type === 'message.user' && e.text === 'otra vez'), 'the accepted message is in the stored history')
})

t.test('a user message is acknowledged once its history entry is written, not after the checkpoint write that follows', async t => {
  const { base, service } = await startTestService(t, { env: { ...ON_THE_LOOP, ...CHECKPOINT_EVERY_TURN } })
  const { stream, sessionId, consumerId } = await createSession(base)
  t.teardown(() => stream.close())
  await stream.next('crew.status.waiting')
  // The session's checkpoint writes wait at a gate (a slow store); its journal writes do not.
  const sessions = service.platform.store.collection('engine_sessions')
  const updateOne = sessions.updateOne.bind(sessions)
  let open!: () => void
  const gate = new Promise<void>(resolve => (open = resolve))
  let held = 0
  sessions.updateOne = async (filter, update, options) => {
    if (filter._id === sessionId && (update as any).$set?.snapshot !== undefined) {
      held++
      await gate
    }
    return updateOne(filter, update, options)
  }
  // Had the acknowledgement waited for the checkpoint too, it would still be waiting at the gate.
  const sent = await Promise.race([
    call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'hola' } }),
    sleep(5000).then(() => ({ status: 0, text: 'no answer within 5 s' })),
  ])
  t.equal(sent.status, 201, sent.text)
  await stream.next('assistant.message')
  for (let i = 0; i < 100 && held === 0; i++) await sleep(20)
  t.ok(held >= 1, 'a checkpoint write is held at the gate')
  open()
  const history = (await call(base, 'GET', `/engine/api/administration/session/${sessionId}/history`, { headers: { UserId: 'sup' } })).json.data
  t.ok(history.some((e: any) => e.type === 'message.user' && e.text === 'hola'), 'the acknowledged message is in the stored history')
})
