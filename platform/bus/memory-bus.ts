// In-process work queues for the embedded default: FIFO, bounded concurrency, redelivery of
// a message whose handler threw (with a short backoff), dead-lettered to the log after
// maxDeliveries so a poison message cannot spin forever.
import type { Bus, ConsumeOptions, Delivery, WorkQueue } from './types.js'
import type { Logger } from '../logger.js'
import { yieldToLoop } from '../background.js'

class MemoryQueue<T> implements WorkQueue<T> {
  private readonly pending: Delivery<T>[] = []
  private handler?: (delivery: Delivery<T>) => Promise<void>
  private options: ConsumeOptions = { concurrency: 1 }
  private running = 0
  private idle: (() => void)[] = []

  constructor(readonly name: string, private readonly logger: Logger) {}

  async publish(message: T) {
    this.pending.push({ data: structuredClone(message), attempt: 1 })
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
      if (this.running > 0) await new Promise<void>(resolve => this.idle.push(resolve))
    }
  }

  private pump() {
    while (this.handler && this.running < this.options.concurrency && this.pending.length > 0) {
      const delivery = this.pending.shift()!
      this.running++
      void this.run(this.handler, delivery)
    }
  }

  private async run(handler: (delivery: Delivery<T>) => Promise<void>, delivery: Delivery<T>) {
    try {
      // Background work starts in a macrotask of its own, after pending I/O, not inside the
      // request that published it (see platform/background.ts).
      await yieldToLoop()
      await handler(delivery)
    } catch (error) {
      const max = this.options.maxDeliveries ?? 5
      if (delivery.attempt < max) {
        const retry = { data: delivery.data, attempt: delivery.attempt + 1 }
        setTimeout(() => {
          this.pending.push(retry)
          this.pump()
        }, 50 * 2 ** delivery.attempt).unref()
      } else {
        this.logger.error('work message dropped after max deliveries', { queue: this.name, error })
      }
    } finally {
      this.running--
      if (this.running === 0) for (const resolve of this.idle.splice(0)) resolve()
      this.pump()
    }
  }
}

export class MemoryBus implements Bus {
  private readonly queues = new Map<string, MemoryQueue<any>>()
  constructor(private readonly logger: Logger) {}

  queue<T>(name: string): WorkQueue<T> {
    let queue = this.queues.get(name)
    if (!queue) {
      queue = new MemoryQueue<T>(name, this.logger)
      this.queues.set(name, queue)
    }
    return queue
  }

  async close() {}
}
