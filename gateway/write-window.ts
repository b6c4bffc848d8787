// Writes gathered per macrotask: a stream that queues frames asks to be flushed once, at the end
// of the current macrotask (setImmediate), so the frames of one event-loop turn go out in one
// write (one syscall instead of one per frame). Shared by the SSE and the WebSocket writers.
export class WriteWindow<T> {
  private readonly pending = new Set<T>()
  private scheduled = false

  /** `flush` writes one stream's queue; it must not throw (this runs from setImmediate). */
  constructor(private readonly flush: (stream: T) => void) {}

  /** `stream` has frames to write at the end of this macrotask. */
  add(stream: T) {
    this.pending.add(stream)
    if (this.scheduled) return
    this.scheduled = true
    setImmediate(() => this.flushAll())
  }

  /** `stream` wrote (or dropped) its queue already. */
  delete(stream: T) {
    this.pending.delete(stream)
  }

  private flushAll() {
    this.scheduled = false
    const streams = [...this.pending]
    this.pending.clear()
    for (const stream of streams) this.flush(stream)
  }
}
