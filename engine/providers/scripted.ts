// The default provider: deterministic rules from the crew file, so `make run` works offline and
// tests can assert exact text. Replies stream word by word like a real model (chunkDelayMs
// apart; at once without it). A crew's rules are compiled once.
import { setTimeout as sleep } from 'node:timers/promises'
import type { ScriptedAssistant } from '../crews.js'
import type { AssistantProvider, ProviderChunk, ProviderRequest } from './types.js'
import { render } from './template.js'

function resultText(result: unknown): string {
  if (typeof result === 'string') return result
  if (result && typeof result === 'object' && typeof (result as any).text === 'string') return (result as any).text
  return JSON.stringify(result ?? null)
}

type Rule = NonNullable<ScriptedAssistant['rules']>[number]
interface CompiledRule {
  rule: Rule
  match: RegExp
}

const WORDS = /\S+\s*/g

export class ScriptedProvider implements AssistantProvider {
  private readonly compiled = new WeakMap<ScriptedAssistant, CompiledRule[]>()

  private rulesOf(config: ScriptedAssistant): CompiledRule[] {
    let rules = this.compiled.get(config)
    if (!rules) this.compiled.set(config, (rules = (config.rules ?? []).map(rule => ({ rule, match: new RegExp(rule.match, 'i') }))))
    return rules
  }

  async *generate(request: ProviderRequest): AsyncIterable<ProviderChunk> {
    const config = request.crew.assistant as ScriptedAssistant
    const vars: Record<string, unknown> = {
      agentId: request.agentId,
      crewId: request.crew.id,
      crewName: request.crew.name,
      arguments: request.arguments,
    }
    let last: ProviderRequest['messages'][number] | undefined
    for (let i = request.messages.length - 1; i >= 0 && !last; i--) if (request.messages[i]!.source !== 'whisper') last = request.messages[i]
    let reply: string
    if (last?.author === 'tool') {
      reply = render(config.afterTool ?? '{{result}}', { ...vars, tool: last.tool, result: resultText(safeParse(last.text)) })
    } else if (last?.author !== 'user') {
      reply = render(config.greeting ?? 'Hello, how can I help you?', vars)
    } else {
      const text = last.text.trim()
      let matched: string | undefined
      for (const { rule, match } of this.rulesOf(config)) {
        const found = match.exec(text)
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
        matched = render(rule.reply, { ...vars, text, ...groups })
        break
      }
      reply = matched ?? render(config.fallback ?? 'You said: {{text}}', { ...vars, text })
    }
    // Without a delay the words would all come in one write window anyway: one chunk.
    if (!config.chunkDelayMs) {
      yield { type: 'text', delta: reply }
      return
    }
    const cancelled = () => request.cancelled ?? request.signal.aborted
    for (const word of reply.match(WORDS) ?? [reply]) {
      if (cancelled()) return
      await sleep(config.chunkDelayMs, undefined, { signal: request.signal }).catch(() => {})
      if (cancelled()) return
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
