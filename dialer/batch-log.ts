// The batch audit log (spec 2.6): append-only, newest first.
import { type Collection, DuplicateKeyError, type Store } from '../platform/store/index.js'
import type { Clock } from '../platform/clock.js'
import { newOrderedId } from '../platform/ids.js'
import { type Actor, COLLECTIONS } from './collections.js'

export type LogOperation = 'created' | 'started' | 'stopped' | 'archived' | 'deleted' | 'contacts_added' | 'completed'

interface LogDoc {
  _id: string
  accountId: string
  batchId: string
  operation: LogOperation
  performedBy: string
  userName: string | null
  details: Record<string, unknown> | null
  createdAt: Date
  updatedAt: Date
}

export class BatchLog {
  private readonly logs: Collection<LogDoc>
  constructor(store: Store, private readonly clock: Clock) {
    this.logs = store.collection<LogDoc>(COLLECTIONS.logs)
  }

  /**
   * Appends an entry. With `id` (a stableId), the write is idempotent (a retried worker step cannot log
   * the same event twice).
   */
  async append(entry: {
    accountId: string
    batchId: string
    operation: LogOperation
    actor: Actor
    details?: Record<string, unknown> | null
    id?: string
  }) {
    const now = new Date(this.clock.now())
    try {
      await this.logs.insertOne({
        _id: entry.id ?? newOrderedId(),
        accountId: entry.accountId,
        batchId: entry.batchId,
        operation: entry.operation,
        performedBy: entry.actor.id,
        userName: entry.actor.name ?? null,
        details: entry.details ?? null,
        createdAt: now,
        updatedAt: now,
      })
    } catch (error) {
      if (!(error instanceof DuplicateKeyError && entry.id)) throw error
    }
  }

  async list(accountId: string, batchId: string, limit: number, offset: number) {
    const filter = { accountId, batchId }
    const [docs, total] = await Promise.all([
      this.logs.find(filter, { sort: { createdAt: -1, _id: -1 }, skip: offset, limit }),
      this.logs.countDocuments(filter),
    ])
    return {
      data: docs.map(doc => ({
        id: doc._id,
        batchId: doc.batchId,
        operation: doc.operation,
        performedBy: doc.performedBy,
        details: doc.details,
        createdAt: doc.createdAt.toISOString(),
        updatedAt: doc.updatedAt.toISOString(),
        ...(doc.performedBy === 'system' ? {} : { user: { id: doc.performedBy, name: doc.userName } }),
      })),
      total,
    }
  }
}
