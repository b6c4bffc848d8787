// Durable work queues for the embedded mode, kept in the store's LMDB environment (one database
// `q:<name>` per queue, messages under increasing sequence numbers):
//   - publish() resolves once the message is committed, so what a 202 acknowledged is on disk;
//   - a message is removed only after its handler resolved; one whose handler threw is
//     redelivered after a short backoff with its attempt count stored, and dropped to the log
//     after maxDeliveries (as MemoryBus does), so a poison message cannot spin forever;
//   - at start-up every message still stored (pending, or in flight when the process died) is
//     delivered again, in order. Delivery is therefore at-least-once, as on NATS: handlers are
//     idempotent (the dialer's chunk application is).
// Only the sequence numbers of waiting messages are held in memory; bodies are read from the
// map when delivered. One process consumes a queue (embedded mode is one node; NATS_URL for more).
import type { Database } from 'lmdb'
import type { Bus, ConsumeOptions, Delivery, WorkQueue } from './types.js'
import type { Logger } from '../logger.js'
import type { LmdbStore } from '../store/lmdb-store.js'

interface Stored<T> {
  data: T
  attempt: number
}

class LmdbQueue<T> implements WorkQueue<T> {
  private readonly db: Database<Stored<T>, number>
  /** Sequence numbers of messages waiting for a worker, in order. */
  private readonly pending: number[] = []
  private handler?: (delivery: Delivery<T>) => Promise<void>
  private options: ConsumeOptions = { concurrency: 1 }
  private running = 0
  private idle: (() => void)[] = []
  private readonly retries = new Set<NodeJS.Timeout>()
  private next: number

  constructor(readonly name: string, store: LmdbStore, private readonly logger: Logger) {
    this.db = store.database<Stored<T>>(`q:${name}`) as unknown as Database<Stored<T>, number>
    for (const key of this.db.getKeys({})) this.pending.push(key)
    this.next = (this.pending[this.pending.length - 1] ?? 0) + 1
    if (this.pending.length > 0) logger.info('work queue resumed with stored messages', { queue: name, messages: this.pending.length })
  }

  async publish(message: T) {
    const key = this.next++
    await this.db.put(key, { data: message, attempt: 1 })
    this.pending.push(key)
    this.pump()
  }

  depth() {
    return this.pending.length
  }

  consume(handler: (delivery: Delivery<T>) => Promise<void>, options: ConsumeOptions) {
    this.handler = handler
    this.options = options
    queueMicrotask(() => this.pump())
    return async () => {
      this.handler = undefined
      for (const timer of this.retries) clearTimeout(timer)
      this.retries.clear()
      if (this.running > 0) await new Promise<void>(resolve => this.idle.push(resolve))
    }
  }

  private pump() {
    while (this.handler && this.running < this.options.concurrency && this.pending.length > 0) {
      const key = this.pending.shift()!
      const stored = this.db.get(key)
      if (!stored) continue
      this.running++
      void this.run(this.handler, key, stored)
    }
  }

  private async run(handler: (delivery: Delivery<T>) => Promise<void>, key: number, stored: Stored<T>) {
    try {
      await handler({ data: stored.data, attempt: stored.attempt })
      await this.db.remove(key)
    } catch (error) {
      await this.failed(key, stored, error).catch(failure => this.logger.error('work queue could not record a failed delivery', { queue: this.name, error: failure }))
    } finally {
      this.running--
      if (this.running === 0) for (const resolve of this.idle.splice(0)) resolve()
      this.pump()
    }
  }

  private async failed(key: number, stored: Stored<T>, error: unknown) {
    const max = this.options.maxDeliveries ?? 5
    if (stored.attempt >= max) {
      await this.db.remove(key)
      this.logger.error('work message dropped after max deliveries', { queue: this.name, error })
      return
    }
    await this.db.put(key, { data: stored.data, attempt: stored.attempt + 1 })
    // No handler any more (stopping): the stored message waits for the next start.
    if (!this.handler) return
    const timer = setTimeout(() => {
      this.retries.delete(timer)
      this.pending.push(key)
      this.pump()
    }, 50 * 2 ** stored.attempt)
    timer.unref()
    this.retries.add(timer)
  }
}

export class LmdbBus implements Bus {
  private readonly queues = new Map<string, LmdbQueue<any>>()
  constructor(private readonly store: LmdbStore, private readonly logger: Logger) {}

  queue<T>(name: string): WorkQueue<T> {
    let queue = this.queues.get(name)
    if (!queue) {
      queue = new LmdbQueue<T>(name, this.store, this.logger)
      this.queues.set(name, queue)
    }
    return queue
  }

  /** The store owns the environment and closes it. */
  async close() {}
}
