// A new session: its crew checked and a crew slot taken (the channel's 429), its document
// written with the opening as a checkpoint, then live here with its opening entries and events
// and its actor started.
import { Invalid } from '../../platform/errors.js'
import type { Crew, CrewCatalog } from '../crews.js'
import type { CrewSlots } from '../persistence/crew-slots.js'
import type { SessionRepository } from '../persistence/session-store.js'
import { Conversation } from '../session/conversation.js'
import type { LiveSession } from '../session/live-session.js'
import { initialContext, type SessionTerms } from '../session/machine.js'
import { openingOf } from '../session/session-effects.js'
import type { EventLog } from '../streams/event-log.js'
import { customerOf } from '../supervision/session-directory.js'
import type { CreateSessionRequest, Subscription, TransportListener } from '../transport.js'
import { encodeCheckpoint } from './checkpoint.js'
import { EVENT_ID_RESERVE, type EventPublisher } from './event-publisher.js'
import type { LiveSessions, Origin } from './live-sessions.js'
import type { SessionActors } from './session-actors.js'
import type { SessionDriver } from './session-driver.js'

export interface SessionCreationDeps {
  sessions: Pick<LiveSessions, 'loading' | 'register'>
  actors: Pick<SessionActors, 'bind' | 'fresh'>
  driver: Pick<SessionDriver, 'afterEvent'>
  publisher: Pick<EventPublisher, 'emit' | 'publish'>
  store: Pick<SessionRepository, 'insert'>
  slots: Pick<CrewSlots, 'acquire' | 'release'>
  crews: CrewCatalog
  events: Pick<EventLog, 'durable'>
  /** The session's terms but its crew's agents. */
  terms: Omit<SessionTerms, 'agents'>
  /** This node's fencing token for the session's writes (undefined in one process). */
  fenceOf(sessionId: string): number | undefined
  now(): number
}

export class SessionCreation {
  constructor(private readonly deps: SessionCreationDeps) {}

  async create(request: CreateSessionRequest, listener: TransportListener): Promise<Subscription> {
    const crew = this.deps.crews.get(request.crewId)
    if (!crew || (crew.accounts && !crew.accounts.includes(request.accountId))) {
      throw new Invalid('CREW_NOT_FOUND', `Crew ${request.crewId} does not exist or is not available to this account`)
    }
    await this.deps.slots.acquire(request.accountId, crew)
    try {
      return await this.start(request, crew, listener)
    } catch (error) {
      await this.deps.slots.release(request.accountId, crew.id)
      throw error
    }
  }

  private async start(request: CreateSessionRequest, crew: Crew, listener: TransportListener): Promise<Subscription> {
    const id = request.sessionId
    const { loading } = this.deps.sessions
    // A request for this id that came before the session existed is still reading the store (it
    // finds nothing). From here until the session is live, a request for it waits for it (restore
    // finds this promise) instead of restoring a second copy from the half-written store: that
    // copy answered an empty history, and its idle timer, never pushed by the real session's
    // activity, ended the session while the user was talking. A dialer attempt's id is its
    // session's id and is visible as soon as the attempt is recorded: it can be asked for early.
    await loading.get(id)?.catch(() => null)
    const opening = this.open(request, crew, listener)
    const waiting = opening.catch(() => null) // a creation that failed: the waiting request finds nothing
    loading.set(id, waiting)
    try {
      const live = await opening
      return { unsubscribe: () => live.listeners.delete(listener) }
    } finally {
      if (loading.get(id) === waiting) loading.delete(id)
    }
  }

  /** Writes the new session and makes it live here, with its opening entries and events. */
  private async open(request: CreateSessionRequest, crew: Crew, listener: TransportListener): Promise<LiveSession> {
    const { publisher } = this.deps
    const at = this.deps.now()
    const terms: SessionTerms = { agents: crew.agents, ...this.deps.terms }
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
    const eventSeqBound = this.deps.events.durable ? undefined : eventSeq + EVENT_ID_RESERVE
    await this.deps.store.insert(
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
      this.deps.fenceOf(request.sessionId),
    )
    // A checkpoint that could not be encoded is tried again by the write-behind, and reported as
    // any unencodable state is.
    const origin: Origin = { conversation, seq, checkpointed: checkpoint === null ? 0 : seq, counted: 0, createdAt: at, updatedAt: at }
    const live = this.deps.sessions.register(request.sessionId, request.accountId, crew, [request.consumerId], origin)
    live.eventBound = eventSeqBound ?? 0
    live.listeners.add(listener)
    live.writer.records.opened({ accountId: request.accountId, crewId: crew.id, agentId: context.agentId, startTime: at, customer: customerOf(request.arguments) })
    for (const entry of opening.entries) live.writer.append(entry)
    publisher.emit(live, { kind: 'event', name: 'Initialized', data: { sessionId: request.sessionId, consumerId: request.consumerId } })
    for (const event of opening.publish) publisher.publish(live, event.name, event.data)
    this.deps.actors.bind(live, this.deps.actors.fresh(context))
    // The stored count is the floor a restore numbers events from (after a crash of the only
    // process, the events sent are known nowhere else): if the start published another number
    // than counted above, the next checkpoint writes the real one.
    if (live.eventSeq !== eventSeq) live.writer.checkpoint()
    this.deps.driver.afterEvent(live)
    return live
  }
}
