// The default provider: deterministic rules from the crew file, so `make run` works offline and
// tests can assert exact text. Replies stream word by word like a real model.
import { setTimeout as sleep } from 'node:timers/promises'
import type { ScriptedAssistant } from '../crews.js'
import type { AssistantProvider, ProviderChunk, ProviderRequest } from './types.js'
import { render } from './template.js'

function resultText(result: unknown): string {
  if (typeof result === 'string') return result
  if (result && typeof result === 'object' && typeof (result as any).text === 'string') return (result as any).text
  return JSON.stringify(result ?? null)
}

export class ScriptedProvider implements AssistantProvider {
  async *generate(request: ProviderRequest): AsyncIterable<ProviderChunk> {
    const config = request.crew.assistant as ScriptedAssistant
    const vars: Record<string, unknown> = {
      agentId: request.agentId,
      crewId: request.crew.id,
      crewName: request.crew.name,
      arguments: request.arguments,
    }
    const last = [...request.messages].reverse().find(m => m.source !== 'whisper')
    let reply: string
    if (last?.author === 'tool') {
      reply = render(config.afterTool ?? '{{result}}', { ...vars, tool: last.tool, result: resultText(safeParse(last.text)) })
    } else {
      const user = last?.author === 'user' ? last : undefined
      if (!user) {
        reply = render(config.greeting ?? 'Hello, how can I help you?', vars)
      } else {
        reply = ''
        const text = user.text.trim()
        let matched = false
        for (const rule of config.rules ?? []) {
          const found = new RegExp(rule.match, 'i').exec(text)
          if (!found) continue
          const groups: Record<string, string> = {}
          found.forEach((g, i) => (groups[`$${i}`] = g ?? ''))
          if (rule.tool && request.tools.some(t => t.id === rule.tool!.id)) {
            const args: Record<string, unknown> = {}
            for (const [k, v] of Object.entries(rule.tool.args)) args[k] = v.replace(/\$(\d)/g, (_m, i) => groups[`$${i}`] ?? '')
            yield { type: 'tool_call', tool: rule.tool.id, args }
            return
          }
          if (rule.reply === undefined) continue
          reply = render(rule.reply, { ...vars, text, ...groups })
          matched = true
          break
        }
        if (!matched) reply = render(config.fallback ?? 'You said: {{text}}', { ...vars, text })
      }
    }
    const words = reply.match(/\S+\s*/g) ?? [reply]
    for (const word of words) {
      if (request.signal.aborted) return
      if (config.chunkDelayMs) await sleep(config.chunkDelayMs, undefined, { signal: request.signal }).catch(() => {})
      if (request.signal.aborted) return
      yield { type: 'text', delta: word }
    }
  }
}

function safeParse(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}
