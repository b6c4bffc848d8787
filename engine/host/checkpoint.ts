// A live session's checkpoint as its document keeps it (engine/persistence/session-store.ts):
// control state and conversation as of a history seq, with the deadlines the orphan reaper
// scans and the event seq a restore numbers on from.
import type { Checkpoint, CheckpointWrite } from '../persistence/session-store.js'
import type { LiveSession } from '../session/live-session.js'
import { persistedControl } from '../session/machine.js'

/** What the session's document keeps of it at a checkpoint; undefined while hibernated. */
export function checkpointOf(live: LiveSession): CheckpointWrite | undefined {
  if (!live.actor || !live.conversation) return undefined
  const snapshot = live.actor.getSnapshot()
  const control = persistedControl(snapshot)
  const context = control.context
  const checkpoint: Checkpoint = { control, conversation: live.conversation.state(), logPosition: live.seq, createdAt: live.createdAt, updatedAt: live.updatedAt }
  return {
    state: snapshot.value === 'paused' ? 'paused' : 'active',
    agentId: context.agentId,
    checkpoint: JSON.stringify(checkpoint),
    logPosition: live.seq,
    eventSeq: live.eventSeq,
    deadlines: { idle: context.idleDeadline, tools: context.pendingTools.flatMap(p => (p.deadline === undefined ? [] : [p.deadline])) },
    updatedAt: live.updatedAt,
  }
}

/** A checkpoint as the document keeps it (JSON text); null when it cannot be encoded. */
export function encodeCheckpoint(checkpoint: Checkpoint): string | null {
  try {
    return JSON.stringify(checkpoint)
  } catch {
    return null
  }
}
