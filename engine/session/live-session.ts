// A session live on this node, as the host keeps it (engine/host/live-sessions.ts), and what the
// host asks of its actor's snapshot: whether it is between turns, mid-reply, or busy.
import type { Actor } from 'xstate'
import type { Conversation } from './conversation.js'
import type { Crew } from '../crews.js'
import type { Generation } from './generation.js'
import { activeState, type sessionMachine, type SessionSnapshot } from './machine.js'
import type { SessionWriter } from '../persistence/session-writer.js'
import type { TransportListener } from '../transport.js'
import type { PublishedEvent } from '../types.js'

export interface LiveSession {
  id: string
  accountId: string
  crew: Crew
  /**
   * The session's actor; null while hibernated: a session quiet for ENGINE_HIBERNATE_AFTER_MS
   * (idle or paused, nothing pending, everything written) lets its actor go and is woken from
   * its checkpoint by its next command (or its idle deadline). Its streams stay open.
   */
  actor: Actor<typeof sessionMachine> | null
  /** Its conversation, folded from its history (null while hibernated, with the actor). */
  conversation: Conversation | null
  /** Seq of its last history entry. */
  seq: number
  /** When its last history entry was written, and when it opened. */
  updatedAt: number
  createdAt: number
  /** The reply being generated (null between generations). */
  generation: Generation | null
  /** Set while the actor is being woken. */
  waking: Promise<void> | null
  /** Commands in progress (a pinned session is not hibernated). */
  pins: number
  /** A turn is in flight (generating or running tools): counted in turnsInFlight. */
  busy: boolean
  /** When it last became quiet (0: busy); the hibernation queue checks it. */
  quietSince: number
  unbind: (() => void) | null
  listeners: Set<TransportListener>
  /** Seq of the last event published (the SSE id of the session's streams). */
  eventSeq: number
  /** No id past it is published before the document says so (0: not kept, the event log is durable). */
  eventBound: number
  /** Consumer ids known to the session, least recently used first (bounded: ENGINE_MAX_CONSUMER_IDS_PER_SESSION). */
  consumers: Set<string>
  /** Its history, checkpoint and report record on their way to the store. */
  writer: SessionWriter
  idleTimer: { deadline: number; timer: NodeJS.Timeout } | null
  /** The context's idle deadline as last seen (kept while hibernated). */
  idleDeadline: number
  toolTimers: Map<string, NodeJS.Timeout>
  finished: boolean
  /** Why it closed, once finished (its tombstone says the same once written). */
  closedAs: string | null
  /** The machine's `session.closed` event, held back until the close is written (engine/host/closing.ts). */
  closingNotice: PublishedEvent | null
  /** Set once destroyed: resolves when its resources are released. */
  cleanup: Promise<void> | null
}

/** Most recently used last (a Set keeps insertion order). */
export function touchConsumer(live: LiveSession, consumerId: string) {
  live.consumers.delete(consumerId)
  live.consumers.add(consumerId)
}

/** Between turns with nothing pending (idle or paused): what hibernation needs. */
export const isQuiet = (snapshot: SessionSnapshot) =>
  snapshot.status === 'active' && (activeState(snapshot) === 'idle' || snapshot.value === 'paused') && snapshot.context.pendingTools.length === 0

export const isGenerating = (snapshot: SessionSnapshot) => activeState(snapshot) === 'generating'
export const isBusy = (snapshot: SessionSnapshot) => {
  const state = activeState(snapshot)
  return snapshot.status === 'active' && (state === 'generating' || state === 'tooling')
}

/** Resolves once the session is between turns (idle, paused or ended), or after `timeoutMs`. */
export function settled(actor: Actor<typeof sessionMachine>, timeoutMs: number): Promise<void> {
  if (!isBusy(actor.getSnapshot())) return Promise.resolve()
  return new Promise(resolve => {
    const done = () => {
      clearTimeout(timer)
      subscription.unsubscribe()
      resolve()
    }
    const timer = setTimeout(done, timeoutMs)
    const subscription = actor.subscribe({ next: snapshot => void (isBusy(snapshot) || done()), error: done, complete: done })
  })
}
