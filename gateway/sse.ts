// Server-Sent Events on top of the gateway's StreamSink: frame formatting, Last-Event-ID
// parsing, coalesced writes with a bound, and a heartbeat. Nothing here knows about sessions;
// the channel hub (engine/streams/hub.ts) owns consumers and decides what to send with which id.
import type { StreamSink } from '../platform/http.js'
import { WriteWindow } from './write-window.js'

/** The part of a frame shared by every consumer of one event: `event:` and `data:` lines. */
export function eventBody(event: string, data: unknown): string {
  // JSON.stringify escapes newlines, so one `data:` line always carries the whole payload.
  // join() builds one flat string; `+` or a template would keep a rope of four concatenation
  // nodes and the payload's own string. Bodies live on in the session's replay ring, where
  // five objects per event would be most of what the collector has to copy and mark.
  return ['event: ', event, '\ndata: ', serializeEventData(data), '\n\n'].join('')
}

/**
 * Event payloads come from stored session state; one that cannot be serialized (too deep, a
 * BigInt) must not break the writer of every consumer: it is replaced by an error payload.
 */
function serializeEventData(data: unknown): string {
  try {
    return JSON.stringify(data ?? {})
  } catch {
    return '{"code":"EVENT_NOT_SERIALIZABLE","message":"This event\'s payload could not be serialized"}'
  }
}

export const frame = (id: number, body: string) => `id: ${id}\n${body}`

/**
 * The same event as a JSON text frame (the channel over WebSocket): its name and data taken from
 * the SSE lines as they are, so both transports carry byte-identical payloads and nothing is
 * parsed or serialised again per consumer.
 */
export function jsonEventFrame(id: number, body: string): string {
  const dataAt = body.indexOf('\ndata: ')
  const name = body.slice('event: '.length, dataAt)
  const data = body.slice(dataAt + '\ndata: '.length, body.length - 2)
  return `{"type":"event","id":${id},"event":${JSON.stringify(name)},"data":${data}}`
}

export function formatEvent(id: number, event: string, data: unknown): string {
  return frame(id, eventBody(event, data))
}

/**
 * Last-Event-ID as sent by EventSource clients (header) or by clients that cannot set headers
 * (query `lastEventId`). Returns undefined when absent, null when present but malformed.
 */
export function parseLastEventId(raw: string | undefined | null): number | undefined | null {
  if (raw === undefined || raw === null || raw === '') return undefined
  if (!/^\d{1,15}$/.test(raw.trim())) return null
  return Number(raw.trim())
}

export interface SseStreamOptions {
  /** Sends this stream's heartbeats. */
  heartbeats: HeartbeatWheel
  /** Id of the heartbeat frame: the last event the consumer was sent (a heartbeat is no event). */
  currentId: () => number
  onDropped: () => void
  /** Hears a throw from this stream's timers (heartbeat, coalesced flush); the stream is ended. */
  onFault?: (error: unknown) => void
}

/**
 * Heartbeats of every stream, from one timer: streams are spread over SLOTS slots and each tick
 * (every intervalMs / SLOTS) beats one slot, so every stream still beats once per interval but
 * no tick writes to every stream at once, and a stream costs no timer of its own.
 */
export class HeartbeatWheel {
  static readonly SLOTS = 16
  private readonly slots: Set<SseStream>[] = Array.from({ length: HeartbeatWheel.SLOTS }, () => new Set())
  private cursor = 0
  private next = 0
  private timer: NodeJS.Timeout | null = null

  /** `body`: the heartbeat frame's lines (event `hearthbeat`, spelled as the interface spells it). */
  constructor(readonly intervalMs: number, readonly body: string) {}

  /** @internal */
  add(stream: SseStream): number {
    const slot = this.next
    this.next = (this.next + 1) % HeartbeatWheel.SLOTS
    this.slots[slot]!.add(stream)
    if (!this.timer) {
      this.timer = setInterval(() => this.tick(), Math.max(1, Math.floor(this.intervalMs / HeartbeatWheel.SLOTS)))
      this.timer.unref()
    }
    return slot
  }

  /** @internal */
  remove(stream: SseStream, slot: number) {
    this.slots[slot]!.delete(stream)
  }

  private tick() {
    const slot = this.slots[this.cursor]!
    this.cursor = (this.cursor + 1) % HeartbeatWheel.SLOTS
    for (const stream of slot) stream.beat(this.body)
  }

  stop() {
    if (this.timer) clearInterval(this.timer)
    this.timer = null
  }
}

/**
 * Streams with frames waiting for the end of the current macrotask. One stream's fault ends that
 * stream only (its client resumes with Last-Event-ID).
 */
const pendingFlush = new WriteWindow<SseStream>(stream => stream.guarded(() => stream.flush()))

/**
 * One open SSE response. Writes never block: frames of one macrotask are coalesced into one
 * write (one syscall instead of one per event), and when the client's buffer is over its
 * bound the stream reports it through onDropped so the owner drops the consumer.
 */
export class SseStream {
  readonly transport = 'sse'
  private readonly slot: number
  private endedByServer = false
  private pending = ''
  private pendingLastId = 0
  /** Id of the last frame handed to the socket (what a dropped client surely had a chance to get). */
  lastWrittenId = 0

  constructor(readonly sink: StreamSink, private readonly options: SseStreamOptions) {
    this.slot = options.heartbeats.add(this)
    sink.onClose(() => {
      options.heartbeats.remove(this, this.slot)
      this.pending = ''
      pendingFlush.delete(this)
    })
  }

  /** @internal a heartbeat frame, with the id of the last event sent. */
  beat(body: string) {
    this.guarded(() => this.send(this.options.currentId(), body))
  }

  get closed() {
    return this.sink.closed
  }

  onClose(listener: () => void) {
    this.sink.onClose(listener)
  }

  /** Runs `work` for this stream from a timer: a throw is reported and ends this stream only. */
  guarded(work: () => void) {
    try {
      work()
    } catch (error) {
      if (this.options.onFault) this.options.onFault(error)
      else this.sink.reportFault?.(error)
      this.options.heartbeats.remove(this, this.slot)
      this.pending = ''
      pendingFlush.delete(this)
      try {
        this.sink.end()
      } catch {
        // the sink is already unusable; its close listeners ran or will run on abort
      }
    }
  }

  /** True when the client went away on its own (not ended by us). */
  get closedByClient() {
    return this.sink.closed && !this.endedByServer
  }

  /** Queues one frame for this macrotask's write; false when the stream is already closed. */
  send(id: number, body: string): boolean {
    if (this.sink.closed) return false
    this.pending += frame(id, body)
    this.pendingLastId = id
    pendingFlush.add(this)
    return true
  }

  /** Writes what is queued; a client over its buffer is reported as dropped. */
  flush() {
    if (!this.pending || this.sink.closed) return
    const chunk = this.pending
    this.pending = ''
    this.lastWrittenId = this.pendingLastId
    pendingFlush.delete(this)
    if (!this.sink.write(chunk)) this.options.onDropped()
  }

  /** Sends a last frame (if any) and ends the response. */
  end(last?: { id: number; body: string }) {
    if (this.sink.closed) return
    this.flush()
    if (this.sink.closed) return
    this.endedByServer = true
    this.options.heartbeats.remove(this, this.slot)
    if (last) this.sink.write(frame(last.id, last.body))
    this.sink.end()
  }

  /**
   * Drops a slow client: what is queued for it is discarded (it reads it back from the session's
   * log after reconnecting with Last-Event-ID), the last frame is written, and the response ends.
   */
  drop(last: { id: number; body: string }) {
    if (this.sink.closed) return
    this.endedByServer = true
    this.pending = ''
    pendingFlush.delete(this)
    this.options.heartbeats.remove(this, this.slot)
    if (this.sink.abandon) this.sink.abandon(frame(last.id, last.body))
    else this.end(last)
  }
}
