// The crews' tools as the actor host runs them: builtin handlers run here, in process; external
// ones are left to the customer's system, which answers with `external.resolve` before their
// deadline (the host arms that deadline as a timer). Which calls run is the machine's decision
// (engine/session/machine.ts); this module says what a call is and what it answers.
import { randomUUID } from 'node:crypto'
import { Invalid } from '../../platform/errors.js'
import type { Clock } from '../../platform/clock.js'
import type { Crew, CrewCatalog, ToolDefinition } from '../crews.js'
import type { SessionEvent } from './machine.js'
import type { SessionCommand } from '../transport.js'
import type { PendingTool } from '../types.js'

/** A tool call an assistant asked for in its reply. */
export interface RequestedCall {
  tool: string
  args: Record<string, unknown>
  id?: string
}

export class ToolRunner {
  constructor(
    private readonly crews: CrewCatalog,
    private readonly clock: Clock,
    /** Default deadline of external tools without their own timeoutMs. */
    private readonly externalTimeoutMs: number | undefined,
  ) {}

  /**
   * An operator's call (admin.toolinject), validated (400 otherwise): the machine event that
   * records it and the answer to the operator. A builtin has run already; an external one waits.
   */
  inject(crew: Crew, command: Extract<SessionCommand, { type: 'admin.toolinject' }>, at: number): { event: SessionEvent; reply: unknown } {
    const tool = this.tool(crew, command.tool)
    const args = command.args ?? {}
    const issues = this.crews.validateArgs(crew.id, tool.id, args)
    if (issues.length) throw new Invalid('VALIDATION_FAILED', `Arguments do not match the parameters of tool ${tool.id}`, { details: issues })
    const base = { callId: `call_${randomUUID()}`, tool: tool.id, args: args as Record<string, unknown>, origin: 'inject' as const, userId: command.userId }
    if (tool.handler === 'external') {
      const call: PendingTool = { ...base, external: true, correlationId: randomUUID(), deadline: at + this.externalTimeout(tool) }
      return {
        event: { type: 'admin.toolinject', userId: command.userId, call, at },
        reply: { tool: tool.id, callId: call.callId, status: 'pending', correlationId: call.correlationId, deadline: new Date(call.deadline!).toISOString() },
      }
    }
    const result = runBuiltin(tool, base.args, at)
    return {
      event: { type: 'admin.toolinject', userId: command.userId, call: { ...base, external: false }, result, ok: true, at },
      reply: { tool: tool.id, callId: base.callId, status: 'completed', result },
    }
  }

  /** The calls of a reply as the machine takes them: valid external ones get a correlation id and a deadline. */
  pending(crew: Crew, calls: RequestedCall[], at: number): PendingTool[] {
    return calls.map(call => {
      const tool = crew.tools.find(t => t.id === call.tool)
      const valid = tool ? this.crews.validateArgs(crew.id, tool.id, call.args).length === 0 : false
      const external = !!tool && tool.handler === 'external' && valid
      return {
        callId: call.id ?? `call_${randomUUID()}`,
        tool: call.tool,
        args: call.args,
        external,
        origin: 'turn',
        ...(external ? { correlationId: randomUUID(), deadline: at + this.externalTimeout(tool!) } : {}),
      }
    })
  }

  /**
   * The machine's `runTools` effect: runs the round's in-process calls in order, each result sent
   * back (after the transition that asked for them). The answer stops what has not run yet.
   */
  run(crewId: string, calls: PendingTool[], sendBack: (event: SessionEvent) => void): () => void {
    let stopped = false
    const crew = this.crews.get(crewId)
    queueMicrotask(() => {
      for (const call of calls) {
        if (stopped) return
        const at = this.clock.now()
        const tool = crew?.tools.find(t => t.id === call.tool)
        if (!crew || !tool) {
          sendBack({ type: 'tool.result', callId: call.callId, ok: false, result: { error: 'unknown_tool', message: `No tool ${call.tool}` }, at })
          continue
        }
        const issues = this.crews.validateArgs(crew.id, tool.id, call.args)
        if (issues.length) {
          sendBack({ type: 'tool.result', callId: call.callId, ok: false, result: { error: 'invalid_arguments', details: issues }, at })
          continue
        }
        try {
          sendBack({ type: 'tool.result', callId: call.callId, ok: true, result: runBuiltin(tool, call.args, at), at })
        } catch (error) {
          sendBack({ type: 'tool.result', callId: call.callId, ok: false, result: { error: 'tool_failed', message: (error as Error).message }, at })
        }
      }
    })
    return () => {
      stopped = true
    }
  }

  private tool(crew: Crew, toolId: string): ToolDefinition {
    const tool = crew.tools.find(t => t.id === toolId)
    if (!tool) {
      throw new Invalid('UNKNOWN_TOOL', `Tool ${toolId} is not a tool of crew ${crew.id}`, { tools: crew.tools.map(t => t.id) })
    }
    return tool
  }

  private externalTimeout(tool: ToolDefinition) {
    return tool.timeoutMs ?? this.externalTimeoutMs ?? 120_000
  }
}

function runBuiltin(tool: ToolDefinition, args: Record<string, unknown>, at: number): unknown {
  switch (tool.handler) {
    case 'echo':
      return { text: args.text }
    case 'clock':
      return { now: new Date(at).toISOString() }
    default:
      throw new Error(`tool ${tool.id} runs outside the engine`)
  }
}
