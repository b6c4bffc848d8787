// The work-queue seam. Embedded mode delivers in-process; the NATS implementation (JetStream
// work-queue streams with explicit ack) drops in behind the same interface.

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

export interface Bus {
  queue<T>(name: string): WorkQueue<T>
  close(): Promise<void>
}
