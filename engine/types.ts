// Plain-data shapes shared by the session machine, the host, the transport and the routes.
// Everything here is JSON-serialisable: it crosses the session transport (in process or over
// NATS) and is persisted in the session's journal and checkpoints.

export type Author = 'system' | 'assistant' | 'user' | 'agent'
export const AUTHORS: readonly Author[] = ['system', 'assistant', 'user', 'agent']

/** Where a message of the conversation came from. */
export type MessageSource =
  | 'user' // sent by the end user through the channel
  | 'generated' // produced by the assistant provider
  | 'outbound' // static first message of an outbound session
  | 'impersonated' // written by a supervisor, shown as from the assistant
  | 'whisper' // hidden system note from a supervisor
  | 'context' // appended / overridden / previousWhisperedMessages
  | 'tool' // a tool result

export interface ToolCall {
  callId: string
  tool: string
  args: Record<string, unknown>
}

/** One message of the conversation context (what the assistant sees on its next turn). */
export interface ConversationMessage {
  id: string
  author: Author | 'tool'
  text: string
  source: MessageSource
  at: number
  /** Agent in charge when the message was produced (assistant messages). */
  agentId?: string
  /** Assistant message that asked for tools. */
  toolCalls?: ToolCall[]
  /** Tool result message: the call it answers. */
  callId?: string
  tool?: string
  /** Supervisor who wrote it (whisper, impersonate, context changes). */
  userId?: string
}

export interface PendingTool extends ToolCall {
  external: boolean
  /** External tools: the id the Resolver answers to. */
  correlationId?: string
  /** Absolute deadline (ms since epoch) after which the call fails with a timeout. */
  deadline?: number
  /** Part of an assistant turn (the reply continues when it completes) or injected by a supervisor. */
  origin: 'turn' | 'inject'
  userId?: string
}

export interface Modifiers {
  prefix?: string
  suffix?: string
  replacements?: { from: string; to: string }[]
  /** A style line given to generative providers in their system prompt. */
  style?: string
}

/** An entry of the session's ordered event log (its history). */
export interface HistoryEntry {
  seq: number
  at: number
  type: string
  userId?: string
  [field: string]: unknown
}

/** An event for the session's consumer streams. */
export interface PublishedEvent {
  name: string
  data: Record<string, unknown>
}

export interface OutboundSpec {
  type: 'static' | 'dynamic'
  parameters: {
    text?: string
    applyModifiers?: boolean
    previousWhisperedMessages?: { text: string; author: string }[]
  }
}
