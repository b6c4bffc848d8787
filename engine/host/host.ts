// The actor host: owns the live session actors of this process. It turns transport commands
// into machine events (refusing what the machine would ignore), provides the machine's effects
// (engine/session/session-effects.ts: history, published events, the turn's generation and tools),
// fans published events out to listeners, rebuilds sessions persisted by any node
// (engine/persistence/session-restore.ts), and keeps deadlines armed (engine/host/deadlines.ts). What a session
// leaves in the store goes through its SessionWriter (engine/persistence/session-writer.ts) to the
// SessionStore (engine/persistence/session-store.ts).
import { OverloadGuard } from '../../platform/overload.js'
import { Invalid, InvalidState, NotFound, sessionNotFound, ShuttingDown, Unavailable } from '../../platform/errors.js'
import { OffLoopStore } from '../../platform/store/index.js'
import { settledWithin } from '../../platform/timing.js'
import type { Crew } from '../crews.js'
import { CrewSlots } from '../persistence/crew-slots.js'
import {
  activeState,
  initialContext,
  replyId,
  stateName,
  toolsAllowed,
  type SessionContext,
  type SessionEvent,
  type SessionSnapshot,
  type SessionTerms,
} from '../session/machine.js'
import { ToolRunner } from '../session/tools.js'
import { type GenerationDeps, startGeneration } from '../session/generation.js'
import { snapshotView } from '../supervision/snapshot-view.js'
import { Hibernation } from './hibernation.js'
import { Conversation } from '../session/conversation.js'
import { MemoryEventLog, type EventLog } from '../streams/event-log.js'
import type { CreateSessionRequest, FeedSubscription, SessionCommand, SessionTarget, Subscription, TransportListener } from '../transport.js'
import { SessionStore } from '../persistence/session-store.js'
import { WriteBehind } from '../persistence/session-writer.js'
import { type LiveSession, touchConsumer } from '../session/live-session.js'
import { log, openingOf } from '../session/session-effects.js'
import { rebuild } from '../persistence/session-restore.js'
import { Deadlines } from './deadlines.js'
import { customerOf } from '../supervision/session-directory.js'
import { encodeCheckpoint } from './checkpoint.js'
import { EVENT_ID_RESERVE, EventPublisher } from './event-publisher.js'
import { Expiry } from './expiry.js'
import type { HostOptions } from './host-options.js'
import { LiveSessions, type Origin } from './live-sessions.js'
import { SessionActors } from './session-actors.js'
import { CLOSE_NOTICE_WAIT_MS, SessionClosing } from './closing.js'
import { Leaving } from './leaving.js'
import { SessionDriver } from './session-driver.js'

export class SessionHost {
  private readonly sessions: LiveSessions
  private readonly actors: SessionActors
  private readonly publisher: EventPublisher
  private readonly driver: SessionDriver
  private readonly expiry: Expiry
  private readonly closing: SessionClosing
  private readonly leaving: Leaving
  private readonly store: SessionStore
  private readonly slots: CrewSlots
  private readonly tools: ToolRunner
  private readonly generations: GenerationDeps
  private readonly deadlines: Deadlines<LiveSession>
  private stopped = false
  readonly events: EventLog
  /** Every live session's journal and checkpoint writes, batched off the turn's path. */
  readonly writeBehind: WriteBehind
  /** Quiet sessions let their actor go (engine/host/hibernation.ts). */
  private readonly hibernation: Hibernation
  private readonly overload: OverloadGuard
  private readonly terms: Omit<SessionTerms, 'agents'>

  constructor(private readonly options: HostOptions) {
    const store = options.store ?? options.platform.store
    const { config, logger, metrics } = options.platform
    this.overload = options.platform.overload ?? OverloadGuard.off()
    this.overload.hostsTurns()
    this.terms = { idleTimeoutMs: options.idleTimeoutMs, maxToolRounds: options.maxToolRounds ?? 4 }
    const { channel, engine } = config
    this.events =
      options.events ??
      new MemoryEventLog({ events: channel.replayBufferEvents, bytes: channel.replayBufferBytes, maxAgeMs: channel.eventRetentionMs })
    this.store = new SessionStore(store)
    this.writeBehind = new WriteBehind({
      store: this.store,
      logger,
      metrics,
      now: () => this.now,
      fenced: !!options.leases,
      stopping: () => this.stopped,
      maxAttempts: engine.persistMaxFailures,
      checkpoints: { entries: engine.checkpointEntries, countsMs: engine.recordFlushMs },
      windowMs: engine.writeWindowMs,
      ...options.writeBehind,
    })
    this.slots = new CrewSlots(store)
    this.tools = new ToolRunner(options.crews, options.platform.clock, options.externalToolTimeoutMs)
    this.hibernation = new Hibernation({
      afterMs: options.hibernateAfterMs ?? engine.hibernateAfterMs,
      now: () => this.now,
      hibernate: live => this.hibernate(live),
    })
    this.deadlines = new Deadlines<LiveSession>(options.platform.clock, { idle: live => this.expiry.idle(live), tool: (live, id) => this.expiry.tool(live, id) })
    this.generations = { providers: options.providers, tools: this.tools, now: () => this.now, logger }
    this.sessions = new LiveSessions({
      writeBehind: this.writeBehind,
      recorder: options.recorder,
      logger,
      metrics,
      fenceOf: sessionId => this.fenceOf(sessionId),
      lost: (live, why) => this.leaving.drop(live, why),
    })
    this.publisher = new EventPublisher({ events: this.events, store: this.store, leases: options.leases, logger, drop: (live, why) => this.leaving.drop(live, why) })
    this.actors = new SessionActors({
      effects: {
        publish: (live, name, data) => this.publisher.publish(live, name, data),
        generate: (live, context) => this.generate(live, context),
        // Cancelled, and kept until the next turn's: a pause's entry says whether it cut a reply a user saw begin.
        stopGeneration: live => live.generation?.cancel(),
        runTools: (live, calls) => {
          if (calls.length) this.tools.run(live.crew.id, calls, event => this.driver.deliver(live, event))
        },
        now: () => this.now,
      },
      logger,
      failed: live => this.closing.finish(live),
    })
    this.leaving = new Leaving({ sessions: this.sessions, deadlines: this.deadlines, store: this.store, leases: options.leases, logger, metrics })
    this.closing = new SessionClosing({
      sessions: this.sessions,
      actors: this.actors,
      deadlines: this.deadlines,
      publisher: this.publisher,
      events: this.events,
      store: this.store,
      slots: this.slots,
      leases: options.leases,
      logger,
      now: () => this.now,
    })
    this.driver = new SessionDriver({ sessions: this.sessions, actors: this.actors, deadlines: this.deadlines, hibernation: this.hibernation, finish: live => this.closing.finish(live) })
    this.expiry = new Expiry({ driver: this.driver, actors: this.actors, deadlines: this.deadlines, wake: live => this.wake(live), logger, now: () => this.now })
  }

  private get now() {
    return this.options.platform.clock.now()
  }

  async init() {
    await this.store.ensureIndexes()
    await this.options.recorder.ensureIndexes()
    this.hibernation.start()
    this.writeBehind.start()
  }

  liveCount() {
    return this.sessions.size
  }

  // ---------------------------------------------------------------- create

  async create(request: CreateSessionRequest, listener: TransportListener): Promise<Subscription> {
    const crew = this.options.crews.get(request.crewId)
    if (!crew || (crew.accounts && !crew.accounts.includes(request.accountId))) {
      throw new Invalid('CREW_NOT_FOUND', `Crew ${request.crewId} does not exist or is not available to this account`)
    }
    await this.slots.acquire(request.accountId, crew)
    try {
      return await this.start(request, crew, listener)
    } catch (error) {
      await this.slots.release(request.accountId, crew.id)
      throw error
    }
  }

  private async start(request: CreateSessionRequest, crew: Crew, listener: TransportListener): Promise<Subscription> {
    const id = request.sessionId
    // A request for this id that came before the session existed is still reading the store (it
    // finds nothing). From here until the session is live, a request for it waits for it (restore
    // finds this promise) instead of restoring a second copy from the half-written store: that
    // copy answered an empty history, and its idle timer, never pushed by the real session's
    // activity, ended the session while the user was talking. A dialer attempt's id is its
    // session's id and is visible as soon as the attempt is recorded: it can be asked for early.
    await this.sessions.loading.get(id)?.catch(() => null)
    const opening = this.open(request, crew, listener)
    const waiting = opening.catch(() => null) // a creation that failed: the waiting request finds nothing
    this.sessions.loading.set(id, waiting)
    try {
      const live = await opening
      return { unsubscribe: () => live.listeners.delete(listener) }
    } finally {
      if (this.sessions.loading.get(id) === waiting) this.sessions.loading.delete(id)
    }
  }

  /** Writes the new session and makes it live here, with its opening entries and events. */
  private async open(request: CreateSessionRequest, crew: Crew, listener: TransportListener): Promise<LiveSession> {
    const at = this.now
    const terms: SessionTerms = { agents: crew.agents, ...this.terms }
    const opening = openingOf({ crew, terms, consumerId: request.consumerId, arguments: request.arguments, outbound: request.outbound, at })
    const conversation = Conversation.empty(request.arguments)
    for (const entry of opening.entries) conversation.apply(entry)
    const context = initialContext(terms, crew.agents[0]!, at, opening.replyOwed)
    const seq = opening.entries.length
    // The document holds the opening as a checkpoint between turns, so the session can be
    // restored from its insert on (an outbound session owing its first reply answers it then).
    const checkpoint = encodeCheckpoint({ control: { value: { active: 'idle' }, context }, conversation: conversation.state(), logPosition: seq, createdAt: at, updatedAt: at })
    // The events of the opening: `Initialized`, the opening's own, and the one the first state
    // announces as the actor starts (crew.status.waiting or .writing).
    const eventSeq = 2 + opening.publish.length
    const eventSeqBound = this.events.durable ? undefined : eventSeq + EVENT_ID_RESERVE
    await this.store.insert(
      {
        sessionId: request.sessionId,
        accountId: request.accountId,
        crewId: crew.id,
        agentId: context.agentId,
        consumerId: request.consumerId,
        at,
        checkpoint,
        logPosition: seq,
        idleDeadline: context.idleDeadline,
        eventSeq,
        eventSeqBound,
      },
      this.fenceOf(request.sessionId),
    )
    // A checkpoint that could not be encoded is tried again by the write-behind, and reported as
    // any unencodable state is.
    const origin: Origin = { conversation, seq, checkpointed: checkpoint === null ? 0 : seq, counted: 0, createdAt: at, updatedAt: at }
    const live = this.sessions.register(request.sessionId, request.accountId, crew, [request.consumerId], origin)
    live.eventBound = eventSeqBound ?? 0
    live.listeners.add(listener)
    live.writer.records.opened({ accountId: request.accountId, crewId: crew.id, agentId: context.agentId, startTime: at, customer: customerOf(request.arguments) })
    for (const entry of opening.entries) live.writer.append(entry)
    this.publisher.emit(live, { kind: 'event', name: 'Initialized', data: { sessionId: request.sessionId, consumerId: request.consumerId } })
    for (const event of opening.publish) this.publisher.publish(live, event.name, event.data)
    this.actors.bind(live, this.actors.fresh(context))
    // The stored count is the floor a restore numbers events from (after a crash of the only
    // process, the events sent are known nowhere else): if the start published another number
    // than counted above, the next checkpoint writes the real one.
    if (live.eventSeq !== eventSeq) live.writer.checkpoint()
    this.driver.afterEvent(live)
    return live
  }

  /** How many live sessions are no longer being saved (reported by /healthz; see engine/persistence/session-writer.ts). */
  get sessionsNotPersisted(): number {
    return this.writeBehind.unpersistedSessions().count
  }

  // ---------------------------------------------------------------- hibernation

  private hibernate(live: LiveSession) {
    const actor = this.actors.awake(live)
    live.unbind?.()
    live.unbind = null
    live.actor = null
    live.conversation = null
    live.quietSince = 0
    actor.stop()
    this.options.platform.metrics.sessionsHibernated.inc()
  }

  /** Brings a hibernated session's actor and conversation back from the store. */
  private wake(live: LiveSession): Promise<void> {
    live.waking ??= (async () => {
      const persisted = await this.store.load(live.id)
      if (live.actor || live.finished) return
      if (!persisted) {
        // Gone from the store meanwhile (destroyed by another node): nothing to wake.
        this.leaving.drop(live, 'not in the store any more')
        return
      }
      const entries = await this.store.entriesAfter(live.id, persisted.checkpoint.logPosition)
      if (live.actor || live.finished) return
      const rebuilt = rebuild(persisted, entries)
      live.conversation = rebuilt.conversation
      this.actors.bind(live, this.actors.restored(rebuilt.control))
      this.options.platform.metrics.sessionsHibernated.dec()
    })().finally(() => (live.waking = null))
    return live.waking
  }

  // ---------------------------------------------------------------- commands

  /** The live session (restored here if needed, woken unless `wake` is false); 404 unless it lives for the account. */
  private async obtain(target: SessionTarget, wake = true): Promise<LiveSession> {
    let live = this.sessions.get(target.sessionId) ?? null
    if (!live) live = await this.restore(target.sessionId)
    // Closing: answered once its close is written (CLOSE_NOTICE_WAIT_MS at most), so whoever is
    // told 404 finds its tombstone and close reason in the store, from any node.
    if (live?.finished && live.cleanup) await settledWithin(live.cleanup, CLOSE_NOTICE_WAIT_MS)
    if (!live || live.finished || live.accountId !== target.accountId) throw sessionNotFound(target.sessionId)
    if (wake && !live.actor) await this.wake(live)
    if (live.finished) throw sessionNotFound(target.sessionId)
    return live
  }

  /** Restores the session here if needed; 404 unless it lives and belongs to the account. */
  async touch(target: SessionTarget): Promise<FeedSubscription['position']> {
    return this.publisher.position(await this.obtain(target, false))
  }

  /** The close reason an account's ended session left in its tombstone (null: not known to have ended). */
  closeReason(target: SessionTarget): Promise<string | null> {
    // Closing here: its tombstone may not be written yet.
    const live = this.sessions.get(target.sessionId)
    if (live?.closedAs && live.accountId === target.accountId) return Promise.resolve(live.closedAs)
    return this.store.closeReason(target.sessionId, target.accountId)
  }

  /** Is the session live on this node? (Not once it is finished, while its close is written.) */
  hosts(sessionId: string): boolean {
    const live = this.sessions.get(sessionId)
    return live !== undefined && !live.finished
  }

  async subscribe(target: SessionTarget, listener: TransportListener): Promise<FeedSubscription> {
    const live = await this.obtain(target, false)
    live.listeners.add(listener)
    return { unsubscribe: () => live.listeners.delete(listener), position: this.publisher.position(live) }
  }

  async command(target: SessionTarget, command: SessionCommand): Promise<unknown> {
    if (this.stopped) throw new ShuttingDown('The engine is shutting down; retry on another node')
    const live = await this.obtain(target)
    live.pins++
    live.quietSince = 0
    try {
      return await this.run(live, command)
    } finally {
      live.pins--
      this.hibernation.note(live)
    }
  }

  private async run(live: LiveSession, command: SessionCommand): Promise<unknown> {
    const at = this.now
    switch (command.type) {
      case 'query.history':
        return this.history(live, command.after, command.limit)
      case 'query.snapshot':
        return snapshotView({
          sessionId: live.id,
          crew: live.crew,
          snapshot: this.actors.awake(live).getSnapshot(),
          conversation: live.conversation!,
          logPosition: live.seq,
          createdAt: live.createdAt,
          updatedAt: live.updatedAt,
        })
      case 'consumer.attach':
        await this.attachConsumer(live, command.consumerId)
        return { consumerId: command.consumerId }
      case 'user.message':
        if (!live.consumers.has(command.consumerId)) {
          throw new Invalid('UNKNOWN_CONSUMER', `Consumer ${command.consumerId} is not attached to session ${live.id}`)
        }
        // Refused before anything is recorded: a refused message is not in the conversation.
        // The turn limit applies to a message that would start a turn (one in flight takes it in).
        this.overload.admit('turn', { turnsInFlight: live.busy ? 0 : this.sessions.turnsInFlight })
        touchConsumer(live, command.consumerId)
        this.driver.send(live, { type: 'user.message', text: command.text, consumerId: command.consumerId, at })
        if (this.options.durableAcks) {
          // The message's entries (and those of the same step) are up to this seq; entries the
          // turn adds while we wait are not this message's.
          const upTo = live.seq
          // Acknowledged once its history entry is committed (with the control state), not after
          // the checkpoint: a restore folds the journal past the last checkpoint.
          await live.writer.entriesWritten(upTo)
          if (live.writer.holdsUpTo(upTo)) throw new Unavailable('SESSION_NOT_PERSISTED', `Session ${live.id} cannot be persisted right now; retry shortly`, {}, { retryAfterSeconds: 5 })
        }
        return { accepted: true }
      case 'admin.toolinject': {
        const { event, reply } = this.tools.inject(live.crew, command, at)
        this.driver.send(live, event)
        return reply
      }
      case 'external.resolve':
        return this.resolve(live, command, at)
      case 'admin.transfer': {
        const context = this.actors.awake(live).getSnapshot().context
        if (!context.terms.agents.includes(command.target)) {
          throw new Invalid('UNKNOWN_AGENT', `Agent ${command.target} is not an agent of crew ${live.crew.id}`, { agents: context.terms.agents })
        }
        if (command.target === context.agentId) {
          throw new InvalidState('ALREADY_ASSIGNED', `Session ${live.id} is already handled by agent ${command.target}`)
        }
        this.driver.send(live, { type: 'admin.transfer', userId: command.userId, target: command.target, reason: command.reason, at })
        return { agentId: command.target }
      }
      case 'session.destroy':
        this.driver.send(live, { type: 'session.destroy', reason: command.reason, by: command.by, userId: command.userId, at })
        await live.cleanup
        return { sessionId: live.id, reason: command.reason }
      default:
        this.driver.send(live, { ...command, at } as SessionEvent)
        return {}
    }
  }

  /**
   * A consumer id joins the session (or is used again). Ids are bounded per session: past
   * ENGINE_MAX_CONSUMER_IDS_PER_SESSION the least recently used is forgotten (its next message is
   * refused as an unknown consumer; listening again makes it known again).
   */
  private async attachConsumer(live: LiveSession, consumerId: string) {
    if (live.consumers.has(consumerId)) return touchConsumer(live, consumerId)
    const max = this.options.platform.config.engine.maxConsumerIdsPerSession
    live.consumers.add(consumerId)
    for (const oldest of live.consumers) {
      if (live.consumers.size <= max) break
      live.consumers.delete(oldest)
    }
    await this.store.addConsumer(live.id, consumerId, max)
  }

  private resolve(live: LiveSession, command: Extract<SessionCommand, { type: 'external.resolve' }>, at: number) {
    const context = this.actors.awake(live).getSnapshot().context
    const pending = context.pendingTools.find(p => p.correlationId === command.correlationId)
    if (!pending) {
      if (context.resolved.includes(command.correlationId)) {
        throw new InvalidState('CORRELATION_ALREADY_RESOLVED', `Correlation ${command.correlationId} already has its result`)
      }
      throw new NotFound('CORRELATION_NOT_FOUND', `No tool call of session ${live.id} waits for correlation ${command.correlationId}`)
    }
    this.driver.send(live, { type: 'external.resolve', correlationId: command.correlationId, result: command.result, userId: command.userId, at })
    return { callId: pending.callId, tool: pending.tool }
  }

  // ---------------------------------------------------------------- effects

  /** The turn's generation (the machine entered `generating`); its end is the machine's next event. */
  private generate(live: LiveSession, context: SessionContext) {
    const conversation = live.conversation!
    const generation = startGeneration(
      this.generations,
      {
        sessionId: live.id,
        crew: live.crew,
        agentId: context.agentId,
        turnId: context.turnId,
        messageId: replyId(context),
        arguments: conversation.arguments,
        // As of the start of the turn: messages taken while it writes are the next reply's.
        messages: conversation.window.slice(),
        toolsAllowed: toolsAllowed(context),
      },
      {
        chunk: (index, delta) => {
          if (live.finished) return
          this.publisher.emit(live, { kind: 'event', name: 'assistant.response', data: { messageId: replyId(context), turnId: context.turnId, index, delta } })
        },
        ended: event => {
          // Cancelled generations end nowhere, so the machine is still generating this one.
          if (live.generation === generation) live.generation = null
          if (live.finished || !live.actor) return
          live.actor.send(event)
          this.driver.afterEvent(live)
        },
      },
    )
    live.generation = generation
  }

  // ---------------------------------------------------------------- persistence, close, queries

  private async history(live: LiveSession, after: number, limit: number) {
    await live.writer.flushed()
    const page = await this.store.entriesAfter(live.id, after, limit + 1)
    const entries = page.slice(0, limit).map(entry => ({ ...entry, at: new Date(entry.at).toISOString() }))
    return {
      sessionId: live.id,
      state: stateName(this.actors.awake(live).getSnapshot()),
      logPosition: live.seq,
      data: entries,
      hasMore: page.length > limit,
    }
  }

  // ---------------------------------------------------------------- restore

  /** Rebuilds a session persisted by this or another node (timers re-armed from its deadlines). */
  restore(sessionId: string): Promise<LiveSession | null> {
    const existing = this.sessions.get(sessionId)
    if (existing) return Promise.resolve(existing)
    let loading = this.sessions.loading.get(sessionId)
    if (!loading) {
      loading = this.load(sessionId).finally(() => this.sessions.loading.delete(sessionId))
      this.sessions.loading.set(sessionId, loading)
    }
    return loading
  }

  private async load(sessionId: string): Promise<LiveSession | null> {
    if (this.stopped) return null
    if (this.options.leases) {
      // Fencing: a node holding an older token can no longer write its checkpoint.
      const token = this.options.leases.token(sessionId)
      if (token === undefined) return null
      if (!(await this.store.takeFence(sessionId, token))) return null
    }
    const persisted = await this.store.load(sessionId)
    if (!persisted) return null
    const crew = this.options.crews.get(persisted.crewId)
    if (!crew) return null
    // Events go on after the last one published, by whichever node published it: as the log
    // says, or, when it does not know the session (in one process, after a crash), past the bound.
    const fromLog = await this.events.takeOver(sessionId, this.publisher.epochOf(sessionId))
    const eventSeq = Math.max(persisted.eventSeq, fromLog || persisted.eventSeqBound)
    // The report record counts the entries up to its own seq: those after it are counted again
    // from the journal (after a crash, counts not yet written with a checkpoint).
    const covered = persisted.checkpoint.logPosition
    // No live record: nothing to count into. A record of an older version counted with its snapshot.
    const stored = await this.options.recorder.countedUpTo(sessionId)
    const counted = stored === null ? Number.MAX_SAFE_INTEGER : (stored ?? covered)
    const entries = await this.store.entriesAfter(sessionId, Math.min(covered, counted))
    const rebuilt = rebuild(persisted, entries)
    const origin: Origin = { conversation: rebuilt.conversation, seq: rebuilt.seq, checkpointed: covered, counted: Math.min(counted, rebuilt.seq), createdAt: persisted.checkpoint.createdAt, updatedAt: rebuilt.updatedAt }
    const live = this.sessions.register(sessionId, persisted.accountId, crew, persisted.consumers.slice(-this.options.platform.config.engine.maxConsumerIdsPerSession), origin)
    for (const entry of entries) live.writer.records.recount(entry)
    live.writer.records.flushCounts(rebuilt.seq)
    live.eventSeq = eventSeq
    // Its first event moves the bound ahead again.
    if (!this.events.durable) live.eventBound = eventSeq
    this.actors.bind(live, this.actors.restored(rebuilt.control))
    log(live, 'session.restored', this.now, { logPosition: rebuilt.seq })
    this.driver.afterEvent(live)
    // A restored idle session that owes a reply starts it (as a system attend) — unless the
    // command that caused the restore (it runs first) is a user message, whose reply covers it.
    // Owed: acknowledged messages the control state did not cover, a reply cut by the node's
    // end, or the opening of an outbound session that speaks first.
    if (rebuilt.control.context.replyOwed) {
      setImmediate(() => {
        const attend: SessionEvent = { type: 'admin.attend', userId: 'system:restore', at: this.now }
        if (!live.actor) return
        const now = live.actor.getSnapshot()
        // Past its idle deadline it expires instead (a reaped orphan is not answered).
        if (live.finished || activeState(now) !== 'idle' || !now.context.replyOwed || !now.can(attend) || now.context.idleDeadline <= attend.at) return
        live.actor.send(attend)
        this.driver.afterEvent(live)
      })
    }
    return live
  }

  /** This node's fencing token for the session's writes (undefined in one process). */
  private fenceOf(sessionId: string): number | undefined {
    return this.options.leases?.token(sessionId)
  }

  /** Drops a session whose lease this node lost (called by the ownership); answers its account. */
  dropSession(sessionId: string, why: string): string | undefined {
    const live = this.sessions.get(sessionId)
    if (!live || live.finished) return undefined
    this.leaving.drop(live, why)
    return live.accountId
  }

  /**
   * Graceful hand-over (an engine node draining): waits at most `timeoutMs` for the reply or tool
   * round in progress to end, checkpoints the session and lets its actor go without ending the
   * session, for another node to restore. Answers the session's account (undefined: not here).
   */
  handOver(sessionId: string, timeoutMs: number): Promise<string | undefined> {
    return this.leaving.handOver(sessionId, timeoutMs)
  }

  /** Stops actors without destroying sessions: they stay persisted for a restore. */
  async stop() {
    this.stopped = true
    this.hibernation.stop()
    this.writeBehind.stop()
    await this.leaving.stopAll()
    await this.closing.closed()
    if (this.options.store instanceof OffLoopStore) await this.options.store.close()
  }

  /** For tests and the bench: the snapshot of a live session. */
  peek(sessionId: string): SessionSnapshot | undefined {
    return this.sessions.get(sessionId)?.actor?.getSnapshot()
  }
}
