// How long the event loop is held by the embedded store's write transactions, and how long each
// write waited for its transaction.
//
// lmdb-js runs the callbacks queued for one transaction back to back, synchronously, on the
// thread that queued them, once its write thread holds LMDB's lock: together they are one
// uninterrupted stretch of that thread's loop, however small each is. That stretch is what
// `holds` records (the realtime path asks that a turn's writes never hold the loop for more than
// a millisecond). `waits` records, per write, the time from being queued to its callback
// running: the write lock held by another thread (the chunk-apply thread) or process shows there.
import { createHistogram, performance, type RecordableHistogram } from 'node:perf_hooks'

export interface HoldSummary {
  count: number
  p50: number
  p99: number
  max: number
}

export class WriteHolds {
  /** Nanoseconds per stretch (a perf_hooks histogram: percentiles without keeping samples). */
  readonly holds: RecordableHistogram = createHistogram()
  /** Nanoseconds from a write being queued to its callback running. */
  readonly waits: RecordableHistogram = createHistogram()
  private start = -1
  private end = 0
  /** Queued by the first callback of a stretch: lmdb-js returns to the loop before microtasks run. */
  private readonly close = () => {
    this.holds.record(Math.max(1, Math.round((this.end - this.start) * 1e6)))
    this.start = -1
  }

  /** Runs one transaction callback, timing the stretch it belongs to and (given when it was queued) its wait. */
  run<R>(work: () => R, queuedAt?: number): R {
    const now = performance.now()
    if (queuedAt !== undefined) this.waits.record(Math.max(1, Math.round((now - queuedAt) * 1e6)))
    if (this.start < 0) {
      this.start = now
      queueMicrotask(this.close)
    }
    try {
      return work()
    } finally {
      this.end = performance.now()
    }
  }

  /** Stretches and waits since the last reset: count, p50/p99/max in milliseconds. */
  summary(): HoldSummary & { waits: HoldSummary } {
    const of = (h: RecordableHistogram): HoldSummary => {
      const ms = (ns: number) => (h.count === 0 ? 0 : Math.round(ns / 1e3) / 1e3)
      return { count: h.count, p50: ms(h.percentile(50)), p99: ms(h.percentile(99)), max: ms(h.max) }
    }
    return { ...of(this.holds), waits: of(this.waits) }
  }

  reset() {
    this.holds.reset()
    this.waits.reset()
  }
}
