// The dialer's background workers: each module says which queue it consumes, with which handler
// and options (its maxDeliveries matches its handler's retry logic); this one place starts and
// stops them all.
import type { ConsumeOptions, Delivery, WorkQueue } from '../platform/bus/index.js'

export interface QueueWorker<T> {
  queue: WorkQueue<T>
  handle: (delivery: Delivery<T>) => Promise<void>
  options: ConsumeOptions
}

export class QueueWorkers {
  private stops: (() => Promise<void>)[] = []

  // `any`: the table mixes message types; each entry was checked against its own queue.
  constructor(private readonly workers: QueueWorker<any>[]) {}

  start() {
    this.stops = this.workers.map(w => w.queue.consume(w.handle, w.options))
  }

  /** In-flight handlers finish, one queue after the other. */
  async stop() {
    for (const stop of this.stops.splice(0)) await stop()
  }
}
