// The snapshot a supervisor or a SIP handoff backend reads of a live session
// (GET .../snapshot): where the session stands, how it is configured, and the recent window of
// its conversation the assistant works with (the whole conversation is GET .../history).
import type { Crew } from './crews.js'
import { digestFor, stateName, type SessionSnapshot } from './machine.js'

export function snapshotView(snapshot: SessionSnapshot, crew: Crew) {
  const c = snapshot.context
  const state = stateName(snapshot)
  return {
    data: {
      snapshot: {
        sessionId: c.sessionId,
        crewId: c.crewId,
        state: state.split('.')[0],
        phase: state.includes('.') ? state.split('.')[1] : null,
        agentId: c.agentId,
        transferred: c.transfers > 0,
        transfers: c.transfers,
        configuration: {
          crewId: c.crewId,
          crewName: crew.name,
          agentId: c.agentId,
          agents: c.agents,
          assistant: { provider: crew.assistant.provider },
          modifiers: c.modifiers,
          tools: crew.tools.map(t => ({ id: t.id, description: t.description, external: t.handler === 'external' })),
          context: { ...c.arguments, ResumenConversacion: c.summary },
        },
        memory: {
          // The recent window the assistant works with; the whole conversation is GET /history.
          messages: c.messages.map(m => ({ ...m, at: new Date(m.at).toISOString() })),
          messagesTotal: digestFor(c.digest, c.messages).total,
          pendingTools: c.pendingTools.map(p => ({ ...p, deadline: p.deadline === undefined ? undefined : new Date(p.deadline).toISOString() })),
          replyOwed: c.replyOwed,
        },
        logPosition: c.seq,
        createdAt: new Date(c.createdAt).toISOString(),
        updatedAt: new Date(c.updatedAt).toISOString(),
      },
    },
  }
}
