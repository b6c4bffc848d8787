// ConversationRelay against the real service, with a client that speaks as the telephony
// platform does: its frames are written from Twilio's published WebSocket message format
// (twilio.com/docs/voice/conversationrelay/websocket-messages), not from our types, and sent
// with the `ws` package over a real socket. What a voice deployment relies on: the platform's
// URL token (reusable, expiring, unforgeable), its handshake signature when configured, a call
// becoming a session with the caller's details, the reply spoken as tokens, barge-in, key
// presses, and the hand-off that ends the relay with the session id.
import { createHmac } from 'node:crypto'
import t from 'tap'
import { call, KEYS, startTestService } from '../support/harness.js'
import { ADMIN } from '../support/sse.js'
import { connect, prompt, RELAY, setupFrame } from '../support/relay.js'
import { crewsFile } from '../engine/fixtures/crews.js'

const SESSIONS = '/engine/api/administration/sessions'
const USER = { UserId: 'supervisor-1' }

const issue = async (base: string, body: unknown, key?: string) => call(base, 'POST', `${RELAY}/tokens`, { body, key })

/** The live session of the account not in `known` (each test has its own service). */
async function liveSession(base: string, known: string[] = []) {
  for (let i = 0; i < 100; i++) {
    const listed = (await call(base, 'GET', `${SESSIONS}?state=live`, { headers: USER })).json.data as any[]
    const fresh = listed.filter(s => !known.includes(s.sessionId))
    if (fresh.length === 1) return fresh[0].sessionId as string
    await new Promise(r => setTimeout(r, 100))
  }
  throw new Error('no new live session')
}

t.test('tokens: issued with the key for one crew, reusable until they expire, refused when forged or expired', async t => {
  const { base } = await startTestService(t)
  const issued = await issue(base, { crewId: 'demo' })
  t.equal(issued.status, 201)
  t.match(issued.json, { token: String, expiresAt: String, path: RELAY })
  const life = Date.parse(issued.json.expiresAt) - Date.now()
  t.ok(life > 23 * 3600_000 && life <= 24 * 3600_000, 'lives CONVERSATION_RELAY_TOKEN_TTL_MS (24 h) by default')
  t.equal((await issue(base, {})).status, 400, 'a crew is required')
  t.equal((await issue(base, { crewId: 'demo' }, KEYS.acmeDialerOnly)).status, 403, 'the channel role is needed')
  t.equal((await issue(base, { crewId: 'demo' }, null)).status, 401)

  // One platform URL serves many calls.
  const first = await connect(base, issued.json.token)
  const second = await connect(base, issued.json.token)
  t.equal(first.refused, null, 'a call connects with the token')
  t.equal(second.refused, null, 'and the next call with the same token')
  first.send(setupFrame())
  second.send(setupFrame())
  first.send(prompt('hi'))
  second.send(prompt('hi'))
  t.equal((await first.reply()).text, 'Hello! How can I help you today?', 'each call is answered')
  t.equal((await second.reply()).text, 'Hello! How can I help you today?')
  const listed = (await call(base, 'GET', `${SESSIONS}?state=live`, { headers: USER })).json.data as any[]
  t.equal(listed.length, 2, 'one session per call')
  t.ok(listed.every(s => s.crewId === 'demo'), "on the token's crew")
  first.ws.close()
  second.ws.close()

  const forged = `${issued.json.token.split('.')[0]}.${'A'.repeat(43)}`
  t.match((await connect(base, forged)).refused, { status: 401 }, 'a forged token is refused')
  const otherAccount = JSON.parse(Buffer.from(issued.json.token.split('.')[0], 'base64url').toString())
  const tampered = `${Buffer.from(JSON.stringify({ ...otherAccount, a: 'globex' })).toString('base64url')}.${issued.json.token.split('.')[1]}`
  t.match((await connect(base, tampered)).refused, { status: 401 }, 'claims cannot be changed under the signature')
  t.match((await connect(base, null)).refused, { status: 401 }, 'no token')
  t.match((await connect(base, null, { apikey: KEYS.acme })).refused, { status: 401 }, 'an API key names no crew: a token is needed')
  const ticket = (await call(base, 'POST', '/assistants-channel/api/v1/channel/api/socket/tickets', { body: { crewId: 'demo' } })).json.ticket
  t.match((await connect(base, ticket)).refused, { status: 401 }, 'a socket ticket is not a relay token')

  const short = await issue(base, { crewId: 'demo', ttlSeconds: 1 })
  await new Promise(r => setTimeout(r, 1200))
  t.match((await connect(base, short.json.token)).refused, { status: 401 }, 'an expired token is refused')
})

t.test("a call: setup opens a session with the caller's details, prompts are answered as text tokens, partials wait for the final transcript", async t => {
  const { base } = await startTestService(t)
  const platform = await connect(base, (await issue(base, { crewId: 'demo' })).json.token)
  platform.send(setupFrame({ callReference: 'bar', customerId: 'C-42' }))
  // The platform does not wait for us between frames: a prompt right after setup is answered too.
  platform.send(prompt('Tell me', false))
  platform.send(prompt('Tell me about plans'))
  const reply = await platform.reply()
  t.match(reply.text, /plans/, 'the final transcript is the user message')
  t.ok(reply.tokens.length >= 1)
  t.ok(platform.frames.every(f => f.type === 'text'), 'only text frames, no channel events')
  t.same(Object.keys(platform.frames.at(-1)).sort(), ['last', 'token', 'type'], 'the documented fields only')

  const sessionId = await liveSession(base)
  const snapshot = (await call(base, 'GET', `${ADMIN}/${sessionId}/snapshot`, { headers: USER })).json.data.snapshot
  t.equal(snapshot.crewId, 'demo')
  t.match(snapshot.configuration.context, { callReference: 'bar', customerId: 'C-42', call: { from: '+18005550100', to: '+18005550101', callSid: 'CA00000000000000000000000000000000', direction: 'inbound' } }, "the call's details are the session's arguments")
  const history = (await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: USER })).json.data as any[]
  t.same(history.filter(e => e.type === 'message.user').map(e => e.text), ['Tell me about plans'], 'one user message per utterance: the partial is not one')

  // A reply streamed in pieces: the tokens concatenate to the assistant's message.
  const words = 'one two three four five six'
  const crews = crewsFile({ patchDemo: { assistant: { provider: 'scripted', chunkDelayMs: 20, fallback: words } } })
  const streamed = await startTestService(t, { env: { CREWS_FILE: crews } })
  const caller = await connect(streamed.base, (await issue(streamed.base, { crewId: 'demo' })).json.token)
  caller.send(setupFrame())
  caller.send(prompt('talk to me'))
  const spoken = await caller.reply()
  t.ok(spoken.tokens.length > 3, `streamed as ${spoken.tokens.length} tokens`)
  t.equal(spoken.text, words, 'whose concatenation is the reply')
  const id = await liveSession(streamed.base)
  const memory = (await call(streamed.base, 'GET', `${ADMIN}/${id}/snapshot`, { headers: USER })).json.data.snapshot.memory.messages as any[]
  t.equal(memory.filter(m => m.author === 'assistant').at(-1).text, words, "the assistant's message")
  platform.ws.close()
  caller.ws.close()
})

t.test('barge-in: an interrupt stops the tokens and records what the caller heard; the next prompt is a new turn', async t => {
  const reply = 'one two three four five six seven eight nine ten eleven twelve'
  const crews = crewsFile({ patchDemo: { assistant: { provider: 'scripted', chunkDelayMs: 60, fallback: reply } } })
  const { base } = await startTestService(t, { env: { CREWS_FILE: crews } })
  const platform = await connect(base, (await issue(base, { crewId: 'demo' })).json.token)
  platform.send(setupFrame())
  platform.send(prompt('talk to me'))
  await platform.until(f => f.filter(x => x.type === 'text').length >= 2, 'two tokens')
  platform.send({ type: 'interrupt', utteranceUntilInterrupt: 'one', durationUntilInterruptMs: '460' })
  const atInterrupt = platform.frames.length
  await new Promise(r => setTimeout(r, 700)) // many more words' time
  const after = platform.frames.slice(atInterrupt)
  t.ok(after.length <= 1, `at most a token already on the wire when the interrupt was sent (got ${after.length})`)
  t.notOk(platform.frames.some(f => f.last === true), 'the cut reply is never finished')
  const spoken = platform.frames.map(f => f.token).join('')
  t.ok(spoken.length < reply.length, `cut after "${spoken}"`)

  const sessionId = await liveSession(base)
  const history = (await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: USER })).json.data as any[]
  t.match(history.find(e => e.type === 'turn.interrupted'), { turnId: 1, heard: 'one' }, 'the cut is recorded with what the caller heard')

  platform.send(prompt('go on'))
  t.equal((await platform.reply()).text, reply, 'the next prompt is answered whole')
  platform.ws.close()
})

t.test('dtmf: a key press reaches the assistant as a user message marked [DTMF]', async t => {
  const { base } = await startTestService(t)
  const platform = await connect(base, (await issue(base, { crewId: 'demo' })).json.token)
  platform.send(setupFrame())
  platform.send({ type: 'dtmf', digit: '5' })
  t.equal((await platform.reply()).text, 'You said: [DTMF] 5', 'the assistant hears the key and answers')
  const sessionId = await liveSession(base)
  const history = (await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: USER })).json.data as any[]
  t.match(history.filter(e => e.type === 'message.user'), [{ text: '[DTMF] 5' }])
  platform.ws.close()
})

t.test('hand-off: an administration transfer or destroy sends end with the session id, then closes', async t => {
  const { base } = await startTestService(t)
  const token = (await issue(base, { crewId: 'demo' })).json.token
  const platform = await connect(base, token)
  platform.send(setupFrame())
  platform.send(prompt('hi'))
  await platform.reply()
  const sessionId = await liveSession(base)
  t.equal((await call(base, 'PUT', `${ADMIN}/${sessionId}/transfer`, { body: { target: 'billing' }, headers: USER })).status, 200)
  await platform.until(f => f.some(x => x.type === 'end'), 'the end frame')
  const end = platform.frames.find(f => f.type === 'end')
  t.same(Object.keys(end).sort(), ['handoffData', 'type'])
  t.same(JSON.parse(end.handoffData), { sessionId, reason: 'transferred', from: 'general', agentId: 'billing' }, 'handoffData: a JSON string naming the session')
  t.match(await platform.closed(), { code: 4000, reason: /^session handed off: / })
  const snapshot = await call(base, 'GET', `${ADMIN}/${sessionId}/snapshot`, { headers: USER })
  t.equal(snapshot.status, 200, 'the session lives on: the SIP side fetches its snapshot')
  t.match(snapshot.json.data.snapshot, { agentId: 'billing' })

  const second = await connect(base, token)
  second.send(setupFrame())
  second.send(prompt('hi'))
  await second.reply()
  const secondId = await liveSession(base, [sessionId])
  t.equal((await call(base, 'DELETE', `${ADMIN}/${secondId}`, { headers: USER })).status, 204)
  await second.until(f => f.some(x => x.type === 'end'), 'the end frame')
  t.same(JSON.parse(second.frames.find(f => f.type === 'end').handoffData), { sessionId: secondId, reason: 'admin_destroyed' })
  t.same(await second.closed(), { code: 4000, reason: 'session closed: admin_destroyed' })
})

t.test('bad frames: malformed JSON and invalid frames close with a reason; unknown types and errors are logged, not fatal', async t => {
  const { base } = await startTestService(t)
  const token = (await issue(base, { crewId: 'demo' })).json.token
  const closeOf = async (...frames: unknown[]) => {
    const platform = await connect(base, token)
    for (const f of frames) platform.send(f)
    return platform.closed()
  }
  t.match(await closeOf('{nope'), { code: 4400, reason: /^INVALID_JSON: / }, 'malformed JSON')
  t.match(await closeOf('[1]'), { code: 4400, reason: /^INVALID_FRAME: / })
  t.match(await closeOf(setupFrame(), { type: 'prompt', last: true }), { code: 4400, reason: /^VALIDATION_FAILED: prompt: / }, 'a prompt without voicePrompt')
  t.match(await closeOf(prompt('hello?')), { code: 4409, reason: /^NOT_READY: / }, 'a prompt before setup')
  t.match(await closeOf(setupFrame(), setupFrame()), { code: 4409, reason: /^ALREADY_SET_UP: / })

  const platform = await connect(base, token)
  platform.send(setupFrame())
  platform.send({ type: 'somethingNew', foo: 1 })
  platform.send({ type: 'error', description: 'Invalid message received: { "foo" : "bar" }' })
  // Telnyx sends the duration as a number, Twilio as a string; nothing is being said: no harm.
  platform.send({ type: 'interrupt', utteranceUntilInterrupt: '', durationUntilInterruptMs: 1820 })
  platform.send(prompt('hi'))
  t.equal((await platform.reply()).text, 'Hello! How can I help you today?', 'the call goes on')
  platform.ws.close()
})

t.test('the handshake signature: with a relay secret, X-Twilio-Signature must sign the URL', async t => {
  const secret = '12345678901234567890123456789012'
  const { base } = await startTestService(t, { env: { CONVERSATION_RELAY_AUTH_TOKEN: `acme=${secret}` } })
  const token = (await issue(base, { crewId: 'demo' })).json.token
  const host = new URL(base).host
  // Twilio's webhook signing: base64(HMAC-SHA1(auth token, the URL it connected to)).
  const sign = (url: string, key = secret) => createHmac('sha1', key).update(url).digest('base64')
  const url = `wss://${host}${RELAY}?token=${token}`
  const signed = await connect(base, token, { 'X-Twilio-Signature': sign(url) })
  t.equal(signed.refused, null, 'a signed handshake is accepted')
  signed.send(setupFrame())
  signed.send(prompt('hi'))
  t.equal((await signed.reply()).text, 'Hello! How can I help you today?')
  t.match((await connect(base, token)).refused, { status: 403, body: { code: 'INVALID_SIGNATURE' } }, 'no signature')
  t.match((await connect(base, token, { 'X-Twilio-Signature': sign(url, 'another-secret-000000000000000000') })).refused, { status: 403 }, 'signed with another secret')
  t.match((await connect(base, token, { 'X-Twilio-Signature': sign(`wss://${host}${RELAY}?token=other`) })).refused, { status: 403 }, 'signed for another URL')
  const globexToken = (await issue(base, { crewId: 'demo' }, KEYS.globex)).json.token
  t.equal((await connect(base, globexToken)).refused, null, 'an account without a relay secret is not checked')
  signed.ws.close()
})

t.test('hang-up: the platform closing the socket ends the call, and its session with it', async t => {
  const { base } = await startTestService(t)
  const platform = await connect(base, (await issue(base, { crewId: 'demo' })).json.token)
  platform.send(setupFrame())
  platform.send(prompt('hi'))
  await platform.reply()
  const sessionId = await liveSession(base)
  platform.ws.close(1000)
  let status = 200
  for (let i = 0; i < 100 && status === 200; i++) {
    await new Promise(r => setTimeout(r, 100))
    status = (await call(base, 'GET', `${ADMIN}/${sessionId}/snapshot`, { headers: USER })).status
  }
  t.equal(status, 404, 'the session is closed: it holds no place of the crew')
  const closed = (await call(base, 'GET', `${SESSIONS}?state=closed`, { headers: USER })).json.data as any[]
  t.match(closed, [{ sessionId, endReason: 'call_ended' }], 'ended as call_ended')
})
