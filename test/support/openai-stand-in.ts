// A stand-in for an OpenAI-compatible chat-completions server, faithful to the parts of the
// protocol the engine uses: POST /v1/chat/completions with bearer auth, request validation
// (roles, tool_calls followed by their tool messages, function tools), streamed
// chat.completion.chunk events over SSE ending in `data: [DONE]`, tool-call arguments split
// across chunks by index, finish_reason, and OpenAI-style error bodies. Its "model" is
// deterministic: a tool result is summarised, "echo ..." calls the echo tool when offered,
// "lookup ..." calls crm_lookup when offered, "fail" breaks, anything else is echoed back.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface StandIn {
  url: string
  requests: any[]
  close(): Promise<void>
}

const ROLES = new Set(['system', 'user', 'assistant', 'tool', 'developer'])

function error(res: ServerResponse, status: number, message: string, type = 'invalid_request_error', code: string | null = null) {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify({ error: { message, type, param: null, code } }))
}

/** The validation the real API applies to the fields we send; returns a message or null. */
export function invalid(body: any): string | null {
  if (typeof body?.model !== 'string' || !body.model) return "you must provide a model parameter"
  if (!Array.isArray(body.messages) || body.messages.length === 0) return "'messages' must be a non-empty array"
  const open = new Set<string>()
  for (const [i, m] of body.messages.entries()) {
    if (!ROLES.has(m?.role)) return `Invalid value for 'messages[${i}].role'`
    if (open.size && m.role !== 'tool') {
      return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'."
    }
    if (m.role === 'tool') {
      if (typeof m.tool_call_id !== 'string' || !open.has(m.tool_call_id)) {
        return "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
      }
      open.delete(m.tool_call_id)
    }
    if (m.role === 'assistant' && Array.isArray(m.tool_calls)) {
      for (const call of m.tool_calls) {
        if (call.type !== 'function' || typeof call.id !== 'string' || typeof call.function?.name !== 'string' || typeof call.function?.arguments !== 'string') {
          return `Invalid tool call in messages[${i}]`
        }
        open.add(call.id)
      }
    } else if (m.role !== 'tool' && typeof m.content !== 'string') {
      return `Invalid type for 'messages[${i}].content': expected a string`
    }
  }
  if (open.size) return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'."
  if (body.tools !== undefined) {
    if (!Array.isArray(body.tools)) return "Invalid type for 'tools'"
    for (const tool of body.tools) {
      if (tool?.type !== 'function' || typeof tool.function?.name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(tool.function.name)) return 'Invalid tool definition'
      if (tool.function.parameters !== undefined && typeof tool.function.parameters !== 'object') return 'Invalid tool parameters'
    }
  }
  return null
}

async function readJson(req: IncomingMessage): Promise<any> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

export async function startOpenAiStandIn(options: { apiKey?: string } = {}): Promise<StandIn> {
  const requests: any[] = []
  let n = 0
  const server: Server = createServer(async (req, res) => {
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') return error(res, 404, `Unknown request URL: ${req.method} ${req.url}`, 'invalid_request_error', 'unknown_url')
    if (options.apiKey && req.headers.authorization !== `Bearer ${options.apiKey}`) {
      return error(res, 401, 'Incorrect API key provided.', 'invalid_request_error', 'invalid_api_key')
    }
    let body: any
    try {
      body = await readJson(req)
    } catch {
      return error(res, 400, 'We could not parse the JSON body of your request.')
    }
    requests.push(body)
    const problem = invalid(body)
    if (problem) return error(res, 400, problem)

    const id = `chatcmpl-${++n}`
    const created = Math.floor(Date.now() / 1000)
    const last = body.messages.at(-1)
    const lastUser = [...body.messages].reverse().find((m: any) => m.role === 'user')
    const offered = new Set((body.tools ?? []).map((t: any) => t.function.name))
    let text: string | null = null
    let call: { name: string; arguments: string } | null = null
    if (last.role === 'tool') text = `Tool result: ${last.content}`
    else if (lastUser && /^echo /i.test(lastUser.content) && offered.has('echo')) call = { name: 'echo', arguments: JSON.stringify({ text: lastUser.content.slice(5) }) }
    else if (lastUser && /^lookup /i.test(lastUser.content) && offered.has('crm_lookup')) call = { name: 'crm_lookup', arguments: JSON.stringify({ customerId: lastUser.content.slice(7) }) }
    else if (lastUser?.content === 'fail') return error(res, 500, 'The server had an error while processing your request.', 'server_error')
    else text = `Echoing: ${lastUser?.content ?? '(nothing)'}`

    const chunk = (delta: unknown, finish: string | null) =>
      ({ id, object: 'chat.completion.chunk', created, model: body.model, system_fingerprint: 'fp_standin', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })
    if (!body.stream) {
      res.writeHead(200, { 'content-type': 'application/json' })
      const message = call
        ? { role: 'assistant', content: null, tool_calls: [{ id: `call_${n}`, type: 'function', function: call }] }
        : { role: 'assistant', content: text }
      return res.end(JSON.stringify({ id, object: 'chat.completion', created, model: body.model, choices: [{ index: 0, message, finish_reason: call ? 'tool_calls' : 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }))
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' })
    const send = (data: unknown) => res.write(`data: ${JSON.stringify(data)}\n\n`)
    send(chunk({ role: 'assistant', content: call ? null : '' }, null))
    if (call) {
      const args = call.arguments
      const third = Math.ceil(args.length / 3)
      send(chunk({ tool_calls: [{ index: 0, id: `call_${n}`, type: 'function', function: { name: call.name, arguments: '' } }] }, null))
      for (let i = 0; i < args.length; i += third) send(chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(i, i + third) } }] }, null))
      send(chunk({}, 'tool_calls'))
    } else {
      for (const piece of text!.match(/.{1,6}/gs) ?? []) {
        send(chunk({ content: piece }, null))
        await new Promise(r => setImmediate(r))
      }
      send(chunk({}, 'stop'))
    }
    res.write('data: [DONE]\n\n')
    res.end()
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise(resolve => {
      server.closeAllConnections()
      server.close(() => resolve())
    }),
  }
}
