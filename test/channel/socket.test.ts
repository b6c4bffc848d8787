// The assistant channel over a WebSocket, against the real service with the `ws` client: the same
// session, events and ids as SSE (a client switches transports mid-session), resumption, tickets
// and Origin, the same limits as SSE, and a clear close for anything a client gets wrong.
import t from 'tap'
import { call, eventually, KEYS, startTestService } from '../support/harness.js'
import { ADMIN, CHANNEL, createSession, openSse } from '../support/sse.js'
import { createSocketSession, openSocket, SOCKET } from '../support/ws.js'
import { crewsFile } from '../engine/fixtures/crews.js'

const USER = { UserId: 'supervisor-1' }
const withoutBeats = <T extends { event: string }>(events: T[]) => events.filter(e => e.event !== 'hearthbeat')

t.test('open over a socket: ack, then the same events with the same ids and payloads an SSE listener gets', async t => {
  const { base } = await startTestService(t)
  const { socket, sessionId, consumerId, init } = await createSocketSession(base, { arguments: { name: 'Ana' } })
  t.match(socket.frames[0], { type: 'ack', of: 'open', result: { sessionId, consumerId } }, 'the open is acked first, with the ids')
  t.same(init, { id: '1', event: 'Initialized', data: { sessionId, consumerId } })
  await socket.next('crew.status.waiting')
  const listener = (await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen`)).stream!
  await listener.next('session.consumer.attached')

  const ack = await socket.ask({ type: 'message', message: 'Tell me about plans' })
  t.same(ack.result, { sessionId, consumerId, status: 'accepted' }, "the ack carries the PUT's 201 body")
  t.equal(ack.of, 'message')
  await socket.next('assistant.message')
  await socket.next('crew.status.waiting')
  await listener.next('crew.status.waiting')
  const turn = (events: { id?: string; event: string; data: unknown }[]) => withoutBeats(events).filter(e => Number(e.id) > 2).map(e => [e.id, e.event, e.data])
  t.same(turn(socket.events), turn(listener.events.slice(1)), 'same ids, names and payloads on both transports')
  t.same(socket.names().slice(2), ['crew.status.writing', 'assistant.response', 'assistant.message', 'crew.status.waiting'])
  const ids = socket.events.map(e => Number(e.id))
  t.same(ids, ids.map((_, i) => i + 1), 'ids consecutive from 1')

  // A message from the SSE consumer is answered on the socket too.
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${(listener.events[0]!.data as any).consumerId}`, { body: { message: 'hi' } })).status, 201)
  t.match((await socket.next('assistant.message')).data, { text: 'Hello! How can I help you today?' })
  listener.close()
  socket.close()
})

t.test('switch transports mid-session: SSE to a socket with the last id, then back with the same consumer', async t => {
  const { base, metricsBase } = await startTestService(t)
  const { stream, sessionId, consumerId } = await createSession(base)
  await stream.next('crew.status.waiting')
  const lastSeen = stream.events.at(-1)!.id!
  stream.close()
  await eventually(async () => (await (await fetch(`${metricsBase}/metrics`)).text()).includes('switchboard_sse_client_disconnects_total 1'), Boolean)
  // While away, a turn goes by (a second consumer speaks).
  const other = (await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen`)).stream!
  const otherId = (await other.next('session.consumer.attached')).data.consumerId
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${otherId}`, { body: { message: 'while away' } })).status, 201)
  await other.next('crew.status.waiting')
  const missed = withoutBeats(other.events).slice(1)

  const socket = await openSocket(base)
  const ack = await socket.ask({ type: 'attach', sessionId, consumerId, lastEventId: Number(lastSeen) })
  t.same(ack.result, { sessionId, consumerId }, 'the same consumer')
  t.same(socket.events[0], { id: lastSeen, event: 'session.consumer.attached', data: { sessionId, consumerId, resumed: true, lastEventId: Number(lastSeen) } })
  await socket.next('crew.status.waiting')
  t.same(socket.events.slice(1).map(e => [e.id, e.event, e.data]), missed.map(e => [e.id, e.event, e.data]), 'what it missed, with the original ids')
  t.equal((await socket.ask({ type: 'message', message: 'from the socket' })).type, 'ack', 'its messages are attributed to the same consumer')
  await socket.next('crew.status.waiting')
  const lastOnSocket = socket.events.at(-1)!.id!
  socket.close()
  await socket.closed()

  // Back to SSE with the last id the socket got: nothing repeated, nothing missed.
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${otherId}`, { body: { message: 'again' } })).status, 201)
  await other.next(e => e.event === 'crew.status.waiting' && Number(e.id) > Number(lastOnSocket) + 1)
  const back = (await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen?consumerId=${consumerId}`, { headers: { 'Last-Event-ID': lastOnSocket } })).stream!
  await back.next('crew.status.waiting')
  t.same(
    withoutBeats(back.events).slice(1).map(e => e.id),
    withoutBeats(other.events).filter(e => Number(e.id) > Number(lastOnSocket)).map(e => e.id),
    'SSE resumes right after the socket',
  )
  back.close()
  other.close()
})

t.test('resume from the URL: ?sessionId=&consumerId=&lastEventId= attaches as the socket opens', async t => {
  const { base } = await startTestService(t)
  const { socket, sessionId, consumerId } = await createSocketSession(base)
  await socket.next('crew.status.waiting')
  t.equal((await socket.ask({ type: 'message', message: 'one' })).type, 'ack')
  await socket.next('crew.status.waiting')
  const all = socket.events.map(e => [e.id, e.event])
  socket.close()
  await socket.closed()
  const resumed = await openSocket(base, { query: `?sessionId=${sessionId}&consumerId=${consumerId}&lastEventId=2` })
  t.match(await resumed.nextFrame('ack'), { of: 'attach', result: { sessionId, consumerId } })
  await resumed.next('crew.status.waiting')
  t.same(resumed.events.slice(1).map(e => [e.id, e.event]), all.slice(2), 'everything after id 2, with its id')
  const beyond = await openSocket(base, { query: `?sessionId=${sessionId}&lastEventId=999` })
  t.match(await beyond.nextFrame('error'), { of: 'attach', status: 400, error: { code: 'INVALID_LAST_EVENT_ID' } })
  t.same(await beyond.closed(), { code: 4400, reason: beyond.close_!.reason })
  t.match(beyond.close_!.reason, /^INVALID_LAST_EVENT_ID: /)
  const badParam = await openSocket(base, { query: '?sessionId=nope' })
  t.match(badParam.refused, { status: 400, body: { code: 'INVALID_SESSION_ID' } }, 'a bad URL is refused before the upgrade')
  resumed.close()
})

t.test('tickets: single use, bound to account and crew or session, expiring; never the key in a URL; Origin checked', async t => {
  const { base } = await startTestService(t, { env: { CHANNEL_SOCKET_ALLOWED_ORIGINS: 'https://app.example.com', CHANNEL_SOCKET_TICKET_TTL_MS: '1000' } })
  const issue = (body: unknown, key?: string) => call(base, 'POST', `${SOCKET}/tickets`, { body, key })
  const issued = await issue({ crewId: 'demo' })
  t.equal(issued.status, 201)
  t.match(issued.json, { ticket: String, expiresAt: String, path: SOCKET })
  t.equal((await issue({})).status, 400, 'a crew or a session is required')
  t.equal((await issue({ crewId: 'demo', sessionId: '7d2c1b56-43c1-4a8e-9f11-0b8e2a3c9d10' })).status, 400, 'not both')
  t.equal((await issue({ crewId: 'demo' }, KEYS.acmeDialerOnly)).status, 403, 'the channel role is needed')

  // A browser: no apikey, the ticket as a subprotocol, an allowed Origin.
  const browser = await openSocket(base, { key: null, protocols: ['switchboard.channel.v1', `ticket.${issued.json.ticket}`], headers: { Origin: 'https://app.example.com' } })
  t.equal(browser.refused, null, 'accepted')
  t.equal(browser.ws.protocol, 'switchboard.channel.v1', 'the channel subprotocol is answered')
  const ack = await browser.ask({ type: 'open', crewId: 'demo' })
  t.equal(ack.type, 'ack', 'opens a session on its crew')
  const sessionId = ack.result.sessionId
  t.equal((await call(base, 'GET', `${ADMIN}/${sessionId}/snapshot`, { headers: USER })).status, 200, "the session is the ticket's account's")
  t.equal((await call(base, 'GET', `${ADMIN}/${sessionId}/snapshot`, { headers: USER, key: KEYS.globex })).status, 404)

  const again = await openSocket(base, { key: null, query: `?ticket=${encodeURIComponent(issued.json.ticket)}` })
  t.match(again.refused, { status: 401, body: { code: 'UNAUTHORIZED' } }, 'a ticket is good once')

  const forCrew = await issue({ crewId: 'demo' })
  const wrongUse = await openSocket(base, { key: null, query: `?ticket=${encodeURIComponent(forCrew.json.ticket)}` })
  t.match(await wrongUse.ask({ type: 'attach', sessionId }), { type: 'error', status: 403, error: { code: 'TICKET_SCOPE' } })
  t.equal((await wrongUse.closed()).code, 4403, 'a crew ticket does not attach to a session')
  const otherCrew = await openSocket(base, { key: null, query: `?ticket=${encodeURIComponent((await issue({ crewId: 'other' })).json.ticket)}` })
  t.equal((await otherCrew.ask({ type: 'open', crewId: 'demo' })).error.code, 'TICKET_SCOPE', 'nor opens on another crew')

  const forSession = await issue({ sessionId })
  const listener = await openSocket(base, { key: null, query: `?ticket=${encodeURIComponent(forSession.json.ticket)}&sessionId=${sessionId}` })
  t.match(await listener.next('session.consumer.attached'), { data: { sessionId } }, 'a session ticket attaches to its session')

  const late = await issue({ crewId: 'demo' })
  await new Promise(r => setTimeout(r, 1200))
  t.match((await openSocket(base, { key: null, query: `?ticket=${encodeURIComponent(late.json.ticket)}` })).refused, { status: 401 }, 'an expired ticket is refused')
  const forged = `${issued.json.ticket.split('.')[0]}.${'A'.repeat(43)}`
  t.match((await openSocket(base, { key: null, query: `?ticket=${forged}` })).refused, { status: 401 }, 'a forged ticket is refused')
  t.match((await openSocket(base, { key: null, query: `?apikey=${KEYS.acme}` })).refused, { status: 401 }, 'an API key in the URL is not a credential')
  t.match((await openSocket(base, { key: null })).refused, { status: 401 })

  const fresh = await issue({ crewId: 'demo' })
  const evil = await openSocket(base, { key: null, query: `?ticket=${encodeURIComponent(fresh.json.ticket)}`, headers: { Origin: 'https://evil.example' } })
  t.match(evil.refused, { status: 403, body: { code: 'ORIGIN_NOT_ALLOWED' } }, 'an Origin not listed is refused')
  t.match((await openSocket(base, { headers: { Origin: 'https://evil.example' } })).refused, { status: 403 }, 'with an API key too')
  t.match((await call(base, 'GET', SOCKET)).status, 426, 'a plain GET is told to upgrade')
  for (const s of [browser, listener]) s.close()
})

t.test('bad input closes the socket with a code that says why, never a crash or a silent drop', async t => {
  const { base } = await startTestService(t, { env: { CHANNEL_SOCKET_MAX_FRAME_BYTES: '4096' } })
  const closeOf = async (send: (s: Awaited<ReturnType<typeof openSocket>>) => void, query = '') => {
    const socket = await openSocket(base, { query })
    send(socket)
    const closed = await socket.closed()
    return { ...closed, error: socket.frames.find(f => f.type === 'error') }
  }
  const notJson = await closeOf(s => s.send('{nope'))
  t.match(notJson, { code: 4400, reason: /^INVALID_JSON/, error: { status: 400, error: { code: 'INVALID_JSON' } } })
  const unknown = await closeOf(s => s.send({ type: 'shout', id: 7 }))
  t.match(unknown, { code: 4400, error: { error: { code: 'UNKNOWN_FRAME_TYPE', types: ['open', 'attach', 'message', 'interrupt', 'end'] } } })
  t.match(await closeOf(s => s.send('[1,2]')), { code: 4400, error: { error: { code: 'UNKNOWN_FRAME_TYPE' } } })
  const invalid = await closeOf(s => s.send({ type: 'open', id: 'a', crewId: '', extra: 1 }))
  t.match(invalid, { code: 4400, error: { id: 'a', of: 'open', error: { code: 'VALIDATION_FAILED' } } })
  t.same(invalid.error.error.details.map((d: any) => d.field).sort(), ['crewId', 'extra'], 'every problem listed')
  const early = await closeOf(s => s.send({ type: 'message', id: 1, message: 'hello?' }))
  t.match(early, { code: 4409, reason: /^NOT_READY/, error: { id: 1, of: 'message', status: 409, error: { code: 'NOT_READY' } } })
  t.match(await closeOf(s => s.ws.send(Buffer.from([1, 2, 3]))), { code: 1003 }, 'binary frames')
  t.match(await closeOf(s => s.send({ type: 'message', message: 'x'.repeat(5000) })), { code: 1009 }, 'a frame over CHANNEL_SOCKET_MAX_FRAME_BYTES')
  t.match(await closeOf(s => s.send('['.repeat(100) + ']'.repeat(100))), { code: 4400, error: { error: { code: 'JSON_TOO_DEEP' } } })
  const unknownCrew = await closeOf(s => s.send({ type: 'open', id: 1, crewId: 'nope' }))
  t.match(unknownCrew, { code: 4400, error: { of: 'open', error: { code: 'CREW_NOT_FOUND' } } })
  const missing = await closeOf(s => s.send({ type: 'attach', sessionId: '7d2c1b56-43c1-4a8e-9f11-0b8e2a3c9d10' }))
  t.match(missing, { code: 4404, error: { error: { code: 'SESSION_NOT_FOUND' } } })

  // On an open session: a second open, and an invalid message, close it too.
  const { socket } = await createSocketSession(base)
  t.match(await socket.ask({ type: 'open', crewId: 'demo' }), { type: 'error', status: 409, error: { code: 'ALREADY_OPEN' } })
  t.equal((await socket.closed()).code, 4409)
  const second = await createSocketSession(base)
  t.match(await second.socket.ask({ type: 'message', message: '' }), { status: 400, error: { code: 'VALIDATION_FAILED', details: [{ field: 'message', code: 'REQUIRED' }] } })
  t.equal((await second.socket.closed()).code, 4400)
  // A refused message that is not malformed keeps the socket: another account's consumer id is unknown, and so on.
  const third = await createSocketSession(base)
  t.equal((await call(base, 'GET', '/healthz', { key: null })).status, 200, 'the service is still up')
  t.equal((await third.socket.ask({ type: 'message', message: 'still here' })).type, 'ack')
  third.socket.close()
})

t.test('the consumer cap of SSE: a socket past it is closed with 4429', async t => {
  const { base } = await startTestService(t, { env: { SSE_MAX_CONSUMERS_PER_SESSION: '2' } })
  const { socket, sessionId } = await createSocketSession(base)
  const second = await openSocket(base, { query: `?sessionId=${sessionId}` })
  await second.next('session.consumer.attached')
  const third = await openSocket(base, { query: `?sessionId=${sessionId}` })
  t.match(await third.nextFrame('error'), { of: 'attach', status: 429, error: { code: 'CONSUMER_LIMIT_REACHED' } })
  t.match(await third.closed(), { code: 4429, reason: /^CONSUMER_LIMIT_REACHED: / })
  second.close()
  await second.closed()
  const again = await openSocket(base, { query: `?sessionId=${sessionId}` })
  t.match(await again.next('session.consumer.attached'), { data: { sessionId } }, 'a place freed by a closed socket is taken again')
  for (const s of [socket, again]) s.close()
})

t.test("account shares: an account past its share is closed with 4429 and a retry hint; another account is not", async t => {
  const { base } = await startTestService(t, { env: { OVERLOAD_MAX_STREAMS: '4', OVERLOAD_ACCOUNT_STREAMS_PERCENT: '50', OVERLOAD_ACCOUNT_STREAMS_FLOOR: '1', OVERLOAD_ACCOUNT_STREAMS_SHORT_PERCENT: '0' } })
  const held = [await createSocketSession(base), await createSocketSession(base)]
  const share = await openSocket(base)
  share.send({ type: 'open', crewId: 'demo' })
  t.match(await share.nextFrame('error'), { status: 429, error: { code: 'ACCOUNT_STREAM_LIMIT', retryAfterSeconds: 1 } })
  t.match(await share.closed(), { code: 4429, reason: /^ACCOUNT_STREAM_LIMIT \(retry after 1 s\): / })
  const globex = await createSocketSession(base, {}, { key: KEYS.globex })
  t.ok(globex.sessionId, 'another account opens')
  t.match((await openSocket(base, { key: KEYS.acmeReportsOnly })).refused, { status: 403 }, 'a key without the channel role is refused at the handshake')
  for (const s of [...held, globex]) s.socket.close()
})

t.test('overload: a new socket session is closed with 4503, the reason and the retry hint', async t => {
  const { base } = await startTestService(t, { env: { OVERLOAD_MAX_STREAMS: '1' } })
  const { socket } = await createSocketSession(base)
  const refused = await openSocket(base)
  refused.send({ type: 'open', id: 9, crewId: 'demo' })
  t.match(await refused.nextFrame('error'), { id: 9, of: 'open', status: 503, error: { code: 'OVERLOADED', reason: 'streams', retryAfterSeconds: Number } })
  t.match(await refused.closed(), { code: 4503, reason: /^OVERLOADED \(retry after \d+ s\): / })
  socket.close()
})

t.test('heartbeats are pings; a destroy closes the socket with 4000 and the reason', async t => {
  const { base } = await startTestService(t, { env: { SSE_HEARTBEAT_MS: '4000' } })
  const { socket, sessionId } = await createSocketSession(base)
  const pinged = await new Promise<boolean>(resolve => {
    socket.ws.once('ping', () => resolve(true))
    setTimeout(() => resolve(false), 7000).unref()
  })
  t.ok(pinged, 'the server pings an idle socket (the client answers pong by itself)')
  t.notOk(socket.names().includes('hearthbeat'), 'no heartbeat event on a socket')
  const listener = (await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen`)).stream!
  await listener.next('session.consumer.attached')
  t.equal((await call(base, 'DELETE', `${ADMIN}/${sessionId}`, { headers: USER })).status, 204)
  t.same((await socket.next('session.closed')).data, { sessionId, reason: 'admin_destroyed' })
  t.same(await socket.closed(), { code: 4000, reason: 'session closed: admin_destroyed' })
  await listener.ended_()

  // An `end` frame is the channel's DELETE.
  const ended = await createSocketSession(base)
  ended.socket.send({ type: 'end', reason: 'user_closed' })
  t.same((await ended.socket.next('session.closed')).data, { sessionId: ended.sessionId, reason: 'user_closed' })
  t.same(await ended.socket.closed(), { code: 4000, reason: 'session closed: user_closed' })
  t.equal((await call(base, 'GET', `${ADMIN}/${ended.sessionId}/snapshot`, { headers: USER })).status, 404)
})

t.test('shutdown: reconnect_required, then 1012 with the id to resume from', async t => {
  const service = await startTestService(t)
  const { socket, sessionId, consumerId } = await createSocketSession(service.base)
  await socket.next('crew.status.waiting')
  const idle = await openSocket(service.base)
  await service.close()
  const notice = await socket.next('reconnect_required')
  t.match(notice, { id: '2', data: { sessionId, consumerId, reason: 'shutdown' } })
  t.same(await socket.closed(), { code: 1012, reason: 'service stopping: resume with lastEventId=2 (any gateway)' })
  t.equal((await idle.closed()).code, 1012, 'a socket not yet on a session is closed too')
})

t.test('barge-in: an interrupt stops the reply where it is, records the cut, and the next message starts a new turn', async t => {
  const reply = 'one two three four five six seven eight nine ten eleven twelve'
  const crews = crewsFile({ patchDemo: { assistant: { provider: 'scripted', chunkDelayMs: 60, fallback: reply } } })
  const { base } = await startTestService(t, { env: { CREWS_FILE: crews } })
  const { socket, sessionId } = await createSocketSession(base)
  await socket.next('crew.status.waiting')
  t.same((await socket.ask({ type: 'interrupt' })).result, { interrupted: false }, 'nothing to interrupt: answered, not refused')

  t.equal((await socket.ask({ type: 'message', message: 'talk to me' })).type, 'ack')
  await socket.next('assistant.response')
  await socket.next('assistant.response')
  const ack = await socket.ask({ type: 'interrupt', heard: 'one' })
  t.match(ack.result, { interrupted: true, turnId: 1, messageId: 't1.0' })
  const cut = await socket.next('assistant.interrupted')
  const chunks = socket.events.filter(e => e.event === 'assistant.response' && Number(e.id) < Number(cut.id))
  t.same(cut.data, { sessionId, messageId: 't1.0', turnId: 1, agentId: 'general', chunks: chunks.length, text: chunks.map(c => (c.data as any).delta).join('') }, 'the cut: what was published of the reply')
  t.ok(chunks.length >= 2 && chunks.length < 12, `cut after ${chunks.length} of 12 words`)
  t.equal((await socket.next()).event, 'crew.status.waiting', 'the assistant waits for the user')
  await new Promise(r => setTimeout(r, 400)) // several more words' time
  const after = socket.events.filter(e => Number(e.id) > Number(cut.id))
  t.notOk(after.some(e => e.event === 'assistant.response' || e.event === 'assistant.message'), 'no further chunk, and no message, of the interrupted reply')

  t.equal((await socket.ask({ type: 'message', message: 'go on' })).type, 'ack')
  const next = await socket.next('assistant.message')
  t.match(next.data, { turnId: 2, messageId: 't2.0', text: reply }, 'the next message is a new turn, answered whole')
  const history = (await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: USER })).json.data as any[]
  t.match(history.find(e => e.type === 'turn.interrupted'), { turnId: 1, messageId: 't1.0', delivered: (cut.data as any).text, heard: 'one', chunks: chunks.length })
  const memory = (await call(base, 'GET', `${ADMIN}/${sessionId}/snapshot`, { headers: USER })).json.data.snapshot.memory.messages as any[]
  t.same(
    memory.filter(m => m.author !== 'system').map(m => [m.author, m.text]),
    [['user', 'talk to me'], ['assistant', 'one'], ['user', 'go on'], ['assistant', reply]],
    'the assistant is given what the user heard of the cut reply',
  )
  socket.close()
})

t.test('administration acts on a socket session as on any: whisper, impersonate, transfer, pause and resume', async t => {
  const { base } = await startTestService(t)
  const { socket, sessionId } = await createSocketSession(base)
  await socket.next('crew.status.waiting')
  const admin = (op: string, body?: unknown) => call(base, 'PUT', `${ADMIN}/${sessionId}/${op}`, { body, headers: USER })

  t.equal((await admin('whisper', { text: 'The caller is a gold customer' })).status, 200)
  t.equal((await admin('impersonate', { text: 'A human here, one moment' })).status, 200)
  t.match((await socket.next('assistant.message')).data, { text: 'A human here, one moment' }, 'an impersonation reaches the socket as a message')
  t.equal((await admin('transfer', { target: 'billing' })).status, 200)
  t.same((await socket.next('session.transferred')).data, { sessionId, from: 'general', agentId: 'billing' })
  t.equal((await admin('pause')).status, 200)
  await socket.next('session.paused')
  t.equal((await socket.ask({ type: 'message', message: 'anyone?' })).type, 'ack', 'a message while paused is accepted')
  await new Promise(r => setTimeout(r, 200))
  t.notOk(socket.names().includes('crew.status.writing'), 'and not answered while paused')
  t.equal((await admin('resume')).status, 200)
  await socket.next('session.resumed')
  t.match((await socket.next('assistant.message')).data, { agentId: 'billing', text: 'You said: anyone?' }, 'answered on resume, by the new agent')
  t.notOk(socket.events.some(e => JSON.stringify(e.data).includes('gold customer')), 'a whisper never reaches a stream')
  const history = (await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: USER })).json.data as any[]
  t.match(history.find(e => e.type === 'message.whisper'), { userId: 'supervisor-1', text: 'The caller is a gold customer' })
  socket.close()
})
