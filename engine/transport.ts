// The session transport: the only way the gateway side (channel and administration routes, the
// stream hub) reaches session actors. Everything crossing it is plain JSON, and errors are
// domain errors (platform/errors.ts), so a NATS implementation drops in without touching the
// routes or the machine:
//   create  -> request/reply on `sb.engine.create` (an engine node picks it, owns the actor)
//   command -> request/reply on `sb.session.<id>.cmd` (the owning node answers; a node that does
//              not host the session restores it from its checkpoint and journal first)
//   events  -> `sb.session.<id>.events` published by the owner, each with its seq (the SSE id);
//              subscribe() is a plain subscription, opened before create() sends so no early
//              event is missed; replay() reads the session's event log
//              (engine/streams/event-log.ts).
// The in-process implementation below calls the host directly.
import type { ContextMessageInput } from './session/machine.js'
import type { EventLog, StreamEvent } from './streams/event-log.js'
import type { OutboundSpec } from './types.js'

export interface SessionTarget {
  sessionId: string
  /** The caller's account: a session of another account is answered as not found. */
  accountId: string
}

export interface CreateSessionRequest {
  sessionId: string
  consumerId: string
  accountId: string
  crewId: string
  arguments: Record<string, unknown>
  outbound?: OutboundSpec
}

export type TransportEvent = StreamEvent
export type TransportListener = (event: TransportEvent) => void

export type SessionCommand =
  | { type: 'user.message'; consumerId: string; text: string }
  /** Barge-in: the reply being written stops; `heard`, what the user heard of it (a voice bridge knows). */
  | { type: 'user.interrupt'; consumerId: string; heard?: string }
  | { type: 'consumer.attach'; consumerId: string }
  | { type: 'admin.append'; userId: string; messages: ContextMessageInput[] }
  | { type: 'admin.override'; userId: string; messages: ContextMessageInput[]; arguments?: Record<string, unknown> }
  | { type: 'admin.attend'; userId: string }
  | { type: 'admin.whisper'; userId: string; text: string }
  | { type: 'admin.impersonate'; userId: string; text: string; applyModifiers: boolean }
  | { type: 'admin.toolinject'; userId: string; tool: string; args: unknown }
  | { type: 'admin.transfer'; userId: string; target: string; reason?: string }
  | { type: 'admin.pause'; userId: string; reason?: string }
  | { type: 'admin.resume'; userId: string }
  | { type: 'external.resolve'; userId: string; correlationId: string; result: unknown }
  | { type: 'session.destroy'; reason: string; by: 'channel' | 'admin'; userId?: string }
  | { type: 'query.history'; after: number; limit: number }
  | { type: 'query.snapshot' }

export interface Subscription {
  unsubscribe(): void
}

export interface FeedSubscription extends Subscription {
  /** The session's position when the subscription started: its last event's seq and epoch. */
  position: { seq: number; epoch: number }
}

export interface SessionTransport {
  /** Starts a session; `listener` receives its events from the very first one. */
  create(request: CreateSessionRequest, listener: TransportListener): Promise<Subscription>
  /** Runs a command on the owning actor; resolves with the command's result (JSON). */
  command(target: SessionTarget, command: SessionCommand): Promise<unknown>
  /** Events of an existing session from now on (404 unless it lives for the account). */
  subscribe(target: SessionTarget, listener: TransportListener): Promise<FeedSubscription>
  /** The session's events with seq > after still in its log (call after subscribe()). */
  replay(sessionId: string, after: number): Promise<TransportEvent[]>
  /** The position of the last entry of the session's log (null: none kept); cheaper than replay(). */
  lastEvent(sessionId: string): Promise<FeedSubscription['position'] | null>
  /**
   * How a session of the account that has ended closed (its tombstone's reason, kept a day); null
   * when it is not known to have ended. For a follower that arrives after the end (subscribe 404s).
   */
  closeReason(target: SessionTarget): Promise<string | null>
}

/**
 * What the in-process transport calls: the actor host of this process (engine/host/host.ts). Named
 * here, so that the host depends on the transport's types and not the other way round.
 */
export interface LocalSessions {
  create(request: CreateSessionRequest, listener: TransportListener): Promise<Subscription>
  command(target: SessionTarget, command: SessionCommand): Promise<unknown>
  subscribe(target: SessionTarget, listener: TransportListener): Promise<FeedSubscription>
  closeReason(target: SessionTarget): Promise<string | null>
  readonly events: Pick<EventLog, 'read' | 'last'>
}

export class InProcessTransport implements SessionTransport {
  constructor(private readonly host: LocalSessions) {}

  create(request: CreateSessionRequest, listener: TransportListener) {
    return this.host.create(request, listener)
  }

  command(target: SessionTarget, command: SessionCommand) {
    return this.host.command(target, command)
  }

  subscribe(target: SessionTarget, listener: TransportListener) {
    return this.host.subscribe(target, listener)
  }

  replay(sessionId: string, after: number) {
    return this.host.events.read(sessionId, after)
  }

  lastEvent(sessionId: string) {
    return this.host.events.last(sessionId)
  }

  closeReason(target: SessionTarget) {
    return this.host.closeReason(target)
  }
}
