// The work-queue seam. Embedded mode delivers in-process; the NATS implementation (JetStream
// work-queue streams with explicit ack) drops in behind the same interface.
import type { WireMessage } from '../../schemas/wire.js'

export interface Delivery<T> {
  data: T
  /** 1 on first delivery; a handler that throws is redelivered until maxDeliveries. */
  attempt: number
}

export interface ConsumeOptions {
  concurrency: number
  maxDeliveries?: number
}

export interface WorkQueue<T> {
  readonly name: string
  publish(message: T): Promise<void>
  /** Starts consuming; resolves the returned function to stop (in-flight handlers finish). */
  consume(handler: (delivery: Delivery<T>) => Promise<void>, options: ConsumeOptions): () => Promise<void>
  depth(): number
}

export interface QueueOptions {
  /**
   * The schema of the queue's messages (schemas/wire.ts): where they cross a process boundary
   * (NATS) each is checked against it when taken, and refused whole when it does not match.
   */
  message?: WireMessage
}

export interface Bus {
  queue<T>(name: string, options?: QueueOptions): WorkQueue<T>
  close(): Promise<void>
}
