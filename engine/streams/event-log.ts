// The session's event log: every event a session publishes to its consumer streams, numbered
// by the session (seq 1 is `Initialized`), kept for replay. The SSE id of an event is its seq,
// the same on every gateway, so a client resumes with Last-Event-ID through any gateway.
//
// The owner of a session appends; gateways read what a resuming client missed. In one process
// the log is a ring per live session (MemoryEventLog); over NATS it is a JetStream stream
// (JetStreamEventLog) that any gateway reads and that outlives the engine node that wrote it.
//
// `epoch` is the owner's fencing token (its lease revision; 0 in one process). A node that
// takes a session over first appends an `owner` mark (no frame, same seq as the last event,
// its own epoch) conditionally on the log's last entry; a node that lost its lease may still
// flush events it buffered while partitioned, but they land after that mark with an older
// epoch, and readers drop them (isNewer).
import { eventBody } from '../../gateway/sse.js'
import type { PublishedEvent } from '../types.js'

export type StreamEventBody = ({ kind: 'event' } & PublishedEvent) | { kind: 'closed'; reason: string } | { kind: 'owner' }
/**
 * `body`: the event's SSE lines (`event:` and `data:`), serialised once by whoever needs them
 * first (the hub that fans the event out, or the ring that keeps it) and shared from then on;
 * never sent over NATS.
 */
export type StreamEvent = StreamEventBody & { seq: number; epoch: number; body?: string }

/** The SSE lines of an event, serialised once per event object. */
export function bodyOf(event: Extract<StreamEvent, { kind: 'event' }>): string {
  return (event.body ??= eventBody(event.name, event.data))
}

export interface EventLog {
  /**
   * Whether the log outlives the process that appends (JetStream does, the in-memory ring does
   * not): a restore after that process died asks it for the last id. Otherwise the owner keeps a
   * bound on its ids in the session's document (engine/host/event-publisher.ts, EVENT_ID_RESERVE).
   */
  readonly durable: boolean
  /** Records the session's next event (the owner only, seq already assigned). */
  append(sessionId: string, event: StreamEvent): void
  /** Events with seq > after that are still kept, in order (a gap shows as a jump in seq). */
  read(sessionId: string, after: number): Promise<StreamEvent[]>
  /** The log's last entry (null: none kept): a reader at exactly this position has missed nothing. */
  last(sessionId: string): Promise<LogPosition | null>
  /** A new owner (at `epoch`) takes the session's log over: returns the last seq (0: none), after
   *  which its own events go on, once older owners are fenced out. */
  takeOver(sessionId: string, epoch: number): Promise<number>
  /** The session ended: nothing more will be read (an in-memory log lets go of it). */
  forget(sessionId: string): void
  /** The session went quiet (it hibernates): an in-memory log shrinks what it holds for it to its size. */
  settle?(sessionId: string): void
}

export interface LogPosition {
  seq: number
  epoch: number
}

/** Whether a reader at `position` applies `event`: a newer owner's mark or event, or the next seq. */
export function isNewer(event: LogPosition, position: LogPosition): boolean {
  return event.epoch > position.epoch ? event.seq >= position.seq : event.epoch === position.epoch && event.seq > position.seq
}

export interface RingLimits {
  /** Events kept per session (SSE_REPLAY_BUFFER_EVENTS). */
  events: number
  /** Bytes of serialised events kept per session (SSE_REPLAY_BUFFER_BYTES); the newest event is always kept. */
  bytes: number
  /** Events older than this are not replayed (SSE_EVENT_RETENTION_MS). */
  maxAgeMs: number
}

/**
 * One session's kept events: its SSE lines, not the object graph of their payloads, in parallel
 * arrays rather than an object per event. Every live session keeps up to SSE_REPLAY_BUFFER_BYTES
 * of events for minutes, so each kept event is copied and marked by every collection that
 * reaches it: here it is one string and a few array slots (the times in a double array are
 * stored unboxed), where an object per event also cost its own cell and a boxed number.
 */
class Ring {
  seqs: number[] = []
  epochs: number[] = []
  ats: number[] = []
  kinds: StreamEvent['kind'][] = []
  /** The event's name (kind `event`) or the reason (kind `closed`); '' for `owner`. */
  names: string[] = []
  /** The event's SSE lines (kind `event`); '' otherwise. */
  bodies: string[] = []
  /** Index of the first live entry (trimmed entries are cut off in batches). */
  start = 0
  bytes = 0

  get length() {
    return this.seqs.length
  }

  push(seq: number, epoch: number, at: number, kind: StreamEvent['kind'], name: string, body: string) {
    this.seqs.push(seq)
    this.epochs.push(epoch)
    this.ats.push(at)
    this.kinds.push(kind)
    this.names.push(name)
    this.bodies.push(body)
    this.bytes += sizeOf(body)
  }

  /** Drops the oldest live entry from the count of bytes (it stays in the arrays until cut). */
  drop() {
    this.bytes -= sizeOf(this.bodies[this.start]!)
    this.bodies[this.start] = ''
    this.start++
  }

  /** Removes the dropped entries from the arrays. */
  cut() {
    for (const list of [this.seqs, this.epochs, this.ats, this.kinds, this.names, this.bodies] as unknown[][]) list.splice(0, this.start)
    this.start = 0
  }

  /**
   * Arrays of exactly the live entries. A growing array keeps room for about half as many again
   * (and at least 16): for a quiet session, most of what its six arrays hold is that room.
   */
  compact() {
    this.seqs = this.seqs.slice(this.start)
    this.epochs = this.epochs.slice(this.start)
    this.ats = this.ats.slice(this.start)
    this.kinds = this.kinds.slice(this.start)
    this.names = this.names.slice(this.start)
    this.bodies = this.bodies.slice(this.start)
    this.start = 0
  }
}

const sizeOf = (body: string) => body.length + 64

/**
 * One process: the last events of each live session, in memory, bounded per session by count,
 * bytes and age (whichever is reached first; age is enforced whenever the ring is touched).
 */
export class MemoryEventLog implements EventLog {
  readonly durable = false
  private readonly rings = new Map<string, Ring>()
  private readonly limits: RingLimits

  constructor(limits: RingLimits | number, private readonly now: () => number = Date.now) {
    this.limits = typeof limits === 'number' ? { events: limits, bytes: Number.MAX_SAFE_INTEGER, maxAgeMs: Number.MAX_SAFE_INTEGER } : limits
  }

  append(sessionId: string, event: StreamEvent) {
    let ring = this.rings.get(sessionId)
    if (!ring) this.rings.set(sessionId, (ring = new Ring()))
    if (event.kind === 'event') ring.push(event.seq, event.epoch, this.now(), 'event', event.name, bodyOf(event))
    else ring.push(event.seq, event.epoch, this.now(), event.kind, event.kind === 'closed' ? event.reason : '', '')
    this.trim(ring)
  }

  private trim(ring: Ring) {
    const { events, bytes, maxAgeMs } = this.limits
    const oldest = this.now() - maxAgeMs
    const last = ring.length - 1
    while (ring.start < last && (last - ring.start + 1 > events || ring.bytes > bytes || ring.ats[ring.start]! < oldest)) ring.drop()
    // Cut in batches: one splice per many appends instead of a shift per event.
    if (ring.start >= 64 && ring.start * 2 >= ring.length) ring.cut()
  }

  async read(sessionId: string, after: number): Promise<StreamEvent[]> {
    const ring = this.rings.get(sessionId)
    if (!ring) return []
    this.trim(ring)
    const out: StreamEvent[] = []
    for (let i = ring.start; i < ring.length; i++) {
      const seq = ring.seqs[i]!
      if (seq <= after) continue
      const epoch = ring.epochs[i]!
      const kind = ring.kinds[i]!
      if (kind === 'event') out.push({ kind: 'event', seq, epoch, name: ring.names[i]!, data: {}, body: ring.bodies[i]! })
      else if (kind === 'closed') out.push({ kind: 'closed', reason: ring.names[i]!, seq, epoch })
      else out.push({ kind: 'owner', seq, epoch })
    }
    return out
  }

  async last(sessionId: string): Promise<LogPosition | null> {
    const ring = this.rings.get(sessionId)
    if (!ring || ring.length === ring.start) return null
    return { seq: ring.seqs[ring.length - 1]!, epoch: ring.epochs[ring.length - 1]! }
  }

  async takeOver(sessionId: string): Promise<number> {
    return this.rings.get(sessionId)?.seqs.at(-1) ?? 0
  }

  forget(sessionId: string) {
    this.rings.delete(sessionId)
  }

  settle(sessionId: string) {
    const ring = this.rings.get(sessionId)
    if (!ring) return
    this.trim(ring)
    ring.compact()
  }

  /** Bytes kept for a session (tests, bench). */
  bytesOf(sessionId: string): number {
    return this.rings.get(sessionId)?.bytes ?? 0
  }
}
