// A turn's generation: asks the crew's assistant provider for the reply, publishes its text to
// the session's streams as it comes, and tells the machine once how it ended (its text and tool
// calls, or the failure). The host starts one when the machine enters `generating`
// (engine/session/session-effects.ts) and cancels it when the machine leaves that state early.
//
// Streamed text is published per write window, not per provider chunk: deltas that arrive
// before the loop gets round to writing (the same macrotask) go out as one `assistant.response`
// event. A provider that streams word by word over time gives an event per word; one that
// produces a reply at once gives one event. Either way the events' deltas, in `index` order,
// add up to the reply's `assistant.message` text.
import type { Logger } from '../../platform/logger.js'
import type { Crew } from '../crews.js'
import type { SessionEvent } from './machine.js'
import type { AssistantProvider } from '../providers/types.js'
import type { RequestedCall, ToolRunner } from './tools.js'
import type { ConversationMessage, PendingTool } from '../types.js'

export interface GenerationDeps {
  providers: Record<string, AssistantProvider>
  tools: ToolRunner
  now: () => number
  logger: Logger
}

/** What one generation is asked to write. */
export interface GenerationInput {
  sessionId: string
  crew: Crew
  agentId: string
  turnId: number
  /** The id of the reply this generation writes: its chunks and its message carry it. */
  messageId: string
  arguments: Record<string, unknown>
  messages: readonly ConversationMessage[]
  /** False once the turn used its tool rounds: the reply must be text. */
  toolsAllowed: boolean
}

/** Where a generation's output goes. */
export interface GenerationSink {
  /** A piece of the reply, to the session's streams (`index` counts the pieces from 0). */
  chunk(index: number, delta: string): void
  /** How it ended, as the machine's event (gen.completed or gen.failed). */
  ended(event: Extract<SessionEvent, { type: 'gen.completed' | 'gen.failed' }>): void
}

/** One generation in flight. Cancelling it drops what it has not published and everything after. */
export class Generation {
  cancelled = false
  /** A piece of the reply was published (a pause then cuts a reply a user has seen begin). */
  wrote = false
  /** The reply's text published so far (where a barge-in cut it). */
  published = ''
  private controller: AbortController | null = null
  private buffered = ''
  /** Pieces published so far: the next one's `index`. */
  index = 0
  private flushing: NodeJS.Immediate | null = null

  constructor(
    readonly input: GenerationInput,
    private readonly sink: GenerationSink,
  ) {}

  /** An AbortSignal for providers whose I/O takes one, made on first use (a scripted reply needs none). */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController()
      if (this.cancelled) this.controller.abort()
    }
    return this.controller.signal
  }

  cancel() {
    if (this.cancelled) return
    this.cancelled = true
    this.buffered = ''
    if (this.flushing) clearImmediate(this.flushing)
    this.controller?.abort()
  }

  /** @internal a delta from the provider: written with whatever else comes in this write window. */
  take(delta: string) {
    this.buffered += delta
    this.flushing ??= setImmediate(() => this.flush())
  }

  /** @internal publishes what is buffered. */
  flush() {
    if (this.flushing) clearImmediate(this.flushing)
    this.flushing = null
    if (this.cancelled || this.buffered === '') return
    const delta = this.buffered
    this.buffered = ''
    this.wrote = true
    this.published += delta
    this.sink.chunk(this.index++, delta)
  }

  /** @internal */
  end(event: Parameters<GenerationSink['ended']>[0]) {
    if (this.cancelled) return
    this.flush()
    this.cancelled = true // nothing more from it
    this.sink.ended(event)
  }
}

/** Starts a generation; its outcome reaches `sink` (never after it is cancelled). */
export function startGeneration(deps: GenerationDeps, input: GenerationInput, sink: GenerationSink): Generation {
  const generation = new Generation(input, sink)
  void run(deps, generation).catch(error => {
    if (generation.cancelled) return
    deps.logger.warn('assistant generation failed', { sessionId: input.sessionId, error })
    generation.end({ type: 'gen.failed', error: (error as Error).message, at: deps.now() })
  })
  return generation
}

async function run(deps: GenerationDeps, generation: Generation) {
  const { crew, ...input } = generation.input
  const provider = deps.providers[crew.assistant.provider]
  if (!provider) throw new Error(`no provider ${crew.assistant.provider}`)
  let text = ''
  const calls: RequestedCall[] = []
  const stream = provider.generate({
    crew,
    agentId: input.agentId,
    turnId: input.turnId,
    arguments: input.arguments,
    messages: input.messages,
    tools: input.toolsAllowed ? crew.tools : [],
    get signal() {
      return generation.signal
    },
    get cancelled() {
      return generation.cancelled
    },
  })
  for await (const chunk of stream) {
    if (generation.cancelled) return
    if (chunk.type === 'text') {
      text += chunk.delta
      generation.take(chunk.delta)
    } else {
      calls.push(chunk)
    }
  }
  if (generation.cancelled) return
  const at = deps.now()
  const toolCalls: PendingTool[] = deps.tools.pending(crew, calls, at)
  generation.end({ type: 'gen.completed', text, toolCalls, at })
}
