// The snapshot a supervisor or a SIP handoff backend reads of a live session
// (GET .../snapshot): where the session stands, how it is configured, and the recent window of
// its conversation the assistant works with (the whole conversation is GET .../history).
import type { Conversation } from '../session/conversation.js'
import type { Crew } from '../crews.js'
import { stateName, type SessionSnapshot } from '../session/machine.js'

export interface SnapshotSource {
  sessionId: string
  crew: Crew
  snapshot: SessionSnapshot
  conversation: Conversation
  /** Seq of the last history entry. */
  logPosition: number
  createdAt: number
  updatedAt: number
}

export function snapshotView({ sessionId, crew, snapshot, conversation, logPosition, createdAt, updatedAt }: SnapshotSource) {
  const c = snapshot.context
  const state = stateName(snapshot)
  return {
    data: {
      snapshot: {
        sessionId,
        crewId: crew.id,
        state: state.split('.')[0],
        phase: state.includes('.') ? state.split('.')[1] : null,
        agentId: c.agentId,
        transferred: c.transfers > 0,
        transfers: c.transfers,
        configuration: {
          crewId: crew.id,
          crewName: crew.name,
          agentId: c.agentId,
          agents: c.terms.agents,
          assistant: { provider: crew.assistant.provider },
          modifiers: crew.modifiers,
          tools: crew.tools.map(t => ({ id: t.id, description: t.description, external: t.handler === 'external' })),
          context: { ...conversation.arguments, ResumenConversacion: conversation.summary(c.agentId) },
        },
        memory: {
          // The recent window the assistant works with; the whole conversation is GET /history.
          messages: conversation.window.map(m => ({ ...m, at: new Date(m.at).toISOString() })),
          messagesTotal: conversation.total,
          pendingTools: c.pendingTools.map(p => ({ ...p, deadline: p.deadline === undefined ? undefined : new Date(p.deadline).toISOString() })),
          replyOwed: c.replyOwed,
        },
        logPosition,
        createdAt: new Date(createdAt).toISOString(),
        updatedAt: new Date(updatedAt).toISOString(),
      },
    },
  }
}
