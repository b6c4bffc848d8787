// Batch lifecycle moves (start, stop, archive, delete). The status changes atomically when the
// request is accepted (so an illegal move is a 409 at once); the follow-up work runs in the
// background and is reported by a `batch.lifecycle` operation.
import type { Principal } from '../platform/principal.js'
import type { Platform } from '../platform/index.js'
import type { Delivery, WorkQueue } from '../platform/bus/index.js'
import { ActiveContacts } from './active-contacts.js'
import { type Batches, MOVES } from './batches.js'
import type { BatchLog } from './batch-log.js'
import type { LifecycleOperationDoc, LifecycleType, Operations } from './operations.js'
import { operationPath } from './loads.js'
import type { QueueWorker } from './queue-workers.js'

export const LIFECYCLE_QUEUE = 'dialer.batches.lifecycle'
const MAX_DELIVERIES = 5

interface LifecycleMessage {
  operationId: string
}

export class BatchLifecycle {
  readonly queue: WorkQueue<LifecycleMessage>
  readonly worker: QueueWorker<LifecycleMessage>

  constructor(
    private readonly platform: Platform,
    private readonly batches: Batches,
    private readonly operations: Operations,
    private readonly log: BatchLog,
  ) {
    this.queue = platform.bus.queue<LifecycleMessage>(LIFECYCLE_QUEUE, { message: 'queue.dialer.lifecycle' })
    this.worker = { queue: this.queue, handle: d => this.run(d), options: { concurrency: 2, maxDeliveries: MAX_DELIVERIES } }
  }

  async request(principal: Principal, batchId: string, type: LifecycleType) {
    const batch = await this.batches.move(principal.accountId, batchId, type)
    await this.log.append({
      accountId: principal.accountId,
      batchId: batch._id,
      operation: MOVES[type].log,
      actor: { id: principal.keyId, name: principal.keyName },
      details: { reason: 'manual' },
    })
    const op = await this.operations.createLifecycle({ accountId: principal.accountId, batchId: batch._id, type })
    this.platform.metrics.operationsInFlight.inc({ kind: op.kind })
    await this.queue.publish({ operationId: op._id })
    return { operationId: op._id, operationUrl: operationPath(op._id), status: 'queued' as const, batchId: batch._id, batchStatus: batch.status }
  }

  private async run(delivery: Delivery<LifecycleMessage>) {
    const op = await this.operations.findById(delivery.data.operationId)
    if (!op || op.kind !== 'batch.lifecycle' || op.status === 'succeeded' || op.status === 'failed') return
    try {
      await this.operations.advanceLifecycle(op._id, 'applying', 10)
      await this.apply(op)
      await this.operations.finishLifecycle(op, 'succeeded')
    } catch (error) {
      if (delivery.attempt < MAX_DELIVERIES) throw error
      await this.operations.finishLifecycle(op, 'failed', (error as Error).message)
    }
    this.platform.metrics.operationsInFlight.dec({ kind: op.kind })
  }

  private async apply(op: LifecycleOperationDoc) {
    if (op.type === 'batch.delete') {
      // Contacts go first; the batch disappears (404) once nothing of it is left.
      await new ActiveContacts(this.platform.store).deleteBatch(op.accountId, op.batchId)
      await this.batches.setStatus(op.batchId, 'deleting', 'deleted')
    }
    // start / stop / archive take effect with the status change itself; the dialing
    // scheduler reads the batch status on every selection cycle.
  }
}
