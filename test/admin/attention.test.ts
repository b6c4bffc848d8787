// Attention flags (issue 13) over real HTTP and SSE: a session that needs a human says why in the
// supervisors' listing and lifecycle feed, and a supervisor acknowledges the flag.
import t from 'tap'
import { call, eventually, KEYS, startTestService } from '../support/harness.js'
import { startOpenAiStandIn } from '../support/openai-stand-in.js'
import { ADMIN, CHANNEL, createSession, openSse } from '../support/sse.js'
import { crewsFile } from '../engine/fixtures/crews.js'

const SESSIONS = '/engine/api/administration/sessions'
const SUPERVISOR = { UserId: 'sup-ana' }
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))

/** The session's row once `ok` holds (records are written behind the session). */
async function row(base: string, sessionId: string, ok: (row: any) => boolean, timeoutMs = 15_000) {
  const until = Date.now() + timeoutMs
  for (;;) {
    const res = await call(base, 'GET', `${SESSIONS}?state=live`, { headers: SUPERVISOR })
    const found = res.json?.data?.find((r: any) => r.sessionId === sessionId)
    if (found && ok(found)) return found
    if (Date.now() > until) throw new Error(`never matched: ${JSON.stringify(found)}`)
    await sleep(50)
  }
}

const flag = (r: any, reason: string) => r.attention.find((f: any) => f.reason === reason)
const acknowledge = (base: string, sessionId: string, reason: string, key: string = KEYS.acme) =>
  call(base, 'PUT', `${ADMIN}/${sessionId}/attention/${reason}`, { key, headers: SUPERVISOR })

t.test('a request for a person, a guardrail and an awaited tool raise flags; a supervisor acknowledges one', async t => {
  const svc = await startTestService(t)
  const s = await createSession(svc.base)
  t.teardown(() => s.stream.close())
  await s.stream.next('crew.status.waiting')
  const say = (message: string) => call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message } })

  const quiet = await row(svc.base, s.sessionId, () => true)
  t.same(quiet.attention, [], 'a new session needs nobody')
  t.equal(quiet.phase, 'awaiting_user')

  t.equal((await say('I want to talk to a human, please')).status, 201)
  const asked = await row(svc.base, s.sessionId, r => !!flag(r, 'human_requested'))
  t.match(flag(asked, 'human_requested'), { since: Number, acknowledged: false })
  const humanity = await say('humanity is not a request')
  t.equal(humanity.status, 201)

  // Acknowledged: by whom and when; once only; not from another account; a reason that exists.
  const acked = await acknowledge(svc.base, s.sessionId, 'human_requested')
  t.equal(acked.status, 200, acked.text)
  t.match(acked.json, { reason: 'human_requested', acknowledged: true, acknowledgedBy: 'sup-ana', acknowledgedAt: Number })
  t.match(flag(await row(svc.base, s.sessionId, r => flag(r, 'human_requested')?.acknowledged), 'human_requested'), { acknowledgedBy: 'sup-ana' })
  t.match((await acknowledge(svc.base, s.sessionId, 'human_requested')).json, { code: 'ATTENTION_NOT_RAISED' }, 'twice: 409')
  t.equal((await acknowledge(svc.base, s.sessionId, 'human_requested', KEYS.globex)).status, 404, "another account's session is not found")
  t.match((await acknowledge(svc.base, s.sessionId, 'bored')).json, { code: 'INVALID_ATTENTION_REASON' })
  t.equal((await acknowledge(svc.base, s.sessionId, 'guardrail')).status, 409, 'a flag that is not raised')
  t.equal((await call(svc.base, 'PUT', `${ADMIN}/${s.sessionId}/attention/guardrail`)).json.code, 'USER_ID_REQUIRED')

  // Asked again after the acknowledgement: a new flag.
  await say('can I speak to an agent?')
  await row(svc.base, s.sessionId, r => flag(r, 'human_requested')?.acknowledged === false)

  await say('my card is 4111 1111 1111 1111')
  t.match(flag(await row(svc.base, s.sessionId, r => !!flag(r, 'guardrail')), 'guardrail'), { detail: 'card-number', acknowledged: false })

  // An external tool call waits for its result; the result clears the flag.
  await say('lookup C-42')
  const waiting = await row(svc.base, s.sessionId, r => !!flag(r, 'tool_result_awaited'))
  t.match(flag(waiting, 'tool_result_awaited'), { detail: 'crm_lookup' })
  t.equal(waiting.phase, 'awaiting_tool')
  const history = (await call(svc.base, 'GET', `${ADMIN}/${s.sessionId}/history?limit=200`, { headers: SUPERVISOR })).json.data
  const toolCall = history.find((e: any) => e.type === 'tool.call' && e.tool === 'crm_lookup')
  t.equal((await call(svc.base, 'PUT', `${ADMIN}/${s.sessionId}/external/${toolCall.correlationId}`, { headers: SUPERVISOR, body: { plan: 'gold' } })).status, 200)
  const resolved = await row(svc.base, s.sessionId, r => !flag(r, 'tool_result_awaited') && /crm_lookup/.test(r.lastMessage?.text))
  t.not(resolved.phase, 'awaiting_tool')
  t.match(resolved.lastMessage, { author: 'assistant', text: /crm_lookup/, at: Number })

  // Closed: no flags, nothing to acknowledge.
  t.equal((await call(svc.base, 'DELETE', `${CHANNEL}/${s.sessionId}`, { body: { reason: 'finished' } })).status, 201)
  const ended = await eventually(() => acknowledge(svc.base, s.sessionId, 'guardrail'), res => res.status === 409)
  t.equal(ended.status, 409, 'the closed session has no flag to acknowledge')
  const closed = (await call(svc.base, 'GET', `${SESSIONS}?state=closed`, { headers: SUPERVISOR })).json.data.find((r: any) => r.sessionId === s.sessionId)
  t.same(closed.attention, [], 'a closed session needs nobody')
  t.equal(closed.phase, 'closed')
})

t.test('an assistant that fails: assistant_error at once, no_reply after the crew setting, both on the lifecycle feed', async t => {
  const standIn = await startOpenAiStandIn({ apiKey: 'sk-test-123' })
  t.teardown(() => standIn.close())
  process.env.SB_TEST_OPENAI_KEY = 'sk-test-123'
  const crews = crewsFile({
    extra: [
      {
        id: 'gpt',
        name: 'GPT crew',
        maxConcurrentSessions: 10,
        agents: ['general'],
        modifiers: {},
        tools: [],
        attention: { noReplySeconds: 1, humanRequestPhrases: ['hablar con alguien'] },
        assistant: { provider: 'openai', baseUrl: standIn.url, model: 'gpt-test', apiKeyEnv: 'SB_TEST_OPENAI_KEY' },
      },
    ],
  })
  // The listing's message times come within ENGINE_RECORD_FLUSH_MS (5 s by
  // default): sooner here, so the second before no_reply is due can be seen.
  const svc = await startTestService(t, { env: { CREWS_FILE: crews, ENGINE_RECORD_FLUSH_MS: '100' } })
  const opened = await openSse(svc.base, 'GET', `${SESSIONS}/feed`, { headers: SUPERVISOR })
  const feed = opened.stream!
  t.teardown(() => feed.close())
  await feed.next('feed.ready')
  const s = await createSession(svc.base, { crewId: 'gpt' })
  t.teardown(() => s.stream.close())
  await s.stream.next('crew.status.waiting')

  const failing = await call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'fail' } })
  t.equal(failing.status, 201, failing.text)
  await s.stream.next('assistant.error')
  // The flag is written at once, the message times with the turn's counts: wait for both.
  const failed = await row(svc.base, s.sessionId, r => !!flag(r, 'assistant_error') && r.lastMessage !== null)
  const readBy = Date.now()
  t.equal(failed.phase, 'awaiting_assistant', 'the user still waits for a reply')
  t.equal(failed.awaitingReplySince, failed.lastMessage.at)
  // Not before the crew's 1 s: a row that shows no_reply was read after that second (a slow
  // machine may read it late; a fast one sees it absent).
  t.ok(!flag(failed, 'no_reply') || readBy >= failed.awaitingReplySince + 1000, 'not yet: the crew waits 1 s')
  const silent = await row(svc.base, s.sessionId, r => !!flag(r, 'no_reply'))
  t.ok(flag(silent, 'no_reply').since >= silent.awaitingReplySince + 1000)
  t.equal((await acknowledge(svc.base, s.sessionId, 'no_reply')).status, 200, 'a computed flag is acknowledged like the others')
  await row(svc.base, s.sessionId, r => flag(r, 'no_reply')?.acknowledged === true)

  // The feed carries the flags with the session.
  for (;;) {
    const event = await feed.next('session.changed')
    if (event.data.session.sessionId === s.sessionId && event.data.session.attention.some((f: any) => f.reason === 'assistant_error')) break
  }
  t.pass('the feed announced the assistant_error flag')

  // The crew's own phrases (not the defaults); a reply clears no_reply.
  await call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'quiero hablar con alguien' } })
  const replied = await row(svc.base, s.sessionId, r => !!flag(r, 'human_requested') && !flag(r, 'no_reply'))
  t.equal(replied.phase, 'awaiting_user')
  t.equal(replied.awaitingReplySince, null)
  await call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'I want a human' } })
  await s.stream.next('assistant.message')
  // Flags are written at once, the turn's counts behind it: once the counts show this turn, a
  // flag it raised would be there.
  const turned = await row(svc.base, s.sessionId, r => r.messages >= replied.messages + 2)
  t.equal(flag(turned, 'human_requested').since, flag(replied, 'human_requested').since, 'the default phrases do not apply to this crew')
})
