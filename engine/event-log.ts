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
import { eventBody } from '../gateway/sse.js'
import type { PublishedEvent } from './types.js'

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
  /** Records the session's next event (the owner only, seq already assigned). */
  append(sessionId: string, event: StreamEvent): void
  /** Events with seq > after that are still kept, in order (a gap shows as a jump in seq). */
  read(sessionId: string, after: number): Promise<StreamEvent[]>
  /** A new owner (at `epoch`) takes the session's log over: returns the last seq (0: none), after
   *  which its own events go on, once older owners are fenced out. */
  takeOver(sessionId: string, epoch: number): Promise<number>
  /** The session ended: nothing more will be read (an in-memory log lets go of it). */
  forget(sessionId: string): void
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

/** What a ring keeps of an event: its SSE lines, not the object graph of its payload. */
interface Kept {
  seq: number
  epoch: number
  kind: StreamEvent['kind']
  name?: string
  body?: string
  reason?: string
  at: number
}

class Ring {
  entries: Kept[] = []
  /** Index of the first live entry (trimmed entries are cut off in batches). */
  start = 0
  bytes = 0
}

const sizeOf = (kept: Kept) => (kept.body?.length ?? 0) + 64

/**
 * One process: the last events of each live session, in memory, bounded per session by count,
 * bytes and age (whichever is reached first; age is enforced whenever the ring is touched).
 */
export class MemoryEventLog implements EventLog {
  private readonly rings = new Map<string, Ring>()
  private readonly limits: RingLimits

  constructor(limits: RingLimits | number, private readonly now: () => number = Date.now) {
    this.limits = typeof limits === 'number' ? { events: limits, bytes: Number.MAX_SAFE_INTEGER, maxAgeMs: Number.MAX_SAFE_INTEGER } : limits
  }

  append(sessionId: string, event: StreamEvent) {
    let ring = this.rings.get(sessionId)
    if (!ring) this.rings.set(sessionId, (ring = new Ring()))
    const kept: Kept =
      event.kind === 'event'
        ? { seq: event.seq, epoch: event.epoch, kind: 'event', name: event.name, body: bodyOf(event), at: this.now() }
        : { seq: event.seq, epoch: event.epoch, kind: event.kind, reason: event.kind === 'closed' ? event.reason : undefined, at: this.now() }
    ring.entries.push(kept)
    ring.bytes += sizeOf(kept)
    this.trim(ring)
  }

  private trim(ring: Ring) {
    const { events, bytes, maxAgeMs } = this.limits
    const oldest = this.now() - maxAgeMs
    const last = ring.entries.length - 1
    while (ring.start < last && (last - ring.start + 1 > events || ring.bytes > bytes || ring.entries[ring.start]!.at < oldest)) {
      ring.bytes -= sizeOf(ring.entries[ring.start]!)
      ring.start++
    }
    // Cut in batches: one splice per many appends instead of a shift per event.
    if (ring.start >= 64 && ring.start * 2 >= ring.entries.length) {
      ring.entries.splice(0, ring.start)
      ring.start = 0
    }
  }

  async read(sessionId: string, after: number): Promise<StreamEvent[]> {
    const ring = this.rings.get(sessionId)
    if (!ring) return []
    this.trim(ring)
    const out: StreamEvent[] = []
    for (let i = ring.start; i < ring.entries.length; i++) {
      const kept = ring.entries[i]!
      if (kept.seq <= after) continue
      if (kept.kind === 'event') out.push({ kind: 'event', seq: kept.seq, epoch: kept.epoch, name: kept.name!, data: {}, body: kept.body })
      else if (kept.kind === 'closed') out.push({ kind: 'closed', reason: kept.reason!, seq: kept.seq, epoch: kept.epoch })
      else out.push({ kind: 'owner', seq: kept.seq, epoch: kept.epoch })
    }
    return out
  }

  async takeOver(sessionId: string): Promise<number> {
    return this.rings.get(sessionId)?.entries.at(-1)?.seq ?? 0
  }

  forget(sessionId: string) {
    this.rings.delete(sessionId)
  }

  /** Bytes kept for a session (tests, bench). */
  bytesOf(sessionId: string): number {
    return this.rings.get(sessionId)?.bytes ?? 0
  }
}
