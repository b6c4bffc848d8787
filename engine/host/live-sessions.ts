// The sessions live on this process, by id: how one is registered (from a new session's opening
// or from what the store held) with the writer that persists it, how many have a turn in flight,
// and what is released when one leaves. Sessions on their way in (being created or restored)
// are kept apart: a request for one of them waits for it.
import type { Logger } from '../../platform/logger.js'
import type { Metrics } from '../../platform/metrics.js'
import type { SessionRecorder } from '../../reports/index.js'
import type { Crew } from '../crews.js'
import { RecordWriter } from '../persistence/record-writer.js'
import type { WriteBehind } from '../persistence/session-writer.js'
import type { Conversation } from '../session/conversation.js'
import type { LiveSession } from '../session/live-session.js'
import { persistedControl } from '../session/machine.js'
import { AttentionRules } from '../supervision/attention.js'
import { checkpointOf } from './checkpoint.js'

/** What a live session starts from: a new session's opening, or what the store held. */
export interface Origin {
  conversation: Conversation
  /** Seq of the last history entry, and the seq the stored checkpoint covers. */
  seq: number
  checkpointed: number
  /** The seq the stored report record's counts cover. */
  counted: number
  createdAt: number
  updatedAt: number
}

export interface LiveSessionsDeps {
  writeBehind: WriteBehind
  recorder: SessionRecorder
  logger: Logger
  metrics: Metrics
  /** This node's fencing token for the session's writes (undefined in one process). */
  fenceOf(sessionId: string): number | undefined
  /** Its writes were fenced off (another node may own it): it is let go without touching the store. */
  lost(live: LiveSession, why: string): void
  /** The session is no longer live here: what its repository keeps of it may go. */
  left?(sessionId: string): void
}

export class LiveSessions {
  private readonly byId = new Map<string, LiveSession>()
  /** Sessions being created or restored, by id. */
  readonly loading = new Map<string, Promise<LiveSession | null>>()
  /** Sessions of this node with a turn in flight (ENGINE_MAX_TURNS_IN_FLIGHT). */
  turnsInFlight = 0
  /** Each crew's attention rules, compiled once. */
  private readonly attentionRules = new WeakMap<Crew, AttentionRules>()

  constructor(private readonly deps: LiveSessionsDeps) {}

  get(sessionId: string): LiveSession | undefined {
    return this.byId.get(sessionId)
  }

  get size(): number {
    return this.byId.size
  }

  /** The live sessions as of now (the list stays as it is while sessions leave). */
  list(): LiveSession[] {
    return [...this.byId.values()]
  }

  register(id: string, accountId: string, crew: Crew, consumers: string[], origin: Origin): LiveSession {
    const live: LiveSession = {
      id,
      accountId,
      crew,
      actor: null,
      conversation: origin.conversation,
      seq: origin.seq,
      createdAt: origin.createdAt,
      updatedAt: origin.updatedAt,
      generation: null,
      waking: null,
      pins: 0,
      busy: false,
      quietSince: 0,
      unbind: null,
      listeners: new Set(),
      eventSeq: 0,
      eventBound: 0,
      consumers: new Set(consumers),
      writer: this.deps.writeBehind.writer(
        {
          id,
          finished: () => live.finished,
          control: () => (live.actor ? persistedControl(live.actor.getSnapshot()) : undefined),
          checkpoint: () => checkpointOf(live),
          fence: () => this.deps.fenceOf(id),
          lost: why => this.deps.lost(live, why),
        },
        new RecordWriter(this.deps.recorder, id, this.deps.logger, this.attentionRulesOf(crew), origin.counted),
        origin.checkpointed,
      ),
      idleTimer: null,
      idleDeadline: Number.MAX_SAFE_INTEGER,
      toolTimers: new Map(),
      finished: false,
      closedAs: null,
      closingNotice: null,
      cleanup: null,
    }
    this.byId.set(id, live)
    this.deps.metrics.sessionsLive.inc({ crew: crew.id })
    return live
  }

  /** Removes the session from the live ones, unless a newer copy under its id took its place. */
  forget(live: LiveSession) {
    if (this.byId.get(live.id) !== live) return
    this.byId.delete(live.id)
    this.deps.left?.(live.id)
  }

  clear() {
    for (const id of this.byId.keys()) this.deps.left?.(id)
    this.byId.clear()
  }

  countTurn(live: LiveSession, busy: boolean) {
    if (live.busy === busy) return
    live.busy = busy
    this.turnsInFlight += busy ? 1 : -1
  }

  /** The session left this process (ended, dropped or handed over). */
  released(live: LiveSession) {
    this.deps.metrics.sessionsLive.dec({ crew: live.crew.id })
    live.generation?.cancel()
    live.generation = null
    live.writer.closed()
  }

  private attentionRulesOf(crew: Crew): AttentionRules {
    let rules = this.attentionRules.get(crew)
    if (!rules) this.attentionRules.set(crew, (rules = new AttentionRules(crew.attention)))
    return rules
  }
}
