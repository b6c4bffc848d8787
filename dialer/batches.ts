// Batches and their lifecycle. The state machine is a table so a supervisor can read it;
// every move is one conditional update, so two concurrent requests cannot both win.
import { NotFound, InvalidState } from '../platform/errors.js'
import type { Collection, Store } from '../platform/store/index.js'
import type { Clock } from '../platform/clock.js'
import { newOrderedId } from '../platform/ids.js'
import { type Actor, COLLECTIONS } from './collections.js'
import type { LifecycleType } from './operations.js'

export type BatchStatus = 'created' | 'running' | 'stopped' | 'completed' | 'archived' | 'deleting' | 'deleted'
export type DuplicateStrategy = 'skip' | 'merge' | 'replace'
export type UploadStatus = 'none' | 'pending' | 'processing' | 'completed' | 'failed'

export interface BatchDoc {
  _id: string
  accountId: string
  name: string
  channel: 'phone' | 'email' | 'whatsapp'
  source: 'api' | 'csv'
  duplicateStrategy: DuplicateStrategy
  rules: Record<string, unknown>
  status: BatchStatus
  uploadStatus: UploadStatus
  uploadProgress: number
  totalContacts: number
  tempCsvKey: string | null
  importOperationId: string | null
  importErrorCount: number
  createdBy: Actor
  createdAt: Date
  updatedAt: Date
  /** When it last finished (completed, archived or deleted): its retention counts from here; null or absent while not finished. */
  finishedAt?: Date | null
  /** Requests to bring its contacts' retention stamps in line with finishedAt (dialer/retention.ts); absent: none. */
  stampsPending?: number
  /** Set with stampsPending: what puts the batch in the partial index a pass reads. */
  stampsWanted?: true
  /** When the contacts its retention left behind were removed (dialer/retention.ts). */
  purgedAt?: Date
}

export interface Move {
  from: BatchStatus[]
  to: BatchStatus
  log: 'started' | 'stopped' | 'archived' | 'deleted'
}

/** The batch lifecycle: which status each move starts from and where it leads. */
export const MOVES: Record<LifecycleType, Move> = {
  // A completed batch starts again (contacts added or recontacted after it completed).
  'batch.start': { from: ['created', 'stopped', 'completed'], to: 'running', log: 'started' },
  'batch.stop': { from: ['running'], to: 'stopped', log: 'stopped' },
  'batch.archive': { from: ['created', 'stopped', 'completed'], to: 'archived', log: 'archived' },
  'batch.delete': { from: ['created', 'stopped', 'completed', 'archived'], to: 'deleting', log: 'deleted' },
}

/** Statuses in which contacts may still be loaded. */
const WRITABLE: BatchStatus[] = ['created', 'running', 'stopped', 'completed']
const HIDDEN: BatchStatus[] = ['deleted']

export class Batches {
  readonly docs: Collection<BatchDoc>
  /** Told when a batch finished or was started again (dialer/retention.ts stamps its contacts). */
  onFinishChanged?: () => void
  constructor(store: Store, private readonly clock: Clock) {
    this.docs = store.collection<BatchDoc>(COLLECTIONS.batches)
  }

  async create(input: Pick<BatchDoc, 'accountId' | 'name' | 'channel' | 'source' | 'duplicateStrategy' | 'rules' | 'tempCsvKey' | 'createdBy'>) {
    const now = new Date(this.clock.now())
    const doc: BatchDoc = {
      _id: newOrderedId(),
      status: 'created',
      uploadStatus: input.tempCsvKey ? 'pending' : 'none',
      uploadProgress: 0,
      totalContacts: 0,
      importOperationId: null,
      importErrorCount: 0,
      createdAt: now,
      updatedAt: now,
      ...input,
    }
    await this.docs.insertOne(doc)
    return doc
  }

  /** The account's batch; a missing, deleted or foreign batch is the same 404. */
  async get(accountId: string, batchId: string): Promise<BatchDoc> {
    const doc = await this.docs.findOne({ _id: batchId, accountId, status: { $nin: HIDDEN } })
    if (!doc) throw new NotFound('NOT_FOUND', 'Batch not found')
    return doc
  }

  async getWritable(accountId: string, batchId: string): Promise<BatchDoc> {
    const batch = await this.get(accountId, batchId)
    if (!WRITABLE.includes(batch.status)) {
      throw new InvalidState('BATCH_NOT_WRITABLE', `Contacts cannot be added to a batch in status ${batch.status}`, { status: batch.status })
    }
    return batch
  }

  async list(accountId: string, filter: { status?: string }, limit: number, offset: number) {
    const query: Record<string, unknown> = { accountId, status: filter.status ?? { $nin: HIDDEN } }
    const [docs, total] = await Promise.all([
      this.docs.find(query, { sort: { createdAt: -1, _id: -1 }, skip: offset, limit }),
      this.docs.countDocuments(query),
    ])
    return { data: docs.map(batchView), total }
  }

  /** Applies a lifecycle move atomically, or explains with 409 why it is not allowed now. */
  async move(accountId: string, batchId: string, type: LifecycleType): Promise<BatchDoc> {
    const move = MOVES[type]
    const at = new Date(this.clock.now())
    const moved = await this.docs.findOneAndUpdate(
      { _id: batchId, accountId, status: { $in: move.from } },
      { $set: { status: move.to, updatedAt: at } },
      { returnDocument: 'after' },
    )
    if (moved) {
      // Retention counts from when a batch finishes; a completed batch started again is not finished.
      if (move.to === 'archived' || move.to === 'deleting') await this.finished(batchId, null, at)
      else if (move.to === 'running' && moved.finishedAt) await this.reopened(batchId, moved.finishedAt)
      return moved
    }
    const current = await this.get(accountId, batchId)
    throw new InvalidState('INVALID_BATCH_TRANSITION', `Cannot ${type.slice('batch.'.length)} a batch in status ${current.status}`, {
      status: current.status,
      allowedFrom: move.from,
    })
  }

  /**
   * The batch finished at `at`, unless it had already (`since`: the finish it had, which a load
   * into it moves on: its retention counts from the last thing done to it). Its contacts' stamps
   * are brought in line by dialer/retention.ts.
   */
  async finished(batchId: string, since: Date | null, at: Date) {
    const changed = await this.docs.updateOne({ _id: batchId, finishedAt: since }, { $set: { finishedAt: at, stampsWanted: true }, $inc: { stampsPending: 1 }, $unset: { purgedAt: '' } })
    if (changed.modifiedCount > 0) this.onFinishChanged?.()
  }

  /** A finished batch started again: no longer finished (unless it finished again meanwhile). */
  private async reopened(batchId: string, finishedAt: Date) {
    const changed = await this.docs.updateOne({ _id: batchId, status: 'running', finishedAt }, { $set: { finishedAt: null, stampsWanted: true }, $inc: { stampsPending: 1 }, $unset: { purgedAt: '' } })
    if (changed.modifiedCount > 0) this.onFinishChanged?.()
  }

  async setStatus(batchId: string, from: BatchStatus, to: BatchStatus) {
    await this.docs.updateOne({ _id: batchId, status: from }, { $set: { status: to, updatedAt: new Date(this.clock.now()) } })
  }

  async update(batchId: string, fields: Partial<BatchDoc>) {
    await this.docs.updateOne({ _id: batchId }, { $set: { ...fields, updatedAt: new Date(this.clock.now()) } })
  }
}

export function batchView(doc: BatchDoc) {
  return {
    batchId: doc._id,
    status: doc.status,
    source: doc.source,
    name: doc.name,
    channel: doc.channel,
    duplicateStrategy: doc.duplicateStrategy,
    rules: doc.rules,
    uploadStatus: doc.uploadStatus,
    uploadProgress: doc.uploadProgress,
    totalContacts: doc.totalContacts,
    tempCsvKey: doc.tempCsvKey,
    importOperationId: doc.importOperationId,
    importErrorCount: doc.importErrorCount,
    createdAt: doc.createdAt.toISOString(),
    updatedAt: doc.updatedAt.toISOString(),
    finishedAt: doc.finishedAt ? doc.finishedAt.toISOString() : null,
  }
}
