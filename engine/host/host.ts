// The actor host: owns the live session actors of this process, and is what the rest of the
// engine calls (the in-process transport, an engine node over NATS, the orphan reaper). It builds
// its parts and provides the machine's effects (engine/session/session-effects.ts); each path is
// a part of its own:
//   live-sessions.ts   the live sessions by id, each registered with its writer
//   session-actors.ts  the machine with its effects provided, and which actor is which session
//   creation.ts        a new session: crew slot, document, opening, actor
//   loading.ts         restore from the store, hibernate and wake
//   commands.ts        a command on a live session, one handler per SessionCommand
//   session-driver.ts  events into the machine, and what follows each one
//   expiry.ts          idle and tool deadlines firing (armed by deadlines.ts)
//   event-publisher.ts published events: numbered, to listeners and the event log
//   closing.ts         a session that ends; leaving.ts one that leaves this node without ending
// What a session leaves in the store goes through its SessionWriter
// (engine/persistence/session-writer.ts) to the SessionStore (engine/persistence/session-store.ts).
import { OverloadGuard } from '../../platform/overload.js'
import { ShuttingDown } from '../../platform/errors.js'
import { OffLoopStore } from '../../platform/store/index.js'
import { CrewSlots } from '../persistence/crew-slots.js'
import { SessionStore, type SessionRepository } from '../persistence/session-store.js'
import { WriteBehind } from '../persistence/session-writer.js'
import { startGeneration, type GenerationDeps } from '../session/generation.js'
import type { LiveSession } from '../session/live-session.js'
import { replyId, toolsAllowed, type SessionContext, type SessionSnapshot } from '../session/machine.js'
import { ToolRunner } from '../session/tools.js'
import { MemoryEventLog, type EventLog } from '../streams/event-log.js'
import type { CreateSessionRequest, FeedSubscription, LocalSessions, SessionCommand, SessionTarget, Subscription, TransportListener } from '../transport.js'
import { SessionClosing } from './closing.js'
import { SessionCommands } from './commands.js'
import { SessionCreation } from './creation.js'
import { Deadlines } from './deadlines.js'
import { EventPublisher } from './event-publisher.js'
import { Expiry } from './expiry.js'
import { Hibernation } from './hibernation.js'
import type { HostOptions } from './host-options.js'
import { SessionLeaving } from './leaving.js'
import { LiveSessions } from './live-sessions.js'
import { SessionLoader } from './loading.js'
import { SessionActors } from './session-actors.js'
import { SessionDriver } from './session-driver.js'

export class SessionHost implements LocalSessions {
  readonly events: EventLog
  /** Every live session's journal and checkpoint writes, batched off the turn's path. */
  readonly writeBehind: WriteBehind
  private readonly store: SessionRepository
  private readonly sessions: LiveSessions
  private readonly driver: SessionDriver
  private readonly publisher: EventPublisher
  private readonly creation: SessionCreation
  private readonly loader: SessionLoader
  private readonly commands: SessionCommands
  private readonly closing: SessionClosing
  private readonly leaving: SessionLeaving
  private readonly expiry: Expiry
  /** Quiet sessions let their actor go (engine/host/hibernation.ts). */
  private readonly hibernation: Hibernation
  private readonly generations: GenerationDeps
  private stopped = false

  constructor(private readonly options: HostOptions) {
    const { platform, leases, recorder, crews } = options
    const { config, logger, metrics, clock } = platform
    const { channel, engine } = config
    // Read from the platform each time, as everything else that tells the time.
    const now = () => this.options.platform.clock.now()
    const overload = platform.overload ?? OverloadGuard.off()
    overload.hostsTurns()
    const events = (this.events =
      options.events ?? new MemoryEventLog({ events: channel.replayBufferEvents, bytes: channel.replayBufferBytes, maxAgeMs: channel.eventRetentionMs }))
    const stored = options.store ?? platform.store
    const store: SessionRepository = (this.store = options.repository ?? new SessionStore(stored))
    const slots = new CrewSlots(stored)
    const tools = new ToolRunner(crews, clock, options.externalToolTimeoutMs)
    const fenceOf = (sessionId: string) => leases?.token(sessionId)
    const drop = (live: LiveSession, why: string) => this.leaving.drop(live, why)
    this.writeBehind = new WriteBehind({
      store,
      logger,
      metrics,
      now,
      fenced: !!leases,
      stopping: () => this.stopped,
      maxAttempts: engine.persistMaxFailures,
      checkpoints: { entries: engine.checkpointEntries, countsMs: engine.recordFlushMs },
      windowMs: engine.writeWindowMs,
      ...options.writeBehind,
    })
    this.hibernation = new Hibernation({ afterMs: options.hibernateAfterMs ?? engine.hibernateAfterMs, now, hibernate: live => this.loader.hibernate(live) })
    const deadlines = new Deadlines<LiveSession>(clock, { idle: live => this.expiry.idle(live), tool: (live, id) => this.expiry.tool(live, id) })
    this.generations = { providers: options.providers, tools, now, logger }
    const sessions = (this.sessions = new LiveSessions({ writeBehind: this.writeBehind, recorder, logger, metrics, fenceOf, lost: drop, left: id => store.released?.(id) }))
    this.leaving = new SessionLeaving({ sessions, deadlines, store, leases, logger, metrics })
    const publisher = (this.publisher = new EventPublisher({ events, store, leases, logger, drop }))
    const actors = new SessionActors({
      effects: {
        publish: (live, name, data) => publisher.publish(live, name, data),
        generate: (live, context) => this.generate(live, context),
        // Cancelled, and kept until the next turn's: a pause's entry says whether it cut a reply a user saw begin.
        stopGeneration: live => live.generation?.cancel(),
        runTools: (live, calls) => {
          if (calls.length) tools.run(live.crew.id, calls, event => this.driver.deliver(live, event))
        },
        now,
      },
      logger,
      failed: live => this.closing.finish(live),
    })
    this.closing = new SessionClosing({ sessions, actors, deadlines, publisher, events, store, slots, leases, logger, now })
    const driver = (this.driver = new SessionDriver({ sessions, actors, deadlines, hibernation: this.hibernation, finish: live => this.closing.finish(live) }))
    const maxConsumerIds = engine.maxConsumerIdsPerSession
    this.loader = new SessionLoader({ sessions, actors, driver, publisher, store, events, recorder, crews, leases, metrics, maxConsumerIds, recordReadMs: options.recordReadMs, now, stopping: () => this.stopped, drop })
    const terms = { idleTimeoutMs: options.idleTimeoutMs, maxToolRounds: options.maxToolRounds ?? 4 }
    this.creation = new SessionCreation({ sessions, actors, driver, publisher, store, slots, crews, events, terms, fenceOf, now })
    this.commands = new SessionCommands({ sessions, actors, driver, tools, store, overload, durableAcks: !!options.durableAcks, maxConsumerIds, now })
    this.expiry = new Expiry({ driver, actors, deadlines, wake: live => this.loader.wake(live), logger, now })
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

  /** How many live sessions are no longer being saved (reported by /healthz; see engine/persistence/session-writer.ts). */
  get sessionsNotPersisted(): number {
    return this.writeBehind.unpersistedSessions().count
  }

  create(request: CreateSessionRequest, listener: TransportListener): Promise<Subscription> {
    return this.creation.create(request, listener)
  }

  /** Restores the session here if needed; 404 unless it lives and belongs to the account. */
  async touch(target: SessionTarget): Promise<FeedSubscription['position']> {
    return this.publisher.position(await this.loader.obtain(target, false))
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
    const live = await this.loader.obtain(target, false)
    live.listeners.add(listener)
    return { unsubscribe: () => live.listeners.delete(listener), position: this.publisher.position(live) }
  }

  async command(target: SessionTarget, command: SessionCommand): Promise<unknown> {
    if (this.stopped) throw new ShuttingDown('The engine is shutting down; retry on another node')
    const live = await this.loader.obtain(target)
    // Pinned: a session with a command in progress is not hibernated.
    live.pins++
    live.quietSince = 0
    try {
      return await this.commands.run(live, command)
    } finally {
      live.pins--
      this.hibernation.note(live)
    }
  }

  /** Rebuilds a session persisted by this or another node (timers re-armed from its deadlines). */
  restore(sessionId: string): Promise<LiveSession | null> {
    return this.loader.restore(sessionId)
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
}
