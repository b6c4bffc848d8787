// A session rebuilt from the store (restore on any node, wake from hibernation): its checkpoint,
// then the journal's entries after it folded in. The conversation takes every entry the
// checkpoint does not cover; the control state is the journal's (written with the last batch of
// entries) when it is at least as recent as the checkpoint. A user message the control state does
// not know of (its batch's control record was not written) leaves a reply owed: it was
// acknowledged, so it is answered.
import { Conversation } from '../session/conversation.js'
import type { PersistedControl } from '../session/machine.js'
import type { PersistedSession } from './session-store.js'
import type { HistoryEntry } from '../types.js'

export interface RebuiltSession {
  conversation: Conversation
  control: PersistedControl
  /** Seq of the last history entry. */
  seq: number
  /** When the last entry was written. */
  updatedAt: number
}

/** `entries`: the journal's entries after the checkpoint's position (or earlier ones: they are skipped). */
export function rebuild(persisted: PersistedSession, entries: HistoryEntry[]): RebuiltSession {
  const { checkpoint } = persisted
  const covered = checkpoint.logPosition
  const journal = persisted.control && persisted.control.seq >= covered ? persisted.control : null
  const controlSeq = journal?.seq ?? covered
  let control = journal?.control ?? checkpoint.control
  const conversation = new Conversation(checkpoint.conversation)
  let seq = covered
  let updatedAt = checkpoint.updatedAt ?? checkpoint.createdAt
  let unanswered = false
  for (const entry of entries) {
    if (entry.seq <= covered) continue
    conversation.apply(entry)
    seq = entry.seq
    updatedAt = entry.at
    if (entry.seq > controlSeq && entry.type === 'message.user') unanswered = true
  }
  if (unanswered && !control.context.replyOwed) control = { value: control.value, context: { ...control.context, replyOwed: true } }
  return { conversation, control, seq, updatedAt }
}
