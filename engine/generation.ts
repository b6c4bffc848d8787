// The `generate` actor of a session (engine/machine.ts): asks the crew's assistant provider for
// the reply, sends its chunks straight to the session's streams and tells the machine once that
// the reply is being written, then once how it ended (its text and tool calls, or the failure).
import type { Logger } from '../platform/logger.js'
import type { CrewCatalog } from './crews.js'
import type { GenerationInput, SessionEvent } from './machine.js'
import type { AssistantProvider } from './providers/types.js'
import type { RequestedCall, ToolRunner } from './tools.js'

export interface GenerationDeps {
  crews: CrewCatalog
  providers: Record<string, AssistantProvider>
  tools: ToolRunner
  now: () => number
  logger: Logger
  /** One chunk of the reply, to the session's streams (in order with what the machine publishes). */
  publishChunk: (input: GenerationInput, index: number, delta: string) => void
}

/** Runs one generation; the answer stops it (the actor was stopped: a cut reply, a destroy). */
export function runGeneration(deps: GenerationDeps, input: GenerationInput, sendBack: (event: SessionEvent) => void): () => void {
  const controller = new AbortController()
  let finished = false
  const crew = deps.crews.get(input.crewId)
  const run = async () => {
    if (!crew) throw new Error(`crew ${input.crewId} is no longer configured`)
    const provider = deps.providers[crew.assistant.provider]
    if (!provider) throw new Error(`no provider ${crew.assistant.provider}`)
    let text = ''
    let chunks = 0
    const calls: RequestedCall[] = []
    const stream = provider.generate({
      crew,
      agentId: input.agentId,
      turnId: input.turnId,
      arguments: input.arguments,
      messages: input.messages,
      tools: input.toolsAllowed ? crew.tools : [],
      signal: controller.signal,
    })
    for await (const chunk of stream) {
      if (controller.signal.aborted) return
      if (chunk.type === 'text') {
        text += chunk.delta
        // The machine learns once that the reply is being written; the chunks go straight to
        // the streams (see engine/machine.ts), in order with what the machine publishes.
        if (chunks === 0) sendBack({ type: 'gen.writing', at: deps.now() })
        deps.publishChunk(input, chunks++, chunk.delta)
      } else {
        calls.push(chunk)
      }
    }
    if (controller.signal.aborted) return
    const at = deps.now()
    const toolCalls = deps.tools.pending(crew, calls, at)
    finished = true
    sendBack({ type: 'gen.completed', text, toolCalls, at })
  }
  run().catch(error => {
    finished = true
    if (controller.signal.aborted) return
    deps.logger.warn('assistant generation failed', { sessionId: input.sessionId, error })
    sendBack({ type: 'gen.failed', error: (error as Error).message, at: deps.now() })
  })
  return () => {
    if (!finished) controller.abort()
  }
}
