// Hibernation: a session quiet for ENGINE_HIBERNATE_AFTER_MS lets its actor go (its heap is a
// small record) and is woken from its persisted snapshot by its next command or its idle
// deadline; nothing a client or a supervisor sees changes: event ids continue, the stream stays
// open, the history has no trace of it.
import t from 'tap'
import { call, startTestService } from '../support/harness.js'
import { ADMIN, CHANNEL, createSession } from '../support/sse.js'

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))
const admin = { UserId: 'supervisor-1' }

async function gauge(metricsBase: string, name: string): Promise<number> {
  const text = await (await fetch(`${metricsBase}/metrics`)).text()
  const line = text.split('\n').find(l => l.startsWith(`${name} `))
  return Number(line?.slice(name.length + 1) ?? NaN)
}

async function until(what: string, check: () => Promise<boolean>, ms = 5000) {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await check()) return
    await sleep(20)
  }
  throw new Error(`timed out: ${what}`)
}

t.test('a quiet session hibernates and wakes on its next message; its stream and ids carry on', async t => {
  const { base, metricsBase } = await startTestService(t, { env: { ENGINE_HIBERNATE_AFTER_MS: '100' } })
  const { stream, sessionId, consumerId } = await createSession(base)
  await stream.next('crew.status.waiting')
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'hello' } })).status, 201)
  await stream.next('crew.status.waiting')
  await until('hibernated', async () => (await gauge(metricsBase, 'switchboard_sessions_hibernated')) === 1)

  // Woken by the next message: the reply streams on the same stream, ids continuing.
  const before = stream.events.length
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'are you there?' } })).status, 201)
  await stream.next(e => e.event === 'crew.status.waiting' && stream.events.indexOf(e) >= before)
  t.equal(await gauge(metricsBase, 'switchboard_sessions_hibernated'), 0, 'awake again')
  const ids = stream.events.filter(e => e.event !== 'hearthbeat').map(e => Number(e.id))
  t.same(ids, ids.map((_, i) => i + 1), 'ids are the session sequence, without a jump or a repeat')
  const message = stream.events.filter(e => e.event === 'assistant.message').at(-1)!
  t.equal(message.data.text, 'You said: are you there?')

  // Supervisors see the whole conversation; the history has no trace of hibernation.
  await until('hibernated again', async () => (await gauge(metricsBase, 'switchboard_sessions_hibernated')) === 1)
  const snapshot = await call(base, 'GET', `${ADMIN}/${sessionId}/snapshot`, { headers: admin })
  t.equal(snapshot.status, 200)
  t.same(
    snapshot.json.data.snapshot.memory.messages.filter((m: any) => m.author === 'user').map((m: any) => m.text),
    ['hello', 'are you there?'],
  )
  const history = await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: admin })
  t.same(
    history.json.data.map((e: any) => e.type),
    ['session.created', 'message.user', 'turn.started', 'message.assistant', 'message.user', 'turn.started', 'message.assistant'],
  )
  t.same(history.json.data.map((e: any) => e.seq), [1, 2, 3, 4, 5, 6, 7], 'log positions carry on')
  stream.close()
})

t.test('a paused session hibernates and resumes; a hibernated session is destroyed like any other', async t => {
  const { base, metricsBase } = await startTestService(t, { env: { ENGINE_HIBERNATE_AFTER_MS: '100' } })
  const { stream, sessionId, consumerId } = await createSession(base)
  await stream.next('crew.status.waiting')
  t.equal((await call(base, 'PUT', `${ADMIN}/${sessionId}/pause`, { headers: admin })).status, 200)
  await until('hibernated', async () => (await gauge(metricsBase, 'switchboard_sessions_hibernated')) === 1)
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'kept while paused' } })).status, 201)
  await until('hibernated again', async () => (await gauge(metricsBase, 'switchboard_sessions_hibernated')) === 1)
  t.equal((await call(base, 'PUT', `${ADMIN}/${sessionId}/resume`, { headers: admin })).status, 200)
  const reply = await stream.next('assistant.message')
  t.equal(reply.data.text, 'You said: kept while paused', 'the message kept while paused is answered after resume')
  await stream.next(e => e.event === 'crew.status.waiting' && stream.events.indexOf(e) > stream.events.indexOf(reply))
  await until('hibernated once more', async () => (await gauge(metricsBase, 'switchboard_sessions_hibernated')) === 1)
  t.equal((await call(base, 'DELETE', `${CHANNEL}/${sessionId}`, { body: { reason: 'user_closed' } })).status, 201)
  const closed = await stream.next('session.closed')
  t.equal(closed.data.reason, 'user_closed')
  t.equal(await gauge(metricsBase, 'switchboard_sessions_hibernated'), 0)
  t.equal(await gauge(metricsBase, 'switchboard_sessions_live{crew="demo"}'), 0)
})

t.test('a hibernated session still expires at its idle deadline', async t => {
  const { base, metricsBase } = await startTestService(t, { env: { ENGINE_HIBERNATE_AFTER_MS: '100', SESSION_IDLE_TIMEOUT_MS: '1500' } })
  const { stream } = await createSession(base)
  await stream.next('crew.status.waiting')
  await until('hibernated', async () => (await gauge(metricsBase, 'switchboard_sessions_hibernated')) === 1)
  const closed = await stream.next('session.closed', 5000)
  t.equal(closed.data.reason, 'idle_timeout')
  await stream.done
  t.equal(await gauge(metricsBase, 'switchboard_sessions_hibernated'), 0)
})
