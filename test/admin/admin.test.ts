// Session administration over real HTTP, watched through a real SSE stream of the session.
import t from 'tap'
import { call, eventually, KEYS, startTestService } from '../support/harness.js'
import { ADMIN, CHANNEL, createSession } from '../support/sse.js'
import { crewsFile } from '../engine/fixtures/crews.js'

const USER = { UserId: 'supervisor-7' }
const MISSING = '7d2c1b56-43c1-4a8e-9f11-0b8e2a3c9d10'

function adminCall(base: string, method: string, path: string, body?: unknown, options: { key?: string; headers?: Record<string, string> } = {}) {
  return call(base, method, `${ADMIN}/${path}`, { body, key: options.key, headers: options.headers ?? USER })
}

async function session(t: Tap.Test) {
  const svc = await startTestService(t)
  const s = await createSession(svc.base, { body: { arguments: { name: 'Ana', plan: 'gold' } } })
  await s.stream.next('crew.status.waiting')
  t.teardown(() => s.stream.close())
  const say = async (message: string) => {
    const res = await call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message } })
    if (res.status !== 201) throw new Error(`send ${res.status}`)
  }
  const history = async () => (await adminCall(svc.base, 'GET', `${s.sessionId}/history`)).json
  return { ...svc, ...s, say, history }
}

type Tap = typeof t
declare namespace Tap {
  type Test = Parameters<Parameters<typeof t.test>[1]>[0]
}

t.test('every operation is refused without UserId, with a bad key, or for a session that is not there', async t => {
  const { base, sessionId } = await session(t)
  const ops: [string, string, unknown?][] = [
    ['PUT', 'append', { context: [{ author: 'system', text: 'x' }] }],
    ['PUT', 'override', { context: [] }],
    ['PUT', 'attend'],
    ['PUT', 'whisper', { text: 'x' }],
    ['PUT', 'impersonate', { text: 'x' }],
    ['PUT', 'toolinject', { tool: 'echo', args: { text: 'x' } }],
    ['PUT', 'transfer', { target: 'support' }],
    ['PUT', 'pause'],
    ['PUT', 'resume'],
    ['GET', 'history'],
    ['GET', 'snapshot'],
    ['PUT', `external/${MISSING}`, { ok: true }],
    ['DELETE', ''],
  ]
  for (const [method, op, body] of ops) {
    const path = (id: string) => (op ? `${id}/${op}` : id)
    const noUser = await adminCall(base, method, path(sessionId), body, { headers: {} })
    t.equal(noUser.status, 400, `${op} without UserId`)
    t.equal(noUser.json.code, 'USER_ID_REQUIRED')
    t.equal((await adminCall(base, method, path(sessionId), body, { headers: { UserId: ' ' } })).status, 400, `${op} blank UserId`)
    t.equal((await adminCall(base, method, path(sessionId), body, { headers: { UserId: 'x'.repeat(129) } })).json.code, 'INVALID_USER_ID')
    t.equal((await call(base, method, `${ADMIN}/${path(sessionId)}`, { key: null, headers: USER, body })).status, 401, `${op} no key`)
    t.equal((await adminCall(base, method, path(sessionId), body, { key: KEYS.acmeDialerOnly })).status, 403, `${op} no admin role`)
    const missing = await adminCall(base, method, path(MISSING), body)
    t.equal(missing.status, 404, `${op} unknown session`)
    t.equal(missing.json.code, 'SESSION_NOT_FOUND')
    const foreign = await adminCall(base, method, path(sessionId), body, { key: KEYS.globex })
    t.equal(foreign.status, 404, `${op} another account's session`)
    t.equal(foreign.json.code, 'SESSION_NOT_FOUND')
    t.equal((await adminCall(base, method, path('not-a-uuid'), body)).json.code, 'INVALID_SESSION_ID', `${op} bad id`)
  }
})

t.test('append, override: bodies validated; the context changes, the stream does not', async t => {
  const { base, sessionId, stream } = await session(t)
  const before = stream.events.length
  const empty = await adminCall(base, 'PUT', `${sessionId}/append`, { context: [] })
  t.equal(empty.status, 400)
  t.match(empty.json, { code: 'VALIDATION_FAILED', details: [{ field: 'context', code: 'REQUIRED' }] })
  const bad = await adminCall(base, 'PUT', `${sessionId}/append`, { context: [{ author: 'robot', text: '' }] })
  t.same(bad.json.details.map((d: any) => [d.field, d.code]).sort(), [['context[0].author', 'INVALID_AUTHOR'], ['context[0].text', 'REQUIRED']])
  t.equal((await adminCall(base, 'PUT', `${sessionId}/append`)).status, 400, 'no body')

  const ok = await adminCall(base, 'PUT', `${sessionId}/append`, { context: [{ author: 'system', text: 'VIP customer' }, { author: 'agent', text: 'I checked the invoice' }] })
  t.equal(ok.status, 200)
  t.equal(ok.text, '', 'empty body')
  let snap = (await adminCall(base, 'GET', `${sessionId}/snapshot`)).json.data.snapshot
  t.same(snap.memory.messages.map((m: any) => m.text), ['VIP customer', 'I checked the invoice'])

  t.equal((await adminCall(base, 'PUT', `${sessionId}/override`, {})).status, 400, 'override needs context')
  const over = await adminCall(base, 'PUT', `${sessionId}/override`, { context: [{ author: 'user', text: 'I want to cancel' }], arguments: { name: 'Bea' } })
  t.equal(over.status, 200)
  snap = (await adminCall(base, 'GET', `${sessionId}/snapshot`)).json.data.snapshot
  t.same(snap.memory.messages.map((m: any) => m.text), ['I want to cancel'], 'whole history replaced')
  t.equal(snap.configuration.context.name, 'Bea')
  t.equal(stream.events.length, before, 'nothing published')
})

t.test('whisper: recorded as system, given to the assistant, never on the stream', async t => {
  const { base, sessionId, stream, say, history } = await session(t)
  t.equal((await adminCall(base, 'PUT', `${sessionId}/whisper`, {})).json.details[0].field, 'text')
  t.equal((await adminCall(base, 'PUT', `${sessionId}/whisper`, { text: 'offer 10% discount' })).status, 200)
  await say('hello')
  await stream.next('crew.status.waiting')
  t.notOk(JSON.stringify(stream.events).includes('10% discount'), 'not in any event')
  const entry = (await history()).data.find((e: any) => e.type === 'message.whisper')
  t.match(entry, { role: 'system', text: 'offer 10% discount', userId: 'supervisor-7', at: String })
  const snap = (await adminCall(base, 'GET', `${sessionId}/snapshot`)).json.data.snapshot
  t.match(snap.memory.messages[0], { author: 'system', source: 'whisper', text: 'offer 10% discount' })
})

t.test('impersonate: shown as the assistant, no generation', async t => {
  const { base, sessionId, stream, history } = await session(t)
  t.equal((await adminCall(base, 'PUT', `${sessionId}/impersonate`, { text: 'Hi, a human here', applyModifiers: 'yes' })).status, 400)
  t.equal((await adminCall(base, 'PUT', `${sessionId}/impersonate`, { text: 'Hi, a human here', applyModifiers: true })).status, 200)
  const msg = await stream.next()
  t.equal(msg.event, 'assistant.message', 'no writing status, no chunks')
  t.equal(msg.data.text, 'Hello, a human here 🙂')
  t.match((await history()).data.at(-1), { type: 'message.assistant', source: 'impersonated', userId: 'supervisor-7' })
})

t.test('attend: the assistant replies now', async t => {
  const { base, sessionId, stream } = await session(t)
  t.equal((await adminCall(base, 'PUT', `${sessionId}/attend`)).status, 200)
  t.equal((await stream.next()).event, 'crew.status.writing')
  t.equal((await stream.next('assistant.message')).data.text, 'Hi Ana, I am the Demo assistant. How can I help you?')
})

t.test('toolinject: args validated against the tool; the result is returned', async t => {
  const { base, sessionId, history } = await session(t)
  const ok = await adminCall(base, 'PUT', `${sessionId}/toolinject`, { tool: 'echo', args: { text: 'ping' } })
  t.equal(ok.status, 200)
  t.match(ok.json, { tool: 'echo', status: 'completed', result: { text: 'ping' }, callId: String })
  const invalid = await adminCall(base, 'PUT', `${sessionId}/toolinject`, { tool: 'echo', args: { text: 5, extra: 1 } })
  t.equal(invalid.status, 400)
  t.equal(invalid.json.code, 'VALIDATION_FAILED')
  t.same(invalid.json.details.map((d: any) => d.field).sort(), ['args.extra', 'args.text'])
  t.match((await adminCall(base, 'PUT', `${sessionId}/toolinject`, { tool: 'echo' })).json.details, [{ field: 'args.text', code: 'REQUIRED' }])
  const unknown = await adminCall(base, 'PUT', `${sessionId}/toolinject`, { tool: 'rm-rf' })
  t.equal(unknown.status, 400)
  t.match(unknown.json, { code: 'UNKNOWN_TOOL', tools: ['echo', 'crm_lookup'] })
  const entries = (await history()).data.filter((e: any) => e.type.startsWith('tool.'))
  t.match(entries, [{ type: 'tool.call', tool: 'echo', origin: 'inject', userId: 'supervisor-7' }, { type: 'tool.result', result: { text: 'ping' } }])
})

t.test('resolver: an external tool call waits for its correlation UUID', async t => {
  const { base, sessionId, stream, say, history } = await session(t)
  await say('lookup C-42')
  await stream.next('crew.status.writing')
  let call: any
  for (let i = 0; i < 100 && !call; i++) {
    call = (await history()).data.find((e: any) => e.type === 'tool.call' && e.tool === 'crm_lookup')
    if (!call) await new Promise(r => setTimeout(r, 10))
  }
  t.match(call, { external: true, correlationId: String, args: { customerId: 'C-42' } })
  t.equal((await adminCall(base, 'PUT', `${sessionId}/external/not-a-uuid`, { plan: 'gold' })).json.code, 'INVALID_CORRELATION_ID')
  const unknown = await adminCall(base, 'PUT', `${sessionId}/external/${MISSING}`, { plan: 'gold' })
  t.equal(unknown.status, 404)
  t.equal(unknown.json.code, 'CORRELATION_NOT_FOUND')
  t.equal((await adminCall(base, 'PUT', `${sessionId}/external/${call.correlationId}`)).status, 400, 'a result is required')
  const ok = await adminCall(base, 'PUT', `${sessionId}/external/${call.correlationId}`, { plan: 'gold' })
  t.equal(ok.status, 200)
  t.equal((await stream.next('assistant.message')).data.text, 'The crm_lookup tool returned: {"plan":"gold"}')
  const again = await adminCall(base, 'PUT', `${sessionId}/external/${call.correlationId}`, { plan: 'gold' })
  t.equal(again.status, 409)
  t.equal(again.json.code, 'CORRELATION_ALREADY_RESOLVED')

  const injected = await adminCall(base, 'PUT', `${sessionId}/toolinject`, { tool: 'crm_lookup', args: { customerId: 'C-7' } })
  t.match(injected.json, { status: 'pending', correlationId: String, deadline: String })
  t.equal((await adminCall(base, 'PUT', `${sessionId}/external/${injected.json.correlationId}`, { plan: 'basic' })).status, 200)
  const snap = (await adminCall(base, 'GET', `${sessionId}/snapshot`)).json.data.snapshot
  t.same(snap.memory.pendingTools, [])
})

t.test('transfer: to an agent of the crew; the conversation continues under it', async t => {
  const { base, sessionId, stream, say, history } = await session(t)
  await say('hello')
  await stream.next('crew.status.waiting')
  t.equal((await adminCall(base, 'PUT', `${sessionId}/transfer`, { target: '' })).status, 400)
  const unknown = await adminCall(base, 'PUT', `${sessionId}/transfer`, { target: 'marketing' })
  t.equal(unknown.status, 400)
  t.match(unknown.json, { code: 'UNKNOWN_AGENT', agents: ['general', 'support', 'billing'] })
  t.equal((await adminCall(base, 'PUT', `${sessionId}/transfer`, { target: 'support', reason: 'refund' })).status, 200)
  t.match((await stream.next('session.transferred')).data, { sessionId, from: 'general', agentId: 'support' })
  t.equal((await adminCall(base, 'PUT', `${sessionId}/transfer`, { target: 'support' })).json.code, 'ALREADY_ASSIGNED')
  await say('thanks')
  t.equal((await stream.next('assistant.message')).data.agentId, 'support')
  t.match((await history()).data.find((e: any) => e.type === 'agent.transferred'), { from: 'general', to: 'support', reason: 'refund', userId: 'supervisor-7' })
  const snap = (await adminCall(base, 'GET', `${sessionId}/snapshot`)).json.data.snapshot
  t.match(snap, { agentId: 'support', transferred: true, configuration: { agentId: 'support' } })
  t.equal(snap.memory.messages.filter((m: any) => m.author === 'user').length, 2, 'continuity kept')
})

t.test('pause and resume: nothing while paused, kept messages answered after resume', async t => {
  const { base, sessionId, stream, say, history, service } = await session(t)
  const resumeActive = await adminCall(base, 'PUT', `${sessionId}/resume`)
  t.equal(resumeActive.status, 409)
  t.match(resumeActive.json, { code: 'INVALID_SESSION_STATE', state: 'active.idle', command: 'admin.resume' })
  t.equal((await adminCall(base, 'PUT', `${sessionId}/pause`)).status, 200)
  t.equal((await stream.next()).event, 'session.paused')
  t.equal((await adminCall(base, 'PUT', `${sessionId}/pause`)).json.code, 'INVALID_SESSION_STATE', 'pause twice')
  t.equal((await adminCall(base, 'PUT', `${sessionId}/attend`)).json.code, 'INVALID_SESSION_STATE', 'no reply on demand while paused')
  await say('is anyone there?')
  await new Promise(r => setTimeout(r, 100))
  t.equal(stream.names().at(-1), 'session.paused', 'the assistant produced nothing')
  let record = await service.platform.store.collection('session_records').findOne({ _id: sessionId })
  t.equal(record!.status, 'paused')
  t.equal((await adminCall(base, 'PUT', `${sessionId}/resume`)).status, 200)
  t.equal((await stream.next()).event, 'session.resumed')
  t.equal((await stream.next()).event, 'crew.status.writing')
  t.equal((await stream.next('assistant.message')).data.text, 'You said: is anyone there?')
  t.same((await history()).data.filter((e: any) => e.userId).map((e: any) => e.type), ['session.paused', 'session.resumed'])
  // The counts are written within ENGINE_RECORD_FLUSH_MS.
  record = await eventually(() => service.platform.store.collection('session_records').findOne({ _id: sessionId }), r => r?.assistant_messages === 1)
  t.match(record, { status: 'active', user_messages: 1, assistant_messages: 1 })
})

t.test('pause in the middle of a streaming reply: the history says a reply was cut short; a pause between turns does not', async t => {
  const crews = crewsFile({ patchDemo: { assistant: { provider: 'scripted', chunkDelayMs: 100, fallback: 'one two three four five six' } } })
  const { base } = await startTestService(t, { env: { CREWS_FILE: crews } })
  const { sessionId, consumerId, stream } = await createSession(base)
  t.teardown(() => stream.close())
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'tell me' } })).status, 201)
  t.equal((await stream.next('assistant.response')).data.delta, 'one ', 'the reply is streaming')
  t.equal((await adminCall(base, 'PUT', `${sessionId}/pause`)).status, 200)
  t.equal((await adminCall(base, 'PUT', `${sessionId}/resume`)).status, 200)
  await stream.next('assistant.message') // the reply owed, written again after resume
  t.equal((await adminCall(base, 'PUT', `${sessionId}/pause`)).status, 200)
  const history = (await adminCall(base, 'GET', `${sessionId}/history`)).json.data as any[]
  const pauses = history.filter(e => e.type === 'session.paused')
  t.equal(pauses.length, 2)
  t.equal(pauses[0].interruptedTurn, true, 'the first pause cut a reply short')
  t.notOk(pauses[1].interruptedTurn, 'the second came between turns')
})

t.test('history: an ordered timeline, paged', async t => {
  const { base, sessionId, stream, say } = await session(t)
  await say('echo hi')
  await stream.next('crew.status.waiting')
  const h = (await adminCall(base, 'GET', `${sessionId}/history`)).json
  t.equal(h.sessionId, sessionId)
  t.same(h.data.map((e: any) => e.seq), h.data.map((_: any, i: number) => i + 1))
  t.same(h.data.map((e: any) => e.type), ['session.created', 'message.user', 'turn.started', 'message.assistant', 'tool.call', 'tool.result', 'turn.continued', 'message.assistant'])
  t.equal(h.logPosition, 8)
  const page = (await adminCall(base, 'GET', `${sessionId}/history?after=2&limit=3`)).json
  t.same(page.data.map((e: any) => e.seq), [3, 4, 5])
  t.equal(page.hasMore, true)
  t.equal((await adminCall(base, 'GET', `${sessionId}/history?limit=0`)).status, 400)
})

t.test('snapshot: context with ResumenConversacion for a SIP handoff', async t => {
  const { base, sessionId, stream, say } = await session(t)
  await say('I want to upgrade my plan')
  await stream.next('crew.status.waiting')
  const res = await adminCall(base, 'GET', `${sessionId}/snapshot`)
  t.equal(res.status, 200)
  const snap = res.json.data.snapshot
  t.match(snap, {
    sessionId,
    crewId: 'demo',
    state: 'active',
    agentId: 'general',
    configuration: { crewId: 'demo', assistant: { provider: 'scripted' }, tools: [{ id: 'echo' }, { id: 'crm_lookup', external: true }] },
  })
  const context = snap.configuration.context
  t.equal(context.name, 'Ana')
  t.equal(context.plan, 'gold')
  t.match(context.ResumenConversacion, /I want to upgrade my plan/)
  t.match(context.ResumenConversacion, /Agent in charge: general/)
})

t.test('destroy: 204, streams close, then the session is gone', async t => {
  const { base, sessionId, stream, consumerId, service } = await session(t)
  const res = await adminCall(base, 'DELETE', sessionId)
  t.equal(res.status, 204)
  t.match((await stream.next('session.closed')).data, { reason: 'admin_destroyed' })
  await stream.ended_()
  t.equal((await adminCall(base, 'GET', `${sessionId}/snapshot`)).status, 404)
  t.equal((await adminCall(base, 'DELETE', sessionId)).status, 404)
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'x' } })).status, 404)
  const record = await service.platform.store.collection('session_records').findOne({ _id: sessionId })
  t.match(record, { status: 'completed', end_reason: 'admin_destroyed', end_time: Number })
  t.equal(await service.platform.store.collection('engine_session_log').countDocuments({ sessionId }), 0, 'its log is released')
})
