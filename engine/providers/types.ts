// One interface for every assistant provider. A provider turns the conversation into a stream of
// text deltas and/or tool calls; the engine decides what happens with them (tools, modifiers,
// events). Providers never see sessions, streams or the store.
import type { Crew, ToolDefinition } from '../crews.js'
import type { ConversationMessage } from '../types.js'

export interface ProviderRequest {
  crew: Crew
  agentId: string
  turnId: number
  arguments: Record<string, unknown>
  messages: readonly ConversationMessage[]
  /** Tools the assistant may call on this round (empty once the turn used its tool rounds). */
  tools: ToolDefinition[]
  /** Aborted when the turn is cut (pause, destroy); made on first read, for providers whose I/O takes one. */
  readonly signal: AbortSignal
  /** Whether the turn was cut: what a provider without I/O checks between chunks. */
  readonly cancelled?: boolean
}

export type ProviderChunk =
  | { type: 'text'; delta: string }
  | { type: 'tool_call'; tool: string; args: Record<string, unknown>; id?: string }

export interface AssistantProvider {
  generate(request: ProviderRequest): AsyncIterable<ProviderChunk>
}

export class ProviderError extends Error {
  override name = 'ProviderError'
}
