// Any OpenAI-compatible chat-completions endpoint, streamed (`stream: true`), with function
// tools. The conversation maps onto chat messages; tool calls arrive as argument fragments
// keyed by index and are assembled here. Modifiers are not the provider's business (the
// engine applies them); only the crew's style line goes into the system prompt.
import type { OpenAiAssistant } from '../crews.js'
import type { ConversationMessage } from '../types.js'
import { type AssistantProvider, type ProviderChunk, ProviderError, type ProviderRequest } from './types.js'

type ChatMessage =
  | { role: 'system' | 'user'; content: string }
  | { role: 'assistant'; content: string | null; tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[] }
  | { role: 'tool'; content: string; tool_call_id: string }

export function toChatMessages(request: ProviderRequest, config: OpenAiAssistant): ChatMessage[] {
  const system = [
    config.systemPrompt ?? `You are ${request.crew.name}, a contact-center assistant.`,
    `You act as agent "${request.agentId}".`,
    request.crew.modifiers.style ? `Style: ${request.crew.modifiers.style}` : '',
    Object.keys(request.arguments).length ? `Session context: ${JSON.stringify(request.arguments)}` : '',
  ]
    .filter(Boolean)
    .join('\n')
  const out: ChatMessage[] = [{ role: 'system', content: system }]
  const messages = resultsAfterTheirCalls(request.messages)
  const answered = new Set(messages.filter(m => m.author === 'tool').map(m => m.callId))
  const asked = new Set(messages.flatMap(m => (m.author === 'assistant' || m.author === 'agent' ? (m.toolCalls ?? []).map(c => c.callId) : [])))
  for (const m of messages) out.push(...mapMessage(m, answered, asked))
  return out
}

/**
 * The API wants an assistant message's tool_calls directly followed by their tool messages, but
 * the conversation keeps the order things happened in: a user may write while an external tool
 * runs. Each answered call's result is moved up to just after the message that asked for it.
 */
function resultsAfterTheirCalls(messages: readonly ConversationMessage[]): readonly ConversationMessage[] {
  const results = new Map<string, ConversationMessage>()
  for (const m of messages) if (m.author === 'tool' && m.callId && answeredByAssistant(m)) results.set(m.callId, m)
  if (results.size === 0) return messages
  const moved = new Set<ConversationMessage>()
  const out: ConversationMessage[] = []
  for (const m of messages) {
    if (moved.has(m)) continue
    out.push(m)
    for (const call of m.toolCalls ?? []) {
      const result = results.get(call.callId)
      if (result && !moved.has(result)) {
        out.push(result)
        moved.add(result)
      }
    }
  }
  return out
}

function mapMessage(m: ConversationMessage, answered: Set<string | undefined>, asked: Set<string>): ChatMessage[] {
  switch (m.author) {
    case 'user':
      return [{ role: 'user', content: m.text }]
    case 'system':
      return [{ role: 'system', content: m.text }]
    case 'agent':
    case 'assistant': {
      // Only calls that got an answer are sent back: the API rejects dangling tool_calls.
      const calls = (m.toolCalls ?? []).filter(c => answered.has(c.callId))
      if (calls.length === 0) return m.text ? [{ role: 'assistant', content: m.text }] : []
      return [
        {
          role: 'assistant',
          content: m.text || null,
          tool_calls: calls.map(c => ({ id: c.callId, type: 'function' as const, function: { name: c.tool, arguments: JSON.stringify(c.args) } })),
        },
      ]
    }
    case 'tool':
      // A result with no call of the assistant before it (injected by a supervisor, or its call
      // has left the context window) goes in as a system note: a lone tool message is refused.
      return m.callId && m.source === 'tool' && answeredByAssistant(m) && asked.has(m.callId)
        ? [{ role: 'tool', content: m.text, tool_call_id: m.callId }]
        : [{ role: 'system', content: `Result of tool ${m.tool}: ${m.text}` }]
  }
}

const answeredByAssistant = (m: ConversationMessage) => !m.userId

export class OpenAiProvider implements AssistantProvider {
  constructor(private readonly env: Record<string, string | undefined> = process.env) {}

  async *generate(request: ProviderRequest): AsyncIterable<ProviderChunk> {
    const config = request.crew.assistant as OpenAiAssistant
    const body = {
      model: config.model,
      stream: true,
      messages: toChatMessages(request, config),
      ...(config.temperature !== undefined ? { temperature: config.temperature } : {}),
      ...(request.tools.length
        ? {
            tools: request.tools.map(t => ({ type: 'function', function: { name: t.id, description: t.description, parameters: t.parameters } })),
            tool_choice: 'auto',
          }
        : {}),
    }
    const key = config.apiKeyEnv ? this.env[config.apiKeyEnv] : undefined
    const timeout = AbortSignal.timeout(config.timeoutMs ?? 60_000)
    const signal = AbortSignal.any([request.signal, timeout])
    let response: Response
    try {
      response = await fetch(`${config.baseUrl.replace(/\/$/, '')}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...(key ? { authorization: `Bearer ${key}` } : {}) },
        body: JSON.stringify(body),
        signal,
      })
    } catch (error) {
      if (request.signal.aborted) return
      throw new ProviderError(`chat completions request failed: ${(error as Error).message}`)
    }
    if (!response.ok || !response.body) {
      const detail = await response.text().catch(() => '')
      throw new ProviderError(`chat completions answered ${response.status}: ${detail.slice(0, 300)}`)
    }
    const calls = new Map<number, { id?: string; name: string; args: string }>()
    try {
      for await (const data of sseData(response.body)) {
        if (data === '[DONE]') break
        let parsed: any
        try {
          parsed = JSON.parse(data)
        } catch {
          throw new ProviderError('chat completions stream sent malformed JSON')
        }
        if (parsed.error) throw new ProviderError(`chat completions stream error: ${parsed.error.message ?? 'unknown'}`)
        const delta = parsed.choices?.[0]?.delta
        if (!delta) continue
        if (typeof delta.content === 'string' && delta.content.length) yield { type: 'text', delta: delta.content }
        for (const fragment of delta.tool_calls ?? []) {
          const index = fragment.index ?? 0
          const call = calls.get(index) ?? { name: '', args: '' }
          if (fragment.id) call.id = fragment.id
          if (fragment.function?.name) call.name += fragment.function.name
          if (fragment.function?.arguments) call.args += fragment.function.arguments
          calls.set(index, call)
        }
      }
    } catch (error) {
      if (request.signal.aborted) return
      if (error instanceof ProviderError) throw error
      throw new ProviderError(`chat completions stream failed: ${(error as Error).message}`)
    }
    for (const [, call] of [...calls.entries()].sort((a, b) => a[0] - b[0])) {
      let args: Record<string, unknown>
      try {
        args = call.args ? JSON.parse(call.args) : {}
      } catch {
        args = { _unparsable: call.args }
      }
      yield { type: 'tool_call', tool: call.name, args, ...(call.id ? { id: call.id } : {}) }
    }
  }
}

/** The `data:` payloads of an SSE body (multi-line data joined with \n). */
async function* sseData(body: ReadableStream<Uint8Array>): AsyncIterable<string> {
  const decoder = new TextDecoder()
  let buffer = ''
  let data: string[] = []
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true })
    let newline: number
    while ((newline = buffer.search(/\r?\n/)) >= 0) {
      const line = buffer.slice(0, newline)
      buffer = buffer.slice(newline + (buffer[newline] === '\r' ? 2 : 1))
      if (line === '') {
        if (data.length) yield data.join('\n')
        data = []
      } else if (line.startsWith('data:')) {
        data.push(line.slice(5).replace(/^ /, ''))
      }
    }
  }
  if (data.length) yield data.join('\n')
}
