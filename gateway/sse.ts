// Server-Sent Events on top of the gateway's StreamSink: frame formatting, Last-Event-ID
// parsing, coalesced writes with a bound, and a heartbeat. Nothing here knows about sessions;
// the channel hub (engine/hub.ts) owns consumers and decides what to send with which id.
import type { StreamSink } from './routes.js'

/** The part of a frame shared by every consumer of one event: `event:` and `data:` lines. */
export function eventBody(event: string, data: unknown): string {
  // JSON.stringify escapes newlines, so one `data:` line always carries the whole payload.
  return `event: ${event}\ndata: ${serializeEventData(data)}\n\n`
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
  heartbeatMs: number
  /** Frame body of the heartbeat (event `hearthbeat`, spelled as the interface spells it). */
  heartbeatBody: string
  /** Id of the heartbeat frame: the last event the consumer was sent (a heartbeat is no event). */
  currentId: () => number
  onDropped: () => void
  /** Hears a throw from this stream's timers (heartbeat, coalesced flush); the stream is ended. */
  onFault?: (error: unknown) => void
}

/** Streams with frames waiting for the end of the current macrotask. */
const pendingFlush = new Set<SseStream>()
let flushScheduled = false

function flushAll() {
  flushScheduled = false
  const streams = [...pendingFlush]
  pendingFlush.clear()
  // One stream's fault ends that stream only (its client resumes with Last-Event-ID); this runs
  // from setImmediate, where a throw would be an uncaught exception.
  for (const stream of streams) stream.guarded(() => stream.flush())
}

/**
 * One open SSE response. Writes never block: frames of one macrotask are coalesced into one
 * write (one syscall instead of one per event), and when the client's buffer is over its
 * bound the stream reports it through onDropped so the owner drops the consumer.
 */
export class SseStream {
  private readonly heartbeat: NodeJS.Timeout
  private endedByServer = false
  private pending = ''
  private pendingLastId = 0
  /** Id of the last frame handed to the socket (what a dropped client surely had a chance to get). */
  lastWrittenId = 0

  constructor(readonly sink: StreamSink, private readonly options: SseStreamOptions) {
    this.heartbeat = setInterval(() => this.guarded(() => this.send(this.options.currentId(), this.options.heartbeatBody)), options.heartbeatMs)
    this.heartbeat.unref()
    sink.onClose(() => {
      clearInterval(this.heartbeat)
      this.pending = ''
      pendingFlush.delete(this)
    })
  }

  get closed() {
    return this.sink.closed
  }

  /** Runs `work` for this stream from a timer: a throw is reported and ends this stream only. */
  guarded(work: () => void) {
    try {
      work()
    } catch (error) {
      if (this.options.onFault) this.options.onFault(error)
      else this.sink.reportFault?.(error)
      clearInterval(this.heartbeat)
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
    if (!flushScheduled) {
      flushScheduled = true
      setImmediate(flushAll)
    }
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
    clearInterval(this.heartbeat)
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
    clearInterval(this.heartbeat)
    if (this.sink.abandon) this.sink.abandon(frame(last.id, last.body))
    else this.end(last)
  }
}
