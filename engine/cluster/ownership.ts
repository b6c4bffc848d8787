// Engine nodes over NATS: which node is alive (and how loaded), and which node owns which
// session. Both live in JetStream KV buckets, their values versioned and checked like every
// message on NATS (platform/wire.ts).
//
//   sb_engine_nodes    key <nodeId> -> {node, live, at}: each engine node puts its entry every
//                      ENGINE_HEARTBEAT_MS; a node not heard from for 3 heartbeats counts as
//                      dead. Gateways and nodes watch the bucket (placement: least `live`).
//   sb_session_owners  key <sessionId> -> {node, at}: the session's lease. Claimed with
//                      create() (no owner yet) or, when the owner is dead, with update() against
//                      the revision that named the dead owner; deleted (at its revision) when the
//                      session is destroyed or the node stops. Not renewed per session: a lease
//                      lives as long as its node does (its heartbeat), so the cost of holding
//                      sessions does not grow with their number.
//
// The revision returned by the claim is the lease's fencing token. JetStream revisions only
// grow, so a later owner always has a larger token. The new owner appends an owner mark to the
// session's journal and event log (engine/cluster/jetstream-journal.ts, jetstream-event-log.ts),
// after which a node that lost the session (paused, partitioned) can no longer write either.
// A node whose link to JetStream was not confirmed within 3 ENGINE_LEASE_RENEW_MS periods (its
// heartbeat, or a probe while it drains) stops using its leases; a node whose NATS connection
// drops drops every session at once (watchConnection): a survivor may already own them, and
// after reconnecting the node must not serve them next to it.
import { NoRespondersError, RequestError, type NatsConnection, type QueuedIterator } from '@nats-io/transport-node'
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream'
import { Kvm, KvWatchInclude, type KV, type KvWatchEntry } from '@nats-io/kv'
import { Unavailable } from '../../platform/errors.js'
import type { Logger } from '../../platform/logger.js'
import type { Wire } from '../../platform/wire.js'
import type { SessionLeases } from '../host/host-options.js'

export const NODES_BUCKET = 'sb_engine_nodes'
export const OWNERS_BUCKET = 'sb_session_owners'
export const nodeSubject = (nodeId: string, verb: 'create' | 'claim' | 'ping') => `sb.engine.${nodeId}.${verb}`

export interface NodeInfo {
  node: string
  /** Sessions live on the node. */
  live: number
  at: number
}

interface Lease {
  /** Revision of the claim: the fencing token (and the compare-and-set base of its release). */
  token: number
  claimedAt: number
}

export interface ClusterTiming {
  /** Node heartbeat period; a node is dead after 3 missed heartbeats. */
  heartbeatMs: number
  /** How often the node confirms its link to JetStream; leases are not used past 3 periods without it. */
  renewMs: number
}

async function openBucket(nc: NatsConnection, name: string, replicas: number, ttl?: number): Promise<KV> {
  const kvm = new Kvm(nc)
  try {
    return await kvm.create(name, { history: 1, replicas, ...(ttl ? { ttl } : {}) })
  } catch (error) {
    // Two nodes starting at once both create it; the loser ("subjects overlap") uses the winner's.
    try {
      return await kvm.open(name)
    } catch {
      throw error
    }
  }
}

const isCasFailure = (error: unknown) =>
  error instanceof JetStreamApiError &&
  (error.code === JetStreamApiCodes.StreamWrongLastSequence || error.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)

/** A request that reached no subscriber (a killed process has none): it was delivered to nobody. */
export function isNoResponders(error: unknown): boolean {
  if (error instanceof NoRespondersError) return true
  if (error instanceof RequestError) return error.isNoResponders()
  return error instanceof Error && error.cause instanceof NoRespondersError
}

/** The live engine nodes as seen through the nodes bucket (gateways and nodes). */
export class NodeDirectory {
  private readonly nodes = new Map<string, NodeInfo & { seenAt: number }>()
  /** Sessions placed on a node since its last heartbeat (spreads a burst of creates). */
  private readonly placed = new Map<string, number>()
  private watcher?: QueuedIterator<KvWatchEntry>

  private constructor(
    readonly bucket: KV,
    private readonly timing: ClusterTiming,
    readonly wire: Wire,
  ) {}

  static async open(nc: NatsConnection, timing: ClusterTiming, wire: Wire, replicas = 1): Promise<NodeDirectory> {
    // Entries of nodes gone for good age out of the bucket.
    const bucket = await openBucket(nc, NODES_BUCKET, replicas, Math.max(60_000, timing.heartbeatMs * 10))
    const directory = new NodeDirectory(bucket, timing, wire)
    directory.watcher = await bucket.watch()
    void directory.follow()
    return directory
  }

  private async follow() {
    for await (const entry of this.watcher!) {
      if (entry.operation !== 'PUT') {
        this.nodes.delete(entry.key)
        continue
      }
      // An entry this build cannot read is left out (logged and counted): that node is not placed on.
      const info = this.wire.decode<NodeInfo>('engine.node', entry.value, { bucket: NODES_BUCKET, key: entry.key })
      if (!info.ok) continue
      // Initial values carry their age; live updates are seen now.
      const seenAt = Math.min(Date.now(), entry.created.getTime())
      this.nodes.set(entry.key, { ...info.message, seenAt: entry.isUpdate === false ? seenAt : Date.now() })
      this.placed.delete(entry.key)
    }
  }

  isLive(nodeId: string) {
    const node = this.nodes.get(nodeId)
    return !!node && Date.now() - node.seenAt < this.timing.heartbeatMs * 3
  }

  live(): NodeInfo[] {
    return [...this.nodes.values()].filter(n => this.isLive(n.node))
  }

  /** The live node with the fewest sessions (ties: random), or undefined. */
  leastLoaded(exclude: ReadonlySet<string> = new Set()): string | undefined {
    let best: string | undefined
    let bestLoad = Infinity
    let ties = 0
    for (const node of this.live()) {
      if (exclude.has(node.node)) continue
      const load = node.live + (this.placed.get(node.node) ?? 0)
      if (load < bestLoad) {
        best = node.node
        bestLoad = load
        ties = 1
      } else if (load === bestLoad && Math.random() < 1 / ++ties) {
        best = node.node
      }
    }
    return best
  }

  notePlaced(nodeId: string) {
    this.placed.set(nodeId, (this.placed.get(nodeId) ?? 0) + 1)
  }

  forget(nodeId: string) {
    this.nodes.delete(nodeId)
  }

  stop() {
    this.watcher?.stop()
  }
}

/** This engine node's heartbeat and its session leases. */
export class Ownership implements SessionLeases {
  private readonly leases = new Map<string, Lease>()
  private heartbeat?: NodeJS.Timeout
  private renewal?: NodeJS.Timeout
  private ownersWatch?: QueuedIterator<KvWatchEntry>
  private probing = false
  private stopped = false
  /** When this node's link to JetStream was last confirmed (a heartbeat stored, or a probe answered). */
  private linkAt = Date.now()
  /** Called when another node took a session of this node's over (seen on the owners bucket): drop the actor. */
  onLost: (sessionId: string) => void = () => {}
  /** Called when a session left the host: unsubscribe its command subject. */
  onUnloaded: (sessionId: string) => void = () => {}
  /** Called when the NATS connection drops, with every session it held: drop their actors. */
  onDisconnected: (sessionIds: string[]) => void = () => {}
  /** Called once reconnected with the sessions dropped when the connection went: claim them back. */
  onReconnected: (sessionIds: string[]) => void = () => {}
  /** Called when a session was dropped because its lease lapsed (not taken): claim it back. */
  onLapsed: (sessionId: string, accountId: string) => void = () => {}

  private constructor(
    private readonly nc: NatsConnection,
    readonly nodeId: string,
    readonly owners: KV,
    readonly directory: NodeDirectory,
    private readonly timing: ClusterTiming,
    private readonly load: () => number,
    private readonly logger: Logger,
  ) {}

  private get wire() {
    return this.directory.wire
  }

  static async open(
    nc: NatsConnection,
    options: { nodeId: string; timing: ClusterTiming; replicas?: number; load: () => number; logger: Logger; directory: NodeDirectory },
  ): Promise<Ownership> {
    const owners = await openBucket(nc, OWNERS_BUCKET, options.replicas ?? 1)
    return new Ownership(nc, options.nodeId, owners, options.directory, options.timing, options.load, options.logger)
  }

  /** Starts announcing this node (call once its subjects are subscribed). */
  async start() {
    await this.beat()
    this.heartbeat = setInterval(() => void this.beat(), this.timing.heartbeatMs)
    this.heartbeat.unref()
    this.renewal = setInterval(() => void this.probe(), this.timing.renewMs)
    this.renewal.unref()
    void this.watchConnection()
    void this.watchOwners()
  }

  /**
   * A claim by another node of a session this node holds (it took this node for dead: a stalled
   * event loop, a slow link) is seen here at once: the session is dropped before it answers
   * anything from a stale actor. Its writes are fenced by the journal either way.
   */
  private async watchOwners() {
    try {
      this.ownersWatch = await this.owners.watch({ include: KvWatchInclude.UpdatesOnly })
      for await (const entry of this.ownersWatch) {
        const lease = this.leases.get(entry.key)
        if (!lease || entry.revision <= lease.token) continue
        // This node's own claim again (its answer and this entry may come in either order).
        if (entry.operation === 'PUT') {
          const owner = this.wire.decode<{ node: string }>('session.owner', entry.value, { bucket: OWNERS_BUCKET, key: entry.key })
          if (owner.ok && owner.message.node === this.nodeId) continue
        }
        this.leases.delete(entry.key)
        this.logger.warn('session lease lost: another node owns it now', { sessionId: entry.key })
        this.onLost(entry.key)
      }
    } catch (error) {
      if (!this.stopped) this.logger.warn('owners watch ended', { error })
    }
  }

  /**
   * A lost NATS connection may have lost every session: the server dropped this node's
   * subscriptions at once, so a gateway's command finds no responder and a live node takes the
   * session over (a partition looks like a death). Once reconnected, this node would subscribe
   * to those sessions' command subjects again next to their new owner and get their commands
   * too, and its stale actors would run them on an out-of-date conversation. So it drops them
   * all as soon as the connection goes: nothing more is written from here, and a session still
   * its own comes back through a claim (restored from the store) on its next command.
   * Once reconnected it claims them back (onReconnected): those no survivor took meanwhile are
   * restored here at once, and a reply cut by the blip is given again (the restore re-answers an
   * acknowledged message that has no reply yet).
   */
  private async watchConnection() {
    let dropped: string[] = []
    for await (const status of this.nc.status()) {
      if (this.stopped) return
      if (status.type === 'reconnect' && dropped.length) {
        this.onReconnected(dropped)
        dropped = []
      }
      if (status.type !== 'disconnect') continue
      const lost = [...this.leases.keys()]
      if (lost.length) this.logger.warn('nats disconnected: dropping every session hosted here', { sessions: lost.length })
      for (const sessionId of lost) this.leases.delete(sessionId)
      this.onDisconnected(lost)
      dropped.push(...lost)
    }
  }

  private async beat() {
    if (this.stopped) return
    try {
      const info: NodeInfo = { node: this.nodeId, live: this.load(), at: Date.now() }
      await this.directory.bucket.put(this.nodeId, this.wire.encode(info))
      this.linkAt = Date.now()
    } catch (error) {
      this.logger.warn('engine heartbeat failed', { error })
    }
  }

  held(): number {
    return this.leases.size
  }

  // ------------------------------------------------------------ SessionLeases (for the host)

  token(sessionId: string): number | undefined {
    const lease = this.leases.get(sessionId)
    if (!lease || this.lapsed(lease)) return undefined
    return lease.token
  }

  unloaded(sessionId: string, why: 'finished' | 'dropped', accountId: string) {
    this.onUnloaded(sessionId)
    if (why === 'finished') return void this.release(sessionId)
    const lease = this.leases.get(sessionId)
    this.leases.delete(sessionId)
    // Lapsed (renewals did not get through in time) is not lost (a renewal found the entry
    // rewritten, which deletes the lease first): the entry may still be this node's.
    if (lease && !this.stopped && this.lapsed(lease)) this.onLapsed(sessionId, accountId)
  }

  /** The link not confirmed for 3 periods: no longer used (another node may take the session meanwhile). */
  private lapsed(lease: Lease) {
    return Date.now() - Math.max(this.linkAt, lease.claimedAt) >= this.timing.renewMs * 3
  }

  // ------------------------------------------------------------ claims

  /**
   * Takes the session's lease: when nobody owns it, when this node already does, or when its
   * owner is dead. Answers the owner when it is another live node.
   */
  async claim(sessionId: string): Promise<{ token: number } | { owner: string }> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const value = this.wire.encode({ node: this.nodeId, at: Date.now() })
      const entry = await this.owners.get(sessionId)
      try {
        let revision: number
        if (!entry || entry.operation !== 'PUT') {
          revision = await this.owners.create(sessionId, value)
        } else {
          // An entry this build cannot read names no owner it could check: the claim fails (logged and counted).
          const read = this.wire.decode<{ node: string }>('session.owner', entry.value, { bucket: OWNERS_BUCKET, key: sessionId })
          if (!read.ok) throw new Unavailable('WIRE_REFUSED', `The owner of session ${sessionId} cannot be read by this node (see its log)`, {}, { retryAfterSeconds: 1 })
          const owner = read.message.node
          if (owner !== this.nodeId && (await this.alive(owner))) return { owner }
          if (owner !== this.nodeId) this.logger.info('taking over a session of a dead engine node', { sessionId, from: owner })
          revision = await this.owners.update(sessionId, value, entry.revision)
        }
        this.leases.set(sessionId, { token: revision, claimedAt: Date.now() })
        return { token: revision }
      } catch (error) {
        if (!isCasFailure(error)) throw error
        // Somebody else wrote the entry in between: look again.
      }
    }
    throw new Error(`could not claim session ${sessionId}: contended`)
  }

  /**
   * Alive = answers its ping. No responder = dead (a killed or cut-off process has no
   * subscriptions). No answer in time: alive if heard from recently (slow is not dead). The ping
   * comes first because this node's own view may be stale: just reconnected after a blip, it
   * has missed the other nodes' heartbeats.
   */
  private async alive(nodeId: string): Promise<boolean> {
    try {
      const subject = nodeSubject(nodeId, 'ping')
      const answer = await this.nc.request(subject, this.wire.encode({}), { timeout: 1000 })
      this.wire.decode('engine.reply', answer.data, { subject }) // checked (a refusal is logged); any answer means alive
      return true
    } catch (error) {
      if (isNoResponders(error)) {
        this.directory.forget(nodeId)
        return false
      }
      return this.directory.isLive(nodeId)
    }
  }

  /** Deletes the owner entry if it is still this node's (destroyed session, node stopping). */
  async release(sessionId: string) {
    const lease = this.leases.get(sessionId)
    if (!lease) return
    this.leases.delete(sessionId)
    try {
      await this.owners.delete(sessionId, { previousSeq: lease.token })
    } catch (error) {
      if (!isCasFailure(error)) this.logger.warn('lease release failed', { sessionId, error })
    }
  }

  /**
   * Confirms the link to JetStream when the heartbeat does not (a draining node has stopped
   * beating): one request per period for the whole node, whatever the number of its sessions.
   */
  private async probe() {
    if (this.probing || this.stopped || Date.now() - this.linkAt < this.timing.renewMs) return
    this.probing = true
    try {
      await this.owners.status()
      this.linkAt = Date.now()
    } catch (error) {
      this.logger.debug('JetStream link probe failed', { error })
    } finally {
      this.probing = false
    }
  }

  /** Draining: out of the directory (no new sessions are placed here); the link is still confirmed by probes. */
  async leave() {
    clearInterval(this.heartbeat)
    this.heartbeat = undefined
    try {
      await this.directory.bucket.delete(this.nodeId)
    } catch (error) {
      this.logger.warn('engine node not removed from the directory', { error })
    }
  }

  /** Stops the heartbeat, releases every lease and removes this node from the directory. */
  async stop() {
    this.stopped = true
    clearInterval(this.heartbeat)
    clearInterval(this.renewal)
    this.ownersWatch?.stop()
    await Promise.all([...this.leases.keys()].map(id => this.release(id)))
    try {
      await this.directory.bucket.delete(this.nodeId)
    } catch {
      // the entry ages out
    }
    this.directory.stop()
  }
}
