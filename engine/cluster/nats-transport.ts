// The session transport over NATS (engine nodes linked over NATS). Protocol (docs/deploy.md,
// "Engine nodes over NATS" and "Wire protocol"), every payload JSON with its protocol version
// `v`, decoded and checked against its schema at this edge (platform/wire.ts):
//
//   sb.engine.<node>.create   gateway -> chosen node (least loaded)     {request}           -> Reply
//   sb.engine.create          same, queue group `engines` (no node known yet)
//   sb.session.<id>.cmd       gateway -> the owner (only it subscribes) {target, command?}  -> Reply
//   sb.engine.<node>.claim    gateway -> a node, when the session has no live owner: the node
//                             claims the lease, restores the session from the store, runs it
//   sb.engine.<node>.ping     liveness probe between nodes             ''                  -> {node, live}
//   sb.session.<id>.events    owner -> gateways holding streams: {kind, seq, epoch, ...} (a
//                             StreamEvent), also kept by the SB_SESSION_EVENTS JetStream stream
//                             for replay (engine/cluster/jetstream-event-log.ts)
//
//   Reply = {ok: true, result} | {ok: false, error} | {ok: false, redirect: <node>}, in the
//   version of the request it answers; `error` is a domain error: {kind, code, message, extra,
//   retryAfterSeconds} (version 1: {status, code, message, extra}).
//
// `command` absent = only check that the session exists for the account (subscribe); the result
// is the session's position {seq, epoch} (its last event). A request
// that finds no responder on `sb.session.<id>.cmd` was delivered to nobody, so the gateway may
// send it to a node's claim subject instead: that is how a session moves off a dead node.
import { setTimeout as delay } from 'node:timers/promises'
import { randomUUID } from 'node:crypto'
import { TimeoutError, type Msg, type NatsConnection, type Subscription as NatsSubscription } from '@nats-io/transport-node'
import { DomainError, InvalidState, NotFound, TimedOut, Unavailable } from '../../platform/errors.js'
import type { Logger } from '../../platform/logger.js'
import { Wire, WIRE_VERSIONS, type WireError, type WireMessage, type WireVersion } from '../../platform/wire.js'
import type { SessionHost } from '../host/host.js'
import { eventsOf, eventsSubject, type JetStreamEventLog, type WireEvent } from './jetstream-event-log.js'
import { NatsRequests } from '../../platform/bus/nats-requests.js'
import { isNoResponders, NodeDirectory, nodeSubject, Ownership } from './ownership.js'
import type { SessionStore } from '../persistence/session-store.js'
import type {
  CreateSessionRequest,
  FeedSubscription,
  SessionCommand,
  SessionTarget,
  SessionTransport,
  Subscription,
  TransportEvent,
  TransportListener,
} from '../transport.js'

export const commandSubject = (sessionId: string) => `sb.session.${sessionId}.cmd`
export const CREATE_ANY = 'sb.engine.create'
const QUEUE = 'engines'

type Reply = { ok: true; result?: unknown } | { ok: false; error?: WireError; redirect?: string }
interface SessionRequest {
  target: SessionTarget
  command?: SessionCommand
  /** One id per command, kept when the gateway re-sends it through a claim (see EngineNode.run). */
  id?: string
}

/** Waits before each attempt to take back a session whose lease lapsed (about 15 s in all). */
const RETAKE_WAITS_MS = [250, 1000, 2000, 4000, 8000]
const sleep = (ms: number) => delay(ms, undefined, { ref: false })

/** Commands an engine node remembers by id (about a minute of traffic at a few hundred per second). */
const RECENT_COMMANDS = 20_000

const isTimeout = (error: unknown) => error instanceof TimeoutError || (error instanceof Error && error.cause instanceof TimeoutError)

/** A reply this gateway could not read (an engine of a version it does not read): the command may have run. */
const unreadableReply = () =>
  new Unavailable('WIRE_REFUSED', 'The engine node answered in a form this gateway does not read (see its log); the command may or may not have been applied', {}, { retryAfterSeconds: 1 })
/** A request the engine node could not read (a gateway of a version it does not read): nothing was run. */
const unreadableRequest = () => new Unavailable('WIRE_REFUSED', 'The engine node could not read this request (see its log); nothing was applied', {}, { retryAfterSeconds: 1 })
const engineUnavailable = () => new Unavailable('ENGINE_UNAVAILABLE', 'No engine node is available; retry shortly', {}, { retryAfterSeconds: 1 })

/** Gateway side: routes and the hub reach sessions on engine nodes through this. */
export class NatsSessionTransport implements SessionTransport {
  private readonly requests: NatsRequests

  constructor(
    private readonly nc: NatsConnection,
    private readonly directory: NodeDirectory,
    private readonly log: JetStreamEventLog,
    private readonly options: { timeoutMs: number; logger: Logger; tombstones: Pick<SessionStore, 'closeReason'>; wire: Wire },
  ) {
    this.requests = NatsRequests.of(nc)
  }

  /** Read from the shared store: an ended session has no owner to ask. */
  closeReason(target: SessionTarget) {
    return this.options.tombstones.closeReason(target.sessionId, target.accountId)
  }

  private async request(subject: string, payload: object): Promise<Reply> {
    const { wire, timeoutMs } = this.options
    const msg = await this.requests.request(subject, wire.encode(payload), timeoutMs)
    const reply = wire.decode<Reply>('engine.reply', msg.data, { subject })
    if (!reply.ok) throw unreadableReply()
    return reply.message
  }

  /** The subscription is known to the server; disconnected (NATS restarting) = 503, not a 500. */
  private async flushed() {
    try {
      await this.nc.flush()
    } catch (error) {
      throw this.failure(error)
    }
  }

  /**
   * Calls `restored` each time the connection to NATS comes back. Core NATS keeps nothing for an
   * absent subscriber: what the owners published on the event subjects meanwhile is only in the
   * event log, and a session that says nothing more would show no gap. Ends with the connection.
   */
  async watchLink(restored: () => void) {
    for await (const status of this.nc.status()) if (status.type === 'reconnect') restored()
  }

  private listen(sessionId: string, listener: TransportListener): NatsSubscription {
    return this.nc.subscribe(eventsSubject(sessionId), {
      callback: (error, msg) => {
        if (error) return
        // A refused event is not applied (logged and counted); the next one shows the gap.
        const message = this.options.wire.decode<WireEvent>('session.event', msg.data, { subject: msg.subject })
        if (!message.ok) return
        for (const event of eventsOf(message.message)) {
          try {
            listener(event)
          } catch (failure) {
            this.options.logger.warn('bad session event', { sessionId, error: failure })
          }
        }
      },
    })
  }

  async create(request: CreateSessionRequest, listener: TransportListener): Promise<Subscription> {
    // Subscribed (and known to the server) before the node can publish the first event.
    const sub = this.listen(request.sessionId, listener)
    try {
      await this.flushed()
      const tried = new Set<string>()
      for (let attempt = 0; attempt < 4; attempt++) {
        const node = this.directory.leastLoaded(tried)
        let reply: Reply
        try {
          reply = await this.request(node ? nodeSubject(node, 'create') : CREATE_ANY, { request })
        } catch (error) {
          if (isNoResponders(error)) {
            if (!node) throw engineUnavailable()
            tried.add(node)
            this.directory.forget(node)
            continue
          }
          throw this.failure(error)
        }
        if (node) this.directory.notePlaced(node)
        this.unwrap(reply)
        return { unsubscribe: () => sub.unsubscribe() }
      }
      throw engineUnavailable()
    } catch (error) {
      sub.unsubscribe()
      throw error
    }
  }

  command(target: SessionTarget, command: SessionCommand): Promise<unknown> {
    return this.send({ target, command, id: randomUUID() })
  }

  async subscribe(target: SessionTarget, listener: TransportListener): Promise<FeedSubscription> {
    const sub = this.listen(target.sessionId, listener)
    try {
      await this.flushed()
      // 404 unless it exists for this account; restores it if needed; answers its position.
      const position = (await this.send({ target })) as FeedSubscription['position']
      return { unsubscribe: () => sub.unsubscribe(), position }
    } catch (error) {
      sub.unsubscribe()
      throw error
    }
  }

  async replay(sessionId: string, after: number): Promise<TransportEvent[]> {
    try {
      return await this.log.read(sessionId, after)
    } catch (error) {
      throw this.failure(error)
    }
  }

  async lastEvent(sessionId: string): Promise<FeedSubscription['position'] | null> {
    try {
      return await this.log.last(sessionId)
    } catch (error) {
      throw this.failure(error)
    }
  }

  /** To the owner; when there is none (no responder), to a node that claims the session. */
  private async send(payload: SessionRequest): Promise<unknown> {
    const { sessionId } = payload.target
    try {
      const reply = await this.request(commandSubject(sessionId), payload)
      if (reply.ok || reply.error?.code !== 'NOT_OWNER') return this.unwrap(reply)
    } catch (error) {
      if (!isNoResponders(error)) throw this.failure(error)
    }
    const tried = new Set<string>()
    let node = this.directory.leastLoaded()
    for (let attempt = 0; attempt < 4 && node; attempt++) {
      let reply: Reply
      try {
        reply = await this.request(nodeSubject(node, 'claim'), payload)
      } catch (error) {
        if (!isNoResponders(error)) throw this.failure(error)
        tried.add(node)
        this.directory.forget(node)
        node = this.directory.leastLoaded(tried)
        continue
      }
      if (!reply.ok && reply.redirect) {
        // The owner lives (it just lost or never loaded the actor): it restores the session itself.
        if (tried.has(reply.redirect)) break
        tried.add(node)
        node = reply.redirect
        continue
      }
      return this.unwrap(reply)
    }
    throw engineUnavailable()
  }

  private unwrap(reply: Reply): unknown {
    if (reply.ok) return reply.result
    if (reply.error) throw this.options.wire.errorFromWire(reply.error)
    throw engineUnavailable()
  }

  private failure(error: unknown) {
    if (error instanceof DomainError) return error
    if (isTimeout(error)) return new TimedOut('ENGINE_TIMEOUT', 'The engine node did not answer in time; the command may or may not have been applied')
    this.options.logger.warn('engine request failed', { error })
    return engineUnavailable()
  }
}

/** Engine side: hosts sessions for the gateways, owns them through the leases. */
export class EngineNode {
  readonly nodeId = randomUUID()
  private readonly subs: NatsSubscription[] = []
  private readonly sessionSubs = new Map<string, NatsSubscription>()
  private readonly claiming = new Map<string, Promise<Redirect | undefined>>()
  /** Accounts of the sessions dropped when NATS went away (what a claim back needs). */
  private readonly accounts = new Map<string, string>()
  /** Outcomes of recent commands by id, oldest first. */
  private readonly recent = new Map<string, Promise<unknown>>()
  private stopping = false
  private host!: SessionHost
  ownership!: Ownership

  constructor(
    private readonly nc: NatsConnection,
    private readonly logger: Logger,
    private readonly wire: Wire,
  ) {}

  attach(host: SessionHost, ownership: Ownership) {
    this.host = host
    this.ownership = ownership
    ownership.onLost = sessionId => host.dropSession(sessionId, 'lease lost')
    ownership.onDisconnected = sessionIds => {
      for (const sessionId of sessionIds) {
        const accountId = host.dropSession(sessionId, 'NATS connection lost')
        if (accountId) this.accounts.set(sessionId, accountId)
      }
    }
    ownership.onReconnected = sessionIds => void this.reclaim(sessionIds)
    ownership.onLapsed = (sessionId, accountId) => void this.retake({ sessionId, accountId })
    ownership.onUnloaded = sessionId => {
      this.sessionSubs.get(sessionId)?.unsubscribe()
      this.sessionSubs.delete(sessionId)
    }
  }

  async start() {
    const serve = <T>(subject: string, message: WireMessage, handle: (request: T) => Promise<unknown>, queue?: string) => {
      this.subs.push(this.nc.subscribe(subject, { queue, callback: (error, msg) => {
      if (!error) void this.answer(msg, message, handle)
    } }))
    }
    const create = (request: { request: CreateSessionRequest }) => this.create(request.request)
    serve(nodeSubject(this.nodeId, 'create'), 'engine.create', create)
    serve(CREATE_ANY, 'engine.create', create, QUEUE)
    serve(nodeSubject(this.nodeId, 'claim'), 'session.request', (request: SessionRequest) => this.run(request, true))
    serve(nodeSubject(this.nodeId, 'ping'), 'engine.ping', async () => ({ node: this.nodeId, live: this.host.liveCount() }))
    await this.nc.flush()
    await this.ownership.start()
  }

  /**
   * Decodes a request, runs it and answers in the version it was asked in (a gateway not yet
   * upgraded reads the answer). A request that cannot be read is not run: it is answered
   * WIRE_REFUSED (in its own version when this build speaks it), so the asker need not wait.
   */
  private async answer<T>(msg: Msg, message: WireMessage, handle: (request: T) => Promise<unknown>) {
    const request = this.wire.decode<T>(message, msg.data, { subject: msg.subject })
    const version: WireVersion = request.ok ? request.v : WIRE_VERSIONS.includes(request.v as WireVersion) ? (request.v as WireVersion) : this.wire.writes
    let reply: Reply
    try {
      if (!request.ok) throw unreadableRequest()
      const result = await handle(request.message)
      reply = result instanceof Redirect ? { ok: false, redirect: result.node } : { ok: true, result }
    } catch (error) {
      if (!(error instanceof DomainError)) this.logger.error('engine request failed', { subject: msg.subject, error })
      reply = { ok: false, error: this.wire.errorToWire(error, version) }
    }
    try {
      msg.respond(this.wire.encode(reply, version))
    } catch (error) {
      this.logger.warn('engine reply not sent', { subject: msg.subject, error })
    }
  }

  private async create(request: CreateSessionRequest) {
    const claim = await this.ownership.claim(request.sessionId)
    if ('owner' in claim) throw new InvalidState('SESSION_EXISTS', `Session ${request.sessionId} already exists`)
    try {
      await this.host.create(request, () => {})
    } catch (error) {
      await this.ownership.release(request.sessionId)
      throw error
    }
    this.listenSession(request.sessionId)
    return {}
  }

  /** Runs a session request here; with `claim`, first takes the session if nobody live owns it. */
  private async run(request: SessionRequest, claim: boolean): Promise<unknown> {
    const { target, command, id } = request
    if (!this.host.hosts(target.sessionId) || this.ownership.token(target.sessionId) === undefined) {
      if (!claim) throw new Unavailable('NOT_OWNER', `Session ${target.sessionId} is not hosted by this node`)
      const redirect = await this.take(target)
      if (redirect) return redirect
    }
    if (!command) return this.host.touch(target)
    if (!id) return this.host.command(target, command)
    // A stale subscriber (a node that has just lost or handed over the session) may answer
    // NOT_OWNER before the owner answers the same request; the gateway then re-sends it through
    // a claim, which reaches the owner again. The owner runs each command id once.
    const seen = this.recent.get(id)
    if (seen) return seen
    const outcome = this.host.command(target, command)
    this.recent.set(id, outcome)
    // Not run here after all (the session left this node): a retry may find it here again.
    outcome.catch(error => {
      if (error instanceof DomainError && error.code === 'NOT_OWNER' && this.recent.get(id) === outcome) this.recent.delete(id)
    })
    if (this.recent.size > RECENT_COMMANDS) this.recent.delete(this.recent.keys().next().value!)
    return outcome
  }

  /** After a NATS blip: takes back the sessions dropped meanwhile that no other node took. */
  private async reclaim(sessionIds: string[]) {
    let restored = 0
    await Promise.all(
      sessionIds.map(async sessionId => {
        const accountId = this.accounts.get(sessionId)
        this.accounts.delete(sessionId)
        if (!accountId) return
        try {
          if (!(await this.take({ sessionId, accountId }))) restored++
        } catch (error) {
          this.logger.warn('session not taken back after reconnecting', { sessionId, error })
        }
      }),
    )
    this.logger.info('reconnected to NATS: sessions taken back', { restored, of: sessionIds.length })
  }

  /**
   * A session let go because its lease lapsed (its renewals did not get through: a hanging link,
   * a JetStream that does not answer) may still be this node's, and nothing else may ask for it:
   * its user waits for the reply the lapse cut. So it is claimed back here, a few spaced
   * attempts while NATS may still be unwell, then left to its next command. Taken by another
   * node, or gone: nothing to do.
   */
  private async retake(target: SessionTarget) {
    for (const wait of RETAKE_WAITS_MS) {
      await sleep(wait)
      if (this.stopping) return
      if (this.host.hosts(target.sessionId) && this.ownership.token(target.sessionId) !== undefined) return
      try {
        const redirect = await this.take(target)
        this.logger.info(redirect ? 'lapsed session owned by another node now' : 'lapsed session taken back', { sessionId: target.sessionId })
        return
      } catch (error) {
        if (error instanceof NotFound) return
        this.logger.debug('lapsed session not taken back yet', { sessionId: target.sessionId, error })
      }
    }
    this.logger.warn('lapsed session not taken back; its next command will', { sessionId: target.sessionId })
  }

  /** Claims and restores one session (one attempt at a time per session on this node). */
  private take(target: SessionTarget): Promise<Redirect | undefined> {
    const { sessionId } = target
    let pending = this.claiming.get(sessionId)
    if (pending === undefined) {
      pending = (async () => {
        // Live here but its lease lapsed (NATS was unreachable): restore it under a fresh token.
        if (this.host.hosts(sessionId)) this.host.dropSession(sessionId, 'lease lapsed; claiming again')
        const claim = await this.ownership.claim(sessionId)
        if ('owner' in claim) return new Redirect(claim.owner)
        try {
          await this.host.touch(target)
        } catch (error) {
          if (!this.host.hosts(sessionId)) {
            await this.ownership.release(sessionId) // not found: nothing to own
            throw error
          }
          this.listenSession(sessionId) // restored, but another account's: still ours
          throw error
        }
        this.listenSession(sessionId)
        return undefined
      })().finally(() => this.claiming.delete(sessionId))
      this.claiming.set(sessionId, pending)
    }
    return pending
  }

  private listenSession(sessionId: string) {
    if (this.sessionSubs.has(sessionId) || !this.host.hosts(sessionId)) return
    const sub = this.nc.subscribe(commandSubject(sessionId), {
      callback: (error, msg) => {
        if (!error) void this.answer(msg, 'session.request', (request: SessionRequest) => this.run(request, false))
      },
    })
    this.sessionSubs.set(sessionId, sub)
  }

  /**
   * Graceful stop (SIGTERM): no new sessions come here; every session finishes the reply in
   * progress (at most `timeoutMs`), is persisted, its lease released, and another node is asked
   * to restore it at once, so its timers and streams go on there. Events keep their seqs (the
   * new owner numbers on from the event log), so streams see no gap and need no reconnect.
   */
  async drain(timeoutMs: number) {
    for (const sub of this.subs) sub.unsubscribe()
    this.subs.length = 0
    await this.ownership.leave()
    const sessions = [...this.sessionSubs.keys()]
    await Promise.all(sessions.map(sessionId => this.handOver(sessionId, timeoutMs)))
    return sessions.length
  }

  private async handOver(sessionId: string, timeoutMs: number) {
    const accountId = await this.host.handOver(sessionId, timeoutMs)
    await this.ownership.release(sessionId)
    this.sessionSubs.get(sessionId)?.unsubscribe()
    this.sessionSubs.delete(sessionId)
    if (accountId === undefined) return
    const node = this.ownership.directory.leastLoaded(new Set([this.nodeId]))
    if (!node) return // the last node: the session is restored by whichever node starts next
    try {
      const subject = nodeSubject(node, 'claim')
      const answer = await this.nc.request(subject, this.wire.encode({ target: { sessionId, accountId } }), { timeout: 5_000 })
      this.wire.decode('engine.reply', answer.data, { subject }) // checked (a refusal is logged); what it says is not needed
    } catch (error) {
      this.logger.warn('handed-over session not restored yet; its next command will', { sessionId, error })
    }
  }

  /** Stops taking requests (the host is stopped next, then the leases are released). */
  stopIntake() {
    this.stopping = true
    for (const sub of [...this.subs, ...this.sessionSubs.values()]) sub.unsubscribe()
    this.subs.length = 0
    this.sessionSubs.clear()
  }
}

class Redirect {
  constructor(readonly node: string) {}
}
