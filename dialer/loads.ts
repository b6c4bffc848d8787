// Contact loads: accepted synchronously (validate, check the account cap, create the
// operation, publish chunks) and applied in the background by chunk workers: each chunk by
// dialer/chunk-application.ts, on a thread beside the embedded store (dialer/chunk-thread.ts)
// or on the loop (MongoDB, or when that thread is unavailable).
import { Invalid, Unavailable } from '../platform/errors.js'
import { yieldToLoop } from '../platform/background.js'
import type { Principal } from '../platform/principal.js'
import type { Platform } from '../platform/index.js'
import type { Delivery, WorkQueue } from '../platform/bus/index.js'
import type { Batches } from './batches.js'
import type { BatchLog } from './batch-log.js'
import type { LoadOperationDoc, Operations } from './operations.js'
import type { QueueWorker } from './queue-workers.js'
import { ActiveContacts } from './active-contacts.js'
import { ChunkApplication, chunkContacts, emptyCounts, type ChunkMessage } from './chunk-application.js'
import type { ChunkThread } from './chunk-thread.js'
import type { PreparedLoad } from './load-chunks.js'

export type { ChunkMessage, QueuedContact } from './chunk-application.js'

export const LOAD_QUEUE = 'dialer.contacts.chunks'
const MAX_DELIVERIES = 5

export interface LoadAck {
  operationId: string
  operationUrl: string
  status: 'queued'
  contactsReceived: number
  chunksPublished: number
  message: string
}

export const operationPath = (operationId: string) => `/dialer/v1/batches/operations/${operationId}`

export class ContactLoads {
  readonly queue: WorkQueue<ChunkMessage>
  readonly worker: QueueWorker<ChunkMessage>
  /** The account cap's counter of active contacts. */
  readonly active: ActiveContacts
  private readonly application: ChunkApplication

  /** `thread`: where chunks are applied when it is up (the embedded store); else on this loop. */
  constructor(
    private readonly platform: Platform,
    private readonly batches: Batches,
    private readonly operations: Operations,
    log: BatchLog,
    private readonly thread?: ChunkThread,
  ) {
    this.active = new ActiveContacts(platform.store)
    this.application = new ChunkApplication({ store: platform.store, clock: platform.clock, batches, operations, log, active: this.active })
    this.queue = platform.bus.queue<ChunkMessage>(LOAD_QUEUE, { message: 'queue.dialer.chunk' })
    this.worker = {
      queue: this.queue,
      handle: delivery => this.handle(delivery),
      options: { concurrency: platform.config.dialer.workerConcurrency, maxDeliveries: MAX_DELIVERIES },
    }
  }

  /** Queues a validated load (dialer/load-chunks.ts): its contacts arrive as chunks of JSON text, never read here. */
  async accept(principal: Principal, batchId: string, load: PreparedLoad): Promise<LoadAck> {
    // The loop's steps (the cap check reads the account's open loads; the operation and the
    // chunks are written) are given back between: pending I/O (live sessions) runs first.
    await yieldToLoop()
    const batch = await this.batches.getWritable(principal.accountId, batchId)
    await this.checkCap(principal.accountId, load.count)
    const op = await this.operations.createLoad({
      accountId: principal.accountId,
      batchId: batch._id,
      type: 'contacts.insert',
      requestedCount: load.count,
      totalChunks: load.chunks.length,
      sealed: true,
      actor: { id: principal.keyId, name: principal.keyName },
    })
    await yieldToLoop()
    await this.publishAll(op, load.chunks.map(contacts => ({ contacts, rejected: [] })))
    return {
      operationId: op._id,
      operationUrl: operationPath(op._id),
      status: 'queued',
      contactsReceived: load.count,
      chunksPublished: load.chunks.length,
      message: 'Contacts queued for processing',
    }
  }

  /** Publishes chunks; if the queue refuses, the operation fails rather than hanging. */
  async publishAll(op: LoadOperationDoc, chunks: Pick<ChunkMessage, 'contacts' | 'rejected'>[], firstIndex = 0) {
    this.platform.metrics.operationsInFlight.inc({ kind: op.kind })
    try {
      // Side by side: the embedded queue commits them in one transaction (each keeps its index).
      await Promise.all(chunks.map((chunk, offset) => this.queue.publish({ operationId: op._id, accountId: op.accountId, batchId: op.batchId, index: firstIndex + offset, ...chunk })))
    } catch (error) {
      await this.operations.closeLoad(op, 'failed')
      this.platform.metrics.operationsInFlight.dec({ kind: op.kind })
      throw new Unavailable('QUEUE_UNAVAILABLE', 'The load could not be queued; retry with the same Idempotency-Key')
    }
    this.platform.metrics.queueDepth.set({ queue: LOAD_QUEUE }, this.queue.depth())
  }

  private async checkCap(accountId: string, attempting: number) {
    const maxContacts = this.platform.config.dialer.maxActiveContacts
    const [active, reserved] = await Promise.all([
      this.active.count(accountId),
      this.operations.reservedContacts(accountId),
    ])
    const currentActive = active + reserved
    const exceededBy = currentActive + attempting - maxContacts
    if (exceededBy > 0) {
      const room = Math.max(0, maxContacts - currentActive)
      throw new Invalid(
        'CONTACT_LIMIT_EXCEEDED',
        `The account may have at most ${maxContacts} active contacts; ${currentActive} are active or queued, so at most ${room} more can be added`,
        { maxContacts, currentActive, attempting, exceededBy },
      )
    }
  }

  private async handle(delivery: Delivery<ChunkMessage>) {
    const message = delivery.data
    try {
      // The thread answers null when it is not there (failed to start, or died meanwhile): the
      // chunk is applied here instead (every step is idempotent, whatever the thread did of it).
      const inThread = await this.thread?.apply(message)
      if (inThread != null) this.platform.metrics.chunksAppliedOffLoop.inc()
      const closed = inThread ?? (await this.application.process(message))
      if (closed) this.platform.metrics.operationsInFlight.dec({ kind: 'contacts.load' })
      this.platform.metrics.chunksProcessed.inc({ outcome: 'ok' })
    } catch (error) {
      if (delivery.attempt < MAX_DELIVERIES) {
        this.platform.metrics.chunksProcessed.inc({ outcome: 'retry' })
        throw error
      }
      // Out of retries: the chunk is counted as rejected so the operation still finishes.
      this.platform.logger.error('contact chunk failed permanently', { operationId: message.operationId, index: message.index, error })
      this.platform.metrics.chunksProcessed.inc({ outcome: 'failed' })
      const reason = `PROCESSING_FAILED: ${(error as Error).message}`
      const contacts = chunkContacts(message)
      const counts = { ...emptyCounts(), invalidCount: contacts.length + message.rejected.length }
      await this.operations.countChunk(message.operationId, message.index, counts, contacts.map(c => ({ identifier: c.identifier, reason })))
      await this.tryFinish(message.operationId)
    } finally {
      this.platform.metrics.queueDepth.set({ queue: LOAD_QUEUE }, this.queue.depth())
    }
  }

  /** Applies a chunk here, on this thread (tests use it to replay deliveries). */
  process(message: ChunkMessage): Promise<boolean> {
    return this.application.process(message)
  }

  /** Closes the operation once all its chunks are counted (CSV imports call it after sealing). */
  async tryFinish(operationId: string) {
    if (await this.application.tryFinish(operationId)) this.platform.metrics.operationsInFlight.dec({ kind: 'contacts.load' })
  }
}

