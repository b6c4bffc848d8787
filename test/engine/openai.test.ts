// The openai provider against the stand-in chat-completions server, end to end: a crew with
// provider openai, a real session, real SSE.
import t from 'tap'
import { call, startTestService } from '../support/harness.js'
import { invalid, startOpenAiStandIn } from '../support/openai-stand-in.js'
import { toChatMessages } from '../../engine/providers/openai.js'
import type { ConversationMessage } from '../../engine/types.js'
import { ADMIN, CHANNEL, createSession } from '../support/sse.js'
import { crewsFile } from './fixtures/crews.js'
import { parseCrews } from '../../engine/crews.js'

async function setup(t: any) {
  const standIn = await startOpenAiStandIn({ apiKey: 'sk-test-123' })
  t.teardown(() => standIn.close())
  const path = crewsFile({
    extra: [
      {
        id: 'gpt',
        name: 'GPT crew',
        maxConcurrentSessions: 10,
        agents: ['general', 'support'],
        modifiers: { style: 'Short answers.' },
        tools: [
          { id: 'echo', description: 'Echo', parameters: { type: 'object', required: ['text'], properties: { text: { type: 'string' } } }, handler: 'echo' },
          {
            id: 'crm_lookup',
            description: 'CRM lookup, answered through the Resolver',
            parameters: { type: 'object', required: ['customerId'], properties: { customerId: { type: 'string' } } },
            handler: 'external',
          },
        ],
        assistant: { provider: 'openai', baseUrl: standIn.url, model: 'gpt-test', apiKeyEnv: 'SB_TEST_OPENAI_KEY', systemPrompt: 'You are a test crew.' },
      },
    ],
  })
  process.env.SB_TEST_OPENAI_KEY = 'sk-test-123'
  const svc = await startTestService(t, { env: { CREWS_FILE: path } })
  const s = await createSession(svc.base, { crewId: 'gpt', body: { arguments: { name: 'Ana' } } })
  t.teardown(() => s.stream.close())
  const say = (message: string) => call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message } })
  return { standIn, ...svc, ...s, say }
}

t.test('streamed text becomes assistant.response chunks and one assistant.message', async t => {
  const { standIn, stream, say } = await setup(t)
  await stream.next('crew.status.waiting')
  t.equal((await say('hello model')).status, 201)
  const message = await stream.next('assistant.message')
  t.equal(message.data.text, 'Echoing: hello model')
  const chunks = stream.events.filter(e => e.event === 'assistant.response')
  t.ok(chunks.length >= 3)
  t.equal(chunks.map(c => c.data.delta).join(''), 'Echoing: hello model')
  const request = standIn.requests[0]
  t.equal(request.model, 'gpt-test')
  t.equal(request.stream, true)
  t.match(request.messages[0], { role: 'system', content: /You are a test crew\.[\s\S]*agent "general"[\s\S]*Short answers\.[\s\S]*"name":"Ana"/ })
  t.match(request.messages.at(-1), { role: 'user', content: 'hello model' })
  t.same(request.tools.map((tool: any) => [tool.type, tool.function.name]), [['function', 'echo'], ['function', 'crm_lookup']])
  t.match(request.tools[0], { function: { parameters: { type: 'object' } } })
})

t.test('tool calls: arguments assembled from fragments, the result goes back as a tool message', async t => {
  const { standIn, stream, say, base, sessionId } = await setup(t)
  await say('echo from the model')
  const message = await stream.next('assistant.message')
  t.equal(message.data.text, 'Tool result: {"text":"from the model"}')
  t.equal(standIn.requests.length, 2)
  const second = standIn.requests[1]
  const assistant = second.messages.find((m: any) => m.role === 'assistant')
  t.match(assistant, { tool_calls: [{ type: 'function', function: { name: 'echo', arguments: '{"text":"from the model"}' } }] })
  t.match(second.messages.at(-1), { role: 'tool', tool_call_id: assistant.tool_calls[0].id, content: '{"text":"from the model"}' })
  const history = (await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: { UserId: 'sup' } })).json.data
  t.match(history.find((e: any) => e.type === 'tool.call'), { tool: 'echo', args: { text: 'from the model' }, origin: 'turn' })

  // A whisper and an injected tool result reach the model as system messages.
  await call(base, 'PUT', `${ADMIN}/${sessionId}/whisper`, { body: { text: 'be brief' }, headers: { UserId: 'sup' } })
  await call(base, 'PUT', `${ADMIN}/${sessionId}/toolinject`, { body: { tool: 'echo', args: { text: 'injected' } }, headers: { UserId: 'sup' } })
  await say('next')
  await stream.next(e => e.event === 'assistant.message' && e.data.text === 'Echoing: next')
  const third = standIn.requests.at(-1)
  t.ok(third.messages.some((m: any) => m.role === 'system' && m.content === 'be brief'))
  t.ok(third.messages.some((m: any) => m.role === 'system' && /Result of tool echo: \{"text":"injected"\}/.test(m.content)))
})

const supervisor = { headers: { UserId: 'sup' } }

async function externalCall(base: string, sessionId: string) {
  for (let i = 0; i < 200; i++) {
    const history = (await call(base, 'GET', `${ADMIN}/${sessionId}/history`, supervisor)).json.data
    const pending = history.find((e: any) => e.type === 'tool.call' && e.tool === 'crm_lookup')
    if (pending) return pending
    await new Promise(r => setTimeout(r, 10))
  }
  throw new Error('the model never called crm_lookup')
}

t.test('a message written while an external tool runs: the model still gets the result right after its call', async t => {
  const { standIn, stream, say, base, sessionId } = await setup(t)
  await say('lookup C-42')
  const pending = await externalCall(base, sessionId)
  t.equal((await say('are you still there?')).status, 201)
  const resolved = await call(base, 'PUT', `${ADMIN}/${sessionId}/external/${pending.correlationId}`, { ...supervisor, body: { plan: 'gold' } })
  t.equal(resolved.status, 200)
  const next = await stream.next(e => e.event === 'assistant.message' || e.event === 'assistant.error')
  t.equal(next.event, 'assistant.message', 'the model accepted the conversation')
  const roles = standIn.requests[1].messages.map((m: any) => m.role)
  t.same(roles.slice(-4), ['user', 'assistant', 'tool', 'user'], 'the tool result directly follows its call; the later message follows it')
  t.equal(standIn.requests[1].messages.at(-1).content, 'are you still there?')
  t.equal(standIn.requests[1].messages.at(-2).content, '{"plan":"gold"}')
})

t.test('the result of an injected external tool reaches the model as a note, not as an unasked tool message', async t => {
  const { standIn, stream, say, base, sessionId } = await setup(t)
  await stream.next('crew.status.waiting')
  const injected = await call(base, 'PUT', `${ADMIN}/${sessionId}/toolinject`, { ...supervisor, body: { tool: 'crm_lookup', args: { customerId: 'C-7' } } })
  t.match(injected.json, { status: 'pending', correlationId: String })
  t.equal((await call(base, 'PUT', `${ADMIN}/${sessionId}/external/${injected.json.correlationId}`, { ...supervisor, body: { plan: 'basic' } })).status, 200)
  await say('next')
  const next = await stream.next(e => e.event === 'assistant.message' || e.event === 'assistant.error')
  t.match(next, { event: 'assistant.message', data: { text: 'Echoing: next' } })
  const request = standIn.requests.at(-1)
  t.notOk(request.messages.some((m: any) => m.role === 'tool'))
  t.ok(request.messages.some((m: any) => m.role === 'system' && m.content === 'Result of tool crm_lookup: {"plan":"basic"}'))
})

t.test('a provider failure is an assistant.error event; the session goes on', async t => {
  const { stream, say } = await setup(t)
  await say('fail')
  const error = await stream.next('assistant.error')
  t.match(error.data, { code: 'ASSISTANT_UNAVAILABLE', message: String })
  t.notMatch(JSON.stringify(error.data), /500|server had an error/, 'provider details are not leaked to the end user')
  await stream.next('crew.status.waiting')
  await say('still there?')
  t.equal((await stream.next('assistant.message')).data.text, 'Echoing: still there?')
})

t.test('a wrong API key fails the reply, not the session', async t => {
  const { stream, say } = await setup(t)
  process.env.SB_TEST_OPENAI_KEY = 'sk-wrong'
  t.teardown(() => void (process.env.SB_TEST_OPENAI_KEY = 'sk-test-123'))
  await say('hello')
  t.equal((await stream.next('assistant.error')).event, 'assistant.error')
})

t.test('crew file validation', async t => {
  t.throws(() => parseCrews({ crews: [] }), /invalid/)
  const base = { id: 'x', name: 'X', maxConcurrentSessions: 1, agents: ['a'], tools: [], assistant: { provider: 'openai', model: 'm' } }
  t.throws(() => parseCrews({ crews: [base] }), /baseUrl is required/)
  t.throws(() => parseCrews({ crews: [{ ...base, assistant: { provider: 'scripted', rules: [{ match: '(' }] } }] }), /invalid pattern/)
  t.throws(() => parseCrews({ crews: [{ ...base, assistant: { provider: 'scripted', rules: [{ match: 'x', tool: { id: 'nope', args: {} } }] } }] }), /unknown tool/)
  t.throws(() => parseCrews({ crews: [base, base].map(c => ({ ...c, assistant: { provider: 'scripted' } })) }), /defined twice/)
  t.throws(() => parseCrews({ crews: [{ ...base, tools: [{ id: 't', description: 'd', parameters: {}, handler: 'shell' }], assistant: { provider: 'scripted' } }] }), /handler/)
  const ok = parseCrews({ crews: [{ ...base, assistant: { provider: 'scripted' } }] })
  t.equal(ok.get('x')!.name, 'X')
})

t.test('two tool calls in one reply, answered apart, with a user message between: what the API accepts', async t => {
  const crew = parseCrews({
    crews: [{ id: 'g', name: 'G', maxConcurrentSessions: 1, agents: ['a'], tools: [], assistant: { provider: 'openai', baseUrl: 'http://127.0.0.1:1/v1', model: 'm' } }],
  }).get('g')!
  const at = 0
  const messages: ConversationMessage[] = [
    { id: 'm1', author: 'user', text: 'look both up', source: 'user', at },
    {
      id: 'm2',
      author: 'assistant',
      text: '',
      source: 'generated',
      at,
      toolCalls: [
        { callId: 'c1', tool: 'crm_lookup', args: { customerId: '1' } },
        { callId: 'c2', tool: 'crm_lookup', args: { customerId: '2' } },
      ],
    },
    { id: 'm3', author: 'tool', text: '{"plan":"gold"}', source: 'tool', at, callId: 'c1', tool: 'crm_lookup' },
    { id: 'm4', author: 'user', text: 'still there?', source: 'user', at },
    { id: 'm5', author: 'tool', text: '{"plan":"basic"}', source: 'tool', at, callId: 'c2', tool: 'crm_lookup' },
  ]
  const request = { crew, agentId: 'a', turnId: 1, arguments: {}, messages, tools: [], signal: new AbortController().signal }
  const chat = toChatMessages(request, crew.assistant as any)
  t.same(
    chat.slice(1).map((m: any) => [m.role, m.tool_call_id ?? m.tool_calls?.map((c: any) => c.id).join('+') ?? m.content]),
    [['user', 'look both up'], ['assistant', 'c1+c2'], ['tool', 'c1'], ['tool', 'c2'], ['user', 'still there?']],
    'both results right after the call, the later user message after them',
  )
  t.equal(invalid({ model: 'm', messages: chat }), null, 'the stand-in, which checks what the API checks, accepts it')

  // While the second call is still out, only the answered one is sent back.
  const pending = toChatMessages({ ...request, messages: messages.slice(0, 4) }, crew.assistant as any)
  t.same(pending.slice(1).map((m: any) => m.role), ['user', 'assistant', 'tool', 'user'])
  t.same((pending[2] as any).tool_calls.map((c: any) => c.id), ['c1'])
  t.equal(invalid({ model: 'm', messages: pending }), null)
})
