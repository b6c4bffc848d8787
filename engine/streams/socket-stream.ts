// One channel WebSocket as the hub's consumer stream, and its outlet for the answers to frames.
// Events and answers share one queue, so an answer never overtakes an event sent before it; the
// frames of one macrotask go out in one write (as SSE's do). When the hub ends the stream, the
// socket closes with a code that says why (CHANNEL_CLOSE), so a client can tell a session that
// ended from one it should resume.
import { jsonEventFrame } from '../../gateway/sse.js'
import { WriteWindow } from '../../gateway/write-window.js'
import type { SocketLink } from '../../platform/http.js'
import type { ConsumerStream, LastFrame, StreamEnd, StreamHooks } from './hub.js'

/**
 * The close codes of a channel socket (besides the gateway's own, gateway/websocket.ts). An
 * error that ends the socket closes it with 4000 + the HTTP status its call would answer.
 */
export const CHANNEL_CLOSE = {
  /** The session ended (DELETE, an `end` frame, administration destroy, idle expiry); the reason says how. */
  sessionClosed: 4000,
  /** This consumer fell too far behind: resume with the last event id. */
  slowConsumer: 4001,
  /** The same consumer attached on another connection, which took over. */
  replaced: 4002,
  /** The service stops (RFC 6455 Service Restart): resume with the last event id, through any gateway. */
  shutdown: 1012,
  /** 4000 + status: 4400 bad frame, 4403, 4404 no such session, 4409 out of order, 4429 limits, 4503 overload. */
  error: (status: number) => 4000 + status,
} as const

type Frame = { text: string; eventId?: number }

/** Sockets with frames waiting for the end of the current macrotask; a fault closes that socket only. */
const pendingFlush = new WriteWindow<SocketStream>(stream => {
  try {
    stream.flush()
  } catch (error) {
    stream.fail(error)
  }
})

export class SocketStream implements ConsumerStream {
  readonly transport = 'socket'
  lastWrittenId = 0
  private pending: Frame[] = []
  private hooks: StreamHooks | null = null
  private endedByServer = false
  private readonly closeListeners: (() => void)[] = []

  constructor(
    private readonly link: SocketLink,
    /** The frame an event goes out as (`body`: its SSE lines); null: this socket does not carry it. */
    private readonly encode: (id: number, body: string) => string | null = jsonEventFrame,
  ) {}

  /** The hub opened it as a consumer's stream. */
  bind(hooks: StreamHooks): this {
    this.hooks = hooks
    return this
  }

  get closed() {
    return this.link.closed
  }

  get closedByClient() {
    return this.link.closed && !this.endedByServer
  }

  /** The id of this consumer's frames of its own: the last event it was sent. */
  get position(): number {
    return this.hooks?.currentId() ?? 0
  }

  onClose(listener: () => void) {
    if (this.closed) listener()
    else this.closeListeners.push(listener)
  }

  /** @internal the socket is gone (either side closed it). */
  closedBySocket() {
    this.pending = []
    pendingFlush.delete(this)
    for (const listener of this.closeListeners.splice(0)) {
      try {
        listener()
      } catch (error) {
        this.link.reportFault(error)
      }
    }
  }

  send(id: number, body: string): boolean {
    const text = this.encode(id, body)
    if (text === null) return !this.link.closed
    return this.queue({ text, eventId: id })
  }

  /** An answer to a client's frame (ack or error), in order with the events. */
  reply(frame: Record<string, unknown>): boolean {
    return this.queue({ text: JSON.stringify(frame) })
  }

  private queue(frame: Frame): boolean {
    if (this.link.closed) return false
    this.pending.push(frame)
    pendingFlush.add(this)
    return true
  }

  /** Writes what is queued in one write; a client over its buffer is reported as too slow. */
  flush() {
    pendingFlush.delete(this)
    if (this.pending.length === 0 || this.link.closed) return
    const frames = this.pending
    this.pending = []
    let fits = true
    this.link.batch(() => {
      for (const frame of frames) {
        fits = this.link.send(frame.text) && fits
        if (frame.eventId !== undefined) this.lastWrittenId = frame.eventId
      }
    })
    if (!fits) this.hooks?.onDropped()
  }

  /** Something failed while writing: the socket closes (the client resumes with its last event id). */
  fail(error: unknown) {
    this.link.reportFault(error)
    this.close(CHANNEL_CLOSE.error(500), 'internal error')
  }

  end(last?: LastFrame, why: StreamEnd = { why: 'session_closed', reason: '' }) {
    if (this.link.closed) return
    this.flush()
    const lastText = last && this.encode(last.id, last.body)
    if (lastText) this.link.send(lastText)
    const resume = `resume with lastEventId=${last?.id ?? this.position}`
    switch (why.why) {
      case 'session_closed':
        return this.close(CHANNEL_CLOSE.sessionClosed, `session closed${why.reason ? `: ${why.reason}` : ''}`)
      case 'shutdown':
        return this.close(CHANNEL_CLOSE.shutdown, `service stopping: ${resume} (any gateway)`)
      case 'slow_consumer':
        return this.close(CHANNEL_CLOSE.slowConsumer, `too slow: ${resume}`)
      case 'replaced':
        return this.close(CHANNEL_CLOSE.replaced, 'this consumer attached on another connection')
    }
  }

  drop(last: LastFrame) {
    if (this.link.closed) return
    this.pending = []
    pendingFlush.delete(this)
    this.end(last, { why: 'slow_consumer' })
  }

  /** Closes the socket (what is queued goes first). */
  close(code: number, reason: string) {
    if (this.link.closed) return
    this.endedByServer = true
    this.flush()
    this.link.close(code, reason)
  }
}
