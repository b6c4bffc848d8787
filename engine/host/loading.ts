// How a session persisted by any node becomes live here, and how a live session's actor goes
// and comes back. Restored: a command for a session this node does not hold, a survivor taking
// over a dead node's session, the orphan reaper (timers re-armed from its deadlines).
// Hibernated: a quiet session lets its actor and conversation go (engine/host/hibernation.ts);
// woken from its checkpoint by its next command or its idle deadline.
import { sessionNotFound } from '../../platform/errors.js'
import type { Metrics } from '../../platform/metrics.js'
import { settledWithin, valueWithin } from '../../platform/timing.js'
import type { SessionRecorder } from '../../reports/index.js'
import type { CrewCatalog } from '../crews.js'
import { rebuild } from '../persistence/session-restore.js'
import type { SessionRepository } from '../persistence/session-store.js'
import type { LiveSession } from '../session/live-session.js'
import { activeState, type SessionEvent } from '../session/machine.js'
import { log } from '../session/session-effects.js'
import type { EventLog } from '../streams/event-log.js'
import type { SessionTarget } from '../transport.js'
import { CLOSE_NOTICE_WAIT_MS } from './closing.js'
import type { EventPublisher } from './event-publisher.js'
import type { SessionLeases } from './host-options.js'
import type { LiveSessions, Origin } from './live-sessions.js'
import type { SessionActors } from './session-actors.js'
import type { SessionDriver } from './session-driver.js'

export interface SessionLoaderDeps {
  sessions: Pick<LiveSessions, 'get' | 'loading' | 'register'>
  actors: Pick<SessionActors, 'awake' | 'bind' | 'restored'>
  driver: Pick<SessionDriver, 'afterEvent'>
  publisher: Pick<EventPublisher, 'epochOf'>
  store: Pick<SessionRepository, 'takeFence' | 'load' | 'entriesAfter' | 'checkpointWanted'>
  events: Pick<EventLog, 'durable' | 'takeOver' | 'settle'>
  recorder: Pick<SessionRecorder, 'countedUpTo'>
  crews: CrewCatalog
  leases: SessionLeases | undefined
  metrics: Metrics
  /**
   * How long a restore waits for its report record's position (undefined: as long as it takes).
   * Engine nodes: the record is in MongoDB, which a restore does not wait for; not known in time,
   * the record is taken as covering the checkpoint.
   */
  recordReadMs?: number
  /** ENGINE_MAX_CONSUMER_IDS_PER_SESSION: the consumer ids a restored session keeps. */
  maxConsumerIds: number
  now(): number
  /** The host is stopping: nothing is restored any more. */
  stopping(): boolean
  /** Lets go of a session without touching the store (it is gone from the store, or owned elsewhere). */
  drop(live: LiveSession, why: string): void
}



export class SessionLoader {
  constructor(private readonly deps: SessionLoaderDeps) {}

  /** The live session (restored here if needed, woken unless `wake` is false); 404 unless it lives for the account. */
  async obtain(target: SessionTarget, wake = true): Promise<LiveSession> {
    let live = this.deps.sessions.get(target.sessionId) ?? null
    if (!live) live = await this.restore(target.sessionId)
    // Closing: answered once its close is written (CLOSE_NOTICE_WAIT_MS at most), so whoever is
    // told 404 finds its tombstone and close reason in the store, from any node.
    if (live?.finished && live.cleanup) await settledWithin(live.cleanup, CLOSE_NOTICE_WAIT_MS)
    if (!live || live.finished || live.accountId !== target.accountId) throw sessionNotFound(target.sessionId)
    if (wake && !live.actor) await this.wake(live)
    if (live.finished) throw sessionNotFound(target.sessionId)
    return live
  }

  /** Rebuilds a session persisted by this or another node (timers re-armed from its deadlines). */
  restore(sessionId: string): Promise<LiveSession | null> {
    const existing = this.deps.sessions.get(sessionId)
    if (existing) return Promise.resolve(existing)
    const { loading } = this.deps.sessions
    let pending = loading.get(sessionId)
    if (!pending) {
      pending = this.load(sessionId).finally(() => loading.delete(sessionId))
      loading.set(sessionId, pending)
    }
    return pending
  }

  private async load(sessionId: string): Promise<LiveSession | null> {
    const { store, events, leases } = this.deps
    if (this.deps.stopping()) return null
    if (leases) {
      // Fencing: a node holding an older token can no longer write its checkpoint.
      const token = leases.token(sessionId)
      if (token === undefined) return null
      if (!(await store.takeFence(sessionId, token))) return null
    }
    // Asked at once, read once the session is: its answer may take longest (MongoDB in a cluster).
    const counting = this.deps.recorder.countedUpTo(sessionId)
    counting.catch(() => {})
    const persisted = await store.load(sessionId)
    if (!persisted) return null
    const crew = this.deps.crews.get(persisted.crewId)
    if (!crew) return null
    // Events go on after the last one published, by whichever node published it: as the log
    // says, or, when it does not know the session (in one process, after a crash), past the bound.
    const fromLog = await events.takeOver(sessionId, this.deps.publisher.epochOf(sessionId))
    const eventSeq = Math.max(persisted.eventSeq, fromLog || persisted.eventSeqBound)
    // The report record counts the entries up to its own seq: those after it are counted again
    // from the journal (after a crash, counts not yet written with a checkpoint).
    const covered = persisted.checkpoint.logPosition
    // No live record: nothing to count into. A record of an older version counted with its snapshot.
    const { recordReadMs } = this.deps
    const stored = await (recordReadMs === undefined ? counting : valueWithin(counting, recordReadMs))
    const counted = stored === null ? Number.MAX_SAFE_INTEGER : (stored ?? covered)
    const entries = await store.entriesAfter(sessionId, Math.min(covered, counted))
    const rebuilt = rebuild(persisted, entries)
    const origin: Origin = { conversation: rebuilt.conversation, seq: rebuilt.seq, checkpointed: covered, counted: Math.min(counted, rebuilt.seq), createdAt: persisted.checkpoint.createdAt, updatedAt: rebuilt.updatedAt }
    const live = this.deps.sessions.register(sessionId, persisted.accountId, crew, persisted.consumers.slice(-this.deps.maxConsumerIds), origin)
    for (const entry of entries) live.writer.records.recount(entry)
    live.writer.records.flushCounts(rebuilt.seq)
    live.eventSeq = eventSeq
    // Its first event moves the bound ahead again.
    if (!events.durable) live.eventBound = eventSeq
    this.deps.actors.bind(live, this.deps.actors.restored(rebuilt.control))
    log(live, 'session.restored', this.deps.now(), { logPosition: rebuilt.seq })
    // Restored from where an earlier version kept it: the journal gets a checkpoint to restore from next time.
    if (store.checkpointWanted?.(sessionId)) live.writer.checkpoint()
    this.deps.driver.afterEvent(live)
    // A restored idle session that owes a reply starts it (as a system attend) — unless the
    // command that caused the restore (it runs first) is a user message, whose reply covers it.
    // Owed: acknowledged messages the control state did not cover, a reply cut by the node's
    // end, or the opening of an outbound session that speaks first.
    if (rebuilt.control.context.replyOwed) setImmediate(() => this.answerOwedReply(live))
    return live
  }

  private answerOwedReply(live: LiveSession) {
    const attend: SessionEvent = { type: 'admin.attend', userId: 'system:restore', at: this.deps.now() }
    if (!live.actor) return
    const now = live.actor.getSnapshot()
    // Past its idle deadline it expires instead (a reaped orphan is not answered).
    if (live.finished || activeState(now) !== 'idle' || !now.context.replyOwed || !now.can(attend) || now.context.idleDeadline <= attend.at) return
    live.actor.send(attend)
    this.deps.driver.afterEvent(live)
  }

  /** Lets a quiet session's actor and conversation go; the session stays live here. */
  hibernate(live: LiveSession) {
    const actor = this.deps.actors.awake(live)
    live.unbind?.()
    live.unbind = null
    live.actor = null
    live.conversation = null
    live.quietSince = 0
    actor.stop()
    this.deps.events.settle?.(live.id)
    this.deps.metrics.sessionsHibernated.inc()
  }

  /** Brings a hibernated session's actor and conversation back from the store. */
  wake(live: LiveSession): Promise<void> {
    live.waking ??= (async () => {
      const { store } = this.deps
      const persisted = await store.load(live.id)
      if (live.actor || live.finished) return
      if (!persisted) {
        // Gone from the store meanwhile (destroyed by another node): nothing to wake.
        this.deps.drop(live, 'not in the store any more')
        return
      }
      const entries = await store.entriesAfter(live.id, persisted.checkpoint.logPosition)
      if (live.actor || live.finished) return
      const rebuilt = rebuild(persisted, entries)
      live.conversation = rebuilt.conversation
      this.deps.actors.bind(live, this.deps.actors.restored(rebuilt.control))
      this.deps.metrics.sessionsHibernated.dec()
    })().finally(() => (live.waking = null))
    return live.waking
  }
}
