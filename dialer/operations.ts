// Operation resources (spec 2.3): contact loads and batch lifecycle moves. Each document
// carries its own absolute expiry; a TTL index deletes it, and every read filters on it so an
// expired operation is never returned even before the TTL monitor runs.
import type { Collection, Store } from '../platform/store/index.js'
import type { Clock } from '../platform/clock.js'
import { newOrderedId } from '../platform/ids.js'
import { COLLECTIONS } from './collections.js'

const HOUR = 60 * 60 * 1000
export const RETENTION = {
  load: 6 * HOUR,
  lifecycle: HOUR,
  lifecycleAfterFinish: 10 * 60 * 1000,
  // The record that a person was erased (counts only) is what an account shows its auditor.
  erasure: 30 * 24 * HOUR,
}
export const MAX_ERROR_SAMPLE = 20

export type OperationStatus = 'pending' | 'running' | 'succeeded' | 'partial' | 'failed'
export type LifecycleType = 'batch.start' | 'batch.stop' | 'batch.archive' | 'batch.delete'

export interface LoadCounts {
  insertedCount: number
  invalidCount: number
  duplicateCount: number
  updatedCount: number
  recontactedCount: number
}

export interface OperationError {
  identifier: string
  reason: string
}

interface OperationBase {
  _id: string
  accountId: string
  status: OperationStatus
  createdAt: Date
  completedAt: Date | null
  expiresAt: Date
}

export interface LoadOperationDoc extends OperationBase, LoadCounts {
  kind: 'contacts.load'
  batchId: string
  type: 'contacts.insert' | 'contacts.import'
  requestedCount: number
  totalChunks: number
  /** False while a streaming import may still add chunks. */
  sealed: boolean
  chunksCompleted: number
  countedChunks: number[]
  errors: OperationError[]
  actor: { id: string; name?: string }
}

export interface LifecycleOperationDoc extends OperationBase {
  kind: 'batch.lifecycle'
  batchId: string
  type: LifecycleType
  stage: 'queued' | 'applying' | 'done'
  progress: number
  error: string | null
}

/** What an erasure removed (or, for blocks and session records, stripped of the person). */
export interface ErasureCounts {
  contacts: number
  attempts: number
  /** Blocks at the person's addresses: kept as blocks, without the address or reason. */
  blockedAddresses: number
  /** Live sessions that named the person, closed (their history and checkpoint dropped). */
  sessions: number
  /** Session records whose last message was removed. */
  sessionRecords: number
  importErrors: number
  /** Entries naming the person's identifiers in the error samples of contact loads. */
  operationErrors: number
  webhookReports: number
  /** Stored answers of idempotent requests that held the person's data. */
  idempotencyRecords: number
}

/** Who the erasure is for, kept only while it runs (cleared by the write that ends it). */
export interface ErasureTerms {
  /** Normalized, with their type. */
  addresses: { type: 'phone' | 'email' | 'whatsapp'; address: string }[]
  identifiers: string[]
  /** Found in the first step, before anything is deleted, so that a redelivery erases the same. */
  expanded?: { addresses: string[]; identifiers: string[]; contactIds: string[]; attemptIds: string[]; contactKeys: [batchId: string, identifier: string][] }
}

export interface ErasureOperationDoc extends OperationBase {
  kind: 'person.erasure'
  type: 'person.erase'
  counts: ErasureCounts
  error: string | null
  /** Present while the erasure runs. */
  terms?: ErasureTerms
  actor: { id: string; name?: string }
}

export type OperationDoc = LoadOperationDoc | LifecycleOperationDoc | ErasureOperationDoc

export const emptyErasureCounts = (): ErasureCounts => ({
  contacts: 0,
  attempts: 0,
  blockedAddresses: 0,
  sessions: 0,
  sessionRecords: 0,
  importErrors: 0,
  operationErrors: 0,
  webhookReports: 0,
  idempotencyRecords: 0,
})

const ZERO_COUNTS: LoadCounts = { insertedCount: 0, invalidCount: 0, duplicateCount: 0, updatedCount: 0, recontactedCount: 0 }

export function loadOutcome(op: LoadCounts & { requestedCount: number }): OperationStatus {
  const entered = op.insertedCount + op.updatedCount + op.recontactedCount
  if (op.requestedCount > 0 && op.invalidCount === op.requestedCount) return 'failed'
  return entered === op.requestedCount ? 'succeeded' : 'partial'
}

export class Operations {
  readonly docs: Collection<OperationDoc>
  constructor(store: Store, private readonly clock: Clock) {
    this.docs = store.collection<OperationDoc>(COLLECTIONS.operations)
  }

  private now() {
    return new Date(this.clock.now())
  }

  async createLoad(input: {
    accountId: string
    batchId: string
    type: LoadOperationDoc['type']
    requestedCount: number
    totalChunks: number
    sealed: boolean
    actor: LoadOperationDoc['actor']
  }): Promise<LoadOperationDoc> {
    const now = this.now()
    const doc: LoadOperationDoc = {
      _id: newOrderedId(),
      kind: 'contacts.load',
      status: 'pending',
      chunksCompleted: 0,
      countedChunks: [],
      errors: [],
      createdAt: now,
      completedAt: null,
      expiresAt: new Date(now.getTime() + RETENTION.load),
      ...ZERO_COUNTS,
      ...input,
    }
    await this.docs.insertOne(doc)
    return doc
  }

  async createLifecycle(input: { accountId: string; batchId: string; type: LifecycleType }): Promise<LifecycleOperationDoc> {
    const now = this.now()
    const doc: LifecycleOperationDoc = {
      _id: newOrderedId(),
      kind: 'batch.lifecycle',
      status: 'pending',
      stage: 'queued',
      progress: 0,
      error: null,
      createdAt: now,
      completedAt: null,
      expiresAt: new Date(now.getTime() + RETENTION.lifecycle),
      ...input,
    }
    await this.docs.insertOne(doc)
    return doc
  }

  async createErasure(input: { accountId: string; terms: ErasureTerms; actor: ErasureOperationDoc['actor'] }): Promise<ErasureOperationDoc> {
    const now = this.now()
    const doc: ErasureOperationDoc = {
      _id: newOrderedId(),
      kind: 'person.erasure',
      type: 'person.erase',
      status: 'pending',
      counts: emptyErasureCounts(),
      error: null,
      createdAt: now,
      completedAt: null,
      expiresAt: new Date(now.getTime() + RETENTION.erasure),
      ...input,
    }
    await this.docs.insertOne(doc)
    return doc
  }

  /** A live (not expired) operation of this account, or null. */
  async find(accountId: string, operationId: string): Promise<OperationDoc | null> {
    return this.docs.findOne({ _id: operationId, accountId, expiresAt: { $gt: this.now() } })
  }

  async findById(operationId: string): Promise<OperationDoc | null> {
    return this.docs.findOne({ _id: operationId, expiresAt: { $gt: this.now() } })
  }

  async markRunning(operationId: string) {
    await this.docs.updateOne({ _id: operationId, status: 'pending' }, { $set: { status: 'running' } })
  }

  /**
   * Adds one chunk's counters exactly once: the chunk index is recorded in the same atomic
   * single-document update, so a redelivered chunk matches nothing. Returns the updated
   * operation, or null when the chunk was already counted.
   */
  async countChunk(operationId: string, index: number, counts: LoadCounts, errors: OperationError[]): Promise<LoadOperationDoc | null> {
    return (await this.docs.findOneAndUpdate(
      { _id: operationId, countedChunks: { $ne: index } },
      {
        $inc: { chunksCompleted: 1, ...counts },
        $addToSet: { countedChunks: index },
        $push: { errors: { $each: errors.slice(0, MAX_ERROR_SAMPLE), $slice: MAX_ERROR_SAMPLE } },
        $set: { status: 'running' },
      },
      { returnDocument: 'after' },
    )) as LoadOperationDoc | null
  }

  /** Streaming imports learn their chunk count at the end. */
  async seal(operationId: string, totalChunks: number, requestedCount: number) {
    await this.docs.updateOne({ _id: operationId }, { $set: { sealed: true, totalChunks, requestedCount } })
  }

  /** Closes a load whose chunks are all counted; true for the single caller that closed it. */
  async closeLoad(op: LoadOperationDoc, status?: OperationStatus): Promise<boolean> {
    const r = await this.docs.updateOne(
      { _id: op._id, status: { $in: ['pending', 'running'] } },
      { $set: { status: status ?? loadOutcome(op), completedAt: this.now() } },
    )
    return r.modifiedCount === 1
  }

  async advanceLifecycle(operationId: string, stage: LifecycleOperationDoc['stage'], progress: number) {
    await this.docs.updateOne({ _id: operationId }, { $set: { status: 'running', stage, progress } })
  }

  async finishLifecycle(op: LifecycleOperationDoc, status: 'succeeded' | 'failed', error: string | null = null) {
    const now = this.now()
    const expiresAt = new Date(Math.min(op.createdAt.getTime() + RETENTION.lifecycle, now.getTime() + RETENTION.lifecycleAfterFinish))
    await this.docs.updateOne(
      { _id: op._id, status: { $in: ['pending', 'running'] } },
      { $set: { status, stage: 'done', progress: 100, completedAt: now, expiresAt, error } },
    )
  }

  /** Contacts requested by this account's loads that are not yet applied (reserved against the cap). */
  async reservedContacts(accountId: string): Promise<number> {
    // Summed here over the counters only (a $group would evaluate an expression per document:
    // with a few hundred loads open, milliseconds of the event loop on every new load).
    const open = await this.docs.find(
      { accountId, kind: 'contacts.load', status: { $in: ['pending', 'running'] } },
      { projection: { requestedCount: 1, insertedCount: 1, invalidCount: 1, duplicateCount: 1, updatedCount: 1, recontactedCount: 1 } },
    )
    let reserved = 0
    for (const op of open as LoadOperationDoc[]) {
      reserved += op.requestedCount - (op.insertedCount + op.invalidCount + op.duplicateCount + op.updatedCount + op.recontactedCount)
    }
    return reserved
  }
}

export function operationView(op: OperationDoc) {
  if (op.kind === 'person.erasure') {
    return {
      kind: op.kind,
      operationId: op._id,
      type: op.type,
      status: op.status,
      counts: op.counts,
      error: op.error,
      createdAt: op.createdAt.toISOString(),
      completedAt: op.completedAt ? op.completedAt.toISOString() : null,
      expiresAt: op.expiresAt.toISOString(),
    }
  }
  const common = {
    kind: op.kind,
    operationId: op._id,
    batchId: op.batchId,
    type: op.type,
    status: op.status,
  }
  if (op.kind === 'contacts.load') {
    return {
      ...common,
      requestedCount: op.requestedCount,
      totalChunks: op.totalChunks,
      chunksCompleted: op.chunksCompleted,
      insertedCount: op.insertedCount,
      invalidCount: op.invalidCount,
      duplicateCount: op.duplicateCount,
      updatedCount: op.updatedCount,
      recontactedCount: op.recontactedCount,
      errors: op.errors,
      createdAt: op.createdAt.toISOString(),
      completedAt: op.completedAt ? op.completedAt.toISOString() : null,
      expiresAt: op.expiresAt.toISOString(),
    }
  }
  return {
    ...common,
    stage: op.stage,
    progress: op.progress,
    error: op.error,
    createdAt: op.createdAt.toISOString(),
    completedAt: op.completedAt ? op.completedAt.toISOString() : null,
    expiresAt: op.expiresAt.toISOString(),
  }
}
