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
import type { PublishedEvent } from './types.js'

export type StreamEventBody = ({ kind: 'event' } & PublishedEvent) | { kind: 'closed'; reason: string } | { kind: 'owner' }
export type StreamEvent = StreamEventBody & { seq: number; epoch: number }

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

/** One process: the last `capacity` events of each live session, in memory. */
export class MemoryEventLog implements EventLog {
  private readonly rings = new Map<string, StreamEvent[]>()

  constructor(private readonly capacity: number) {}

  append(sessionId: string, event: StreamEvent) {
    let ring = this.rings.get(sessionId)
    if (!ring) this.rings.set(sessionId, (ring = []))
    ring.push(event)
    // Trimmed in batches (one splice per capacity/4 appends instead of a shift per event).
    if (ring.length >= this.capacity + Math.max(16, this.capacity >> 2)) ring.splice(0, ring.length - this.capacity)
  }

  async read(sessionId: string, after: number): Promise<StreamEvent[]> {
    const ring = this.rings.get(sessionId) ?? []
    const kept = ring.slice(Math.max(0, ring.length - this.capacity))
    return kept.filter(event => event.seq > after)
  }

  async takeOver(sessionId: string): Promise<number> {
    return this.rings.get(sessionId)?.at(-1)?.seq ?? 0
  }

  forget(sessionId: string) {
    this.rings.delete(sessionId)
  }
}
