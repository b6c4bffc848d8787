// The assistant channel over real HTTP and real SSE streams.
import t from 'tap'
import { call, eventually, KEYS, startTestService } from '../support/harness.js'
import { CHANNEL, createSession, openSse } from '../support/sse.js'
import { crewsFile } from '../engine/fixtures/crews.js'

const send = (base: string, sessionId: string, consumerId: string, message: unknown, key?: string) =>
  call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message }, key })

t.test('create: Initialized first, ids from 1, then the assistant waits', async t => {
  const { base } = await startTestService(t)
  const opened = await openSse(base, 'POST', `${CHANNEL}/demo`, { body: { arguments: { name: 'Ana' } } })
  t.equal(opened.status, 200)
  t.match(opened.headers.get('content-type'), /^text\/event-stream/)
  const stream = opened.stream!
  const init = await stream.next('Initialized')
  t.equal(init.id, '1')
  t.match(init.data, { sessionId: String, consumerId: String })
  t.equal(opened.headers.get('x-session-id'), init.data.sessionId)
  const waiting = await stream.next()
  t.equal(waiting.event, 'crew.status.waiting')
  t.equal(waiting.id, '2')
  t.same(waiting.data, { sessionId: init.data.sessionId, agentId: 'general' })
  stream.close()
})

t.test('a user message: 201, then writing, response chunks, message, waiting on the stream', async t => {
  const { base } = await startTestService(t)
  const { stream, sessionId, consumerId } = await createSession(base)
  await stream.next('crew.status.waiting')
  const put = await send(base, sessionId, consumerId, 'Tell me about plans')
  t.equal(put.status, 201)
  t.same(put.json, { sessionId, consumerId, status: 'accepted' })
  const message = await stream.next('assistant.message')
  await stream.next('crew.status.waiting')
  const turn = stream.events.slice(2).filter(e => e.event !== 'hearthbeat')
  t.equal(turn[0]!.event, 'crew.status.writing')
  const chunks = turn.filter(e => e.event === 'assistant.response')
  // The scripted reply is written at once: one write window, one chunk (a slower one below).
  t.equal(chunks.length, 1, 'a reply produced at once comes as one chunk')
  t.equal(chunks.map(c => c.data.delta).join(''), message.data.text, 'chunks add up to the message')
  t.same(chunks.map(c => c.data.index), chunks.map((_, i) => i))
  t.ok(chunks.every(c => c.data.messageId === message.data.messageId && c.data.turnId === 1), 'the chunks carry the message\'s id and turn')
  t.match(message.data, { sessionId, agentId: 'general', text: 'You said: Tell me about plans', messageId: String, turnId: 1 })
  t.same(turn.map(e => e.event).slice(-2), ['assistant.message', 'crew.status.waiting'])
  const ids = stream.events.map(e => Number(e.id))
  t.same(ids, ids.map((_, i) => i + 1), 'ids are consecutive from 1')
  stream.close()
})

t.test('a reply written word by word over time streams a chunk per write window, in order, adding up to the message', async t => {
  const crews = crewsFile({ patchDemo: { assistant: { provider: 'scripted', chunkDelayMs: 30, fallback: 'one two three four' } } })
  const { base } = await startTestService(t, { env: { CREWS_FILE: crews } })
  const { stream, sessionId, consumerId } = await createSession(base)
  await stream.next('crew.status.waiting')
  t.equal((await send(base, sessionId, consumerId, 'go on')).status, 201)
  const message = await stream.next('assistant.message')
  const chunks = stream.events.filter(e => e.event === 'assistant.response')
  t.same(chunks.map(c => c.data.delta), ['one ', 'two ', 'three ', 'four'], 'a chunk per word: each came in a window of its own')
  t.same(chunks.map(c => c.data.index), [0, 1, 2, 3])
  t.equal(chunks.map(c => c.data.delta).join(''), message.data.text)
  stream.close()
})

t.test('tools in a turn: echo', async t => {
  const { base } = await startTestService(t)
  const { stream, sessionId, consumerId } = await createSession(base)
  t.equal((await send(base, sessionId, consumerId, 'echo good morning')).status, 201)
  const message = await stream.next('assistant.message')
  t.equal(message.data.text, 'The echo tool returned: good morning')
  // The reply after the tool is the turn's second round: its own id, on its chunks too.
  const chunks = stream.events.filter(e => e.event === 'assistant.response')
  t.equal(chunks.map(c => c.data.delta).join(''), message.data.text)
  t.ok(chunks.every(c => c.data.messageId === message.data.messageId), `chunks under ${message.data.messageId}`)
  t.same(chunks.map(c => c.data.index), chunks.map((_, i) => i))
  stream.close()
})

t.test('outbound static and dynamic', async t => {
  const { base } = await startTestService(t)
  const s1 = await createSession(base, { body: { outbound: { type: 'static', parameters: { text: 'Hi, this is Acme', applyModifiers: true } } } })
  const first = await s1.stream.next()
  t.equal(first.event, 'assistant.message', 'the first message comes without waiting for the user')
  t.equal(first.data.text, 'Hello, this is Acme 🙂', 'crew modifiers applied')
  t.equal((await s1.stream.next()).event, 'crew.status.waiting')

  const s2 = await createSession(base, {
    body: {
      arguments: { name: 'Ana' },
      outbound: { type: 'dynamic', parameters: { previousWhisperedMessages: [{ author: 'agent', text: 'Calling about the renewal' }] } },
    },
  })
  t.equal((await s2.stream.next()).event, 'crew.status.writing')
  const greeting = await s2.stream.next('assistant.message')
  t.equal(greeting.data.text, 'Hi Ana, I am the Demo assistant. How can I help you?')
  s1.stream.close()
  s2.stream.close()
})

t.test('listen: every consumer gets every event; a listener may send', async t => {
  const { base } = await startTestService(t)
  const { stream, sessionId, consumerId } = await createSession(base)
  await stream.next('crew.status.waiting')
  const listened = await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen`)
  t.equal(listened.status, 200)
  const listener = listened.stream!
  const attached = await listener.next()
  t.equal(attached.event, 'session.consumer.attached')
  t.equal(attached.id, stream.events.at(-1)!.id, "its id is the session's last event (ids are the session's, not the consumer's)")
  t.equal(attached.data.sessionId, sessionId)
  t.not(attached.data.consumerId, consumerId, 'a new consumer id')
  t.equal((await send(base, sessionId, attached.data.consumerId, 'hello')).status, 201)
  const a = await stream.next('assistant.message')
  const b = await listener.next('assistant.message')
  t.same(a.data, b.data)
  t.same(stream.names().slice(2), listener.names().slice(1), 'same events in the same order')
  t.same(stream.events.slice(2).map(e => e.id), listener.events.slice(1).map(e => e.id), 'with the same ids')
  stream.close()
  listener.close()
})

t.test('DELETE ends the session: 201, every stream gets session.closed and ends', async t => {
  const { base, service } = await startTestService(t)
  const { stream, sessionId, consumerId } = await createSession(base)
  const listener = (await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen`)).stream!
  await listener.next('session.consumer.attached')
  const del = await call(base, 'DELETE', `${CHANNEL}/${sessionId}`, { body: { reason: 'user_closed' } })
  t.equal(del.status, 201)
  t.same(del.json, { sessionId, status: 'destroyed', reason: 'user_closed' })
  for (const s of [stream, listener]) {
    t.same((await s.next('session.closed')).data, { sessionId, reason: 'user_closed' })
    await s.ended_()
  }
  t.equal((await send(base, sessionId, consumerId, 'hello?')).status, 404)
  t.equal((await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen`)).status, 404)
  t.equal((await call(base, 'DELETE', `${CHANNEL}/${sessionId}`)).status, 404)
  const record = await service.platform.store.collection('session_records').findOne({ _id: sessionId })
  t.match(record, { status: 'completed', end_reason: 'user_closed', user_messages: 0 })

  const other = await createSession(base)
  t.equal((await call(base, 'DELETE', `${CHANNEL}/${other.sessionId}`)).json.reason, 'finished', 'default reason')
})

t.test('channel errors', async t => {
  const { base } = await startTestService(t)
  const unknown = await openSse(base, 'POST', `${CHANNEL}/nope`, { body: {} })
  t.equal(unknown.status, 400)
  t.equal(unknown.json.code, 'CREW_NOT_FOUND')

  const bad = await openSse(base, 'POST', `${CHANNEL}/demo`, { body: { outbound: { type: 'static', parameters: {} }, extra: 1 } })
  t.equal(bad.status, 400)
  t.equal(bad.json.code, 'VALIDATION_FAILED')
  t.same(bad.json.details.map((d: any) => [d.field, d.code]).sort(), [['extra', 'UNKNOWN_FIELD'], ['outbound.parameters.text', 'REQUIRED']])

  const dynamic = await openSse(base, 'POST', `${CHANNEL}/demo`, { body: { outbound: { type: 'dynamic', parameters: { previousWhisperedMessages: [{ text: 'x', author: 'robot' }] } } } })
  t.equal(dynamic.status, 400)
  t.match(dynamic.json.details, [{ field: 'outbound.parameters.previousWhisperedMessages[0].author', code: 'INVALID_AUTHOR' }])

  const badType = await openSse(base, 'POST', `${CHANNEL}/demo`, { body: { outbound: { type: 'loud', parameters: {} } } })
  t.match(badType.json.details, [{ field: 'outbound.type', code: 'INVALID_OUTBOUND_TYPE' }])

  const res = await fetch(`${base}${CHANNEL}/demo`, { method: 'POST', headers: { apikey: KEYS.acme, 'content-type': 'application/json' }, body: '{' })
  t.equal(res.status, 400)
  t.equal((await res.json()).code, 'INVALID_JSON')

  t.equal((await openSse(base, 'POST', `${CHANNEL}/demo`, { key: null })).status, 401)
  t.equal((await openSse(base, 'POST', `${CHANNEL}/demo`, { key: KEYS.acmeDialerOnly })).status, 403)

  const { stream, sessionId, consumerId } = await createSession(base)
  const empty = await send(base, sessionId, consumerId, '')
  t.equal(empty.status, 400)
  t.match(empty.json.details, [{ field: 'message', code: 'REQUIRED' }])
  t.equal((await send(base, sessionId, consumerId, 42)).status, 400)
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: {} })).json.details[0].field, 'message')
  t.equal((await send(base, 'not-a-uuid', consumerId, 'x')).json.code, 'INVALID_SESSION_ID')
  t.equal((await send(base, sessionId, 'nope', 'x')).json.code, 'INVALID_CONSUMER_ID')
  const unknownConsumer = await send(base, sessionId, '7d2c1b56-43c1-4a8e-9f11-0b8e2a3c9d10', 'x')
  t.equal(unknownConsumer.status, 400)
  t.equal(unknownConsumer.json.code, 'UNKNOWN_CONSUMER')
  const missing = await send(base, '7d2c1b56-43c1-4a8e-9f11-0b8e2a3c9d10', consumerId, 'x')
  t.equal(missing.status, 404)
  t.equal(missing.json.code, 'SESSION_NOT_FOUND')
  t.equal((await openSse(base, 'POST', `${CHANNEL}/nope/listen`)).json.code, 'INVALID_SESSION_ID')
  t.equal((await call(base, 'DELETE', `${CHANNEL}/${sessionId}`, { body: { reason: 'has spaces' } })).status, 400)

  // Another account's session is exactly like a missing one.
  const foreign = await send(base, sessionId, consumerId, 'x', KEYS.globex)
  t.equal(foreign.status, 404)
  t.same(foreign.json, { ...missing.json, message: foreign.json.message })
  t.equal((await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen`, { key: KEYS.globex })).status, 404)
  t.equal((await call(base, 'DELETE', `${CHANNEL}/${sessionId}`, { key: KEYS.globex })).status, 404)
  t.equal((await send(base, sessionId, consumerId, 'still mine')).status, 201)
  stream.close()
})

t.test('429 once the crew has maxConcurrentSessions live sessions (per account)', async t => {
  const { base } = await startTestService(t, { env: { CREWS_FILE: crewsFile({ patchDemo: { maxConcurrentSessions: 2 } }) } })
  const a = await createSession(base)
  const b = await createSession(base)
  const third = await openSse(base, 'POST', `${CHANNEL}/demo`, { body: {} })
  t.equal(third.status, 429)
  t.match(third.json, { code: 'SESSION_LIMIT_REACHED', limit: 2, message: String })
  const globex = await createSession(base, { key: KEYS.globex })
  t.ok(globex.sessionId, 'another account has its own count')
  t.equal((await call(base, 'DELETE', `${CHANNEL}/${a.sessionId}`)).status, 201)
  const again = await createSession(base)
  t.ok(again.sessionId, 'a closed session frees its place')
  for (const s of [a, b, globex, again]) s.stream.close()
})

// Run over the channel's WebSocket too (channel-over-socket.test.ts): there the session's own stream is a socket.
const overSocket = process.env.CHANNEL_TRANSPORT === 'ws'

t.test('hearthbeat every SSE_HEARTBEAT_MS', { skip: overSocket && 'a socket is kept alive by WebSocket pings, not hearthbeat events' }, async t => {
  const { base } = await startTestService(t, { env: { SSE_HEARTBEAT_MS: '60' } })
  const { stream } = await createSession(base)
  const beat = await stream.next('hearthbeat', 2000)
  t.same(beat.data, { minutes: 0.001 })
  t.ok(Number(beat.id) > 1, 'heartbeats carry ids too')
  await stream.next('hearthbeat', 2000)
  stream.close()
})

t.test('streams and disconnects are counted in metrics', async t => {
  const { base, metricsBase } = await startTestService(t)
  const { stream, sessionId } = await createSession(base)
  const listener = (await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen`)).stream!
  await listener.next('session.consumer.attached')
  const metric = async (name: string) => {
    const text = await (await fetch(`${metricsBase}/metrics`)).text()
    return Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? NaN)
  }
  t.equal(await metric('switchboard_sse_streams_open'), overSocket ? 1 : 2)
  if (overSocket) t.equal(await metric('switchboard_channel_sockets_open'), 1, "the session's own stream is counted as a socket")
  t.equal(await metric('switchboard_sessions_live'), 1)
  listener.close()
  t.equal(await eventually(() => metric('switchboard_sse_client_disconnects_total'), n => n >= 1), 1)
  t.equal(await metric('switchboard_sse_streams_open'), overSocket ? 0 : 1)
  stream.close()
})

t.test('the OpenAPI document lists the channel and administration', async t => {
  const { base } = await startTestService(t)
  const doc = (await call(base, 'GET', '/openapi.json', { key: null })).json
  const create = doc.paths['/assistants-channel/api/v1/channel/api/eventstream/{crewId}'].post
  t.equal(create['x-role'], 'channel')
  t.ok(create.requestBody)
  t.ok(create.responses['429'])
  const whisper = doc.paths['/engine/api/administration/session/{sessionId}/whisper'].put
  t.equal(whisper['x-role'], 'admin')
  t.ok(whisper.parameters.some((p: any) => p.name === 'UserId' && p.in === 'header' && p.required))
  t.ok(doc.components.schemas['channel.create'])
  t.ok(doc.components.schemas['admin.override'])
})
