// Contact loads: accepted synchronously (validate, check the account cap, create the
// operation, publish chunks) and applied in the background by chunk workers.
//
// A chunk is applied in three idempotent steps, so a worker that dies anywhere and is
// redelivered the chunk neither loses nor double-counts it:
//   1. plan   - decide each contact's outcome against the current batch and store the plan
//               under a key unique to (operation, chunk); a redelivery reuses the stored plan
//               instead of re-deciding against data it already changed;
//   2. apply  - the plan's writes are upserts/$set keyed by (batch, identifier): replaying
//               them changes nothing;
//   3. count  - the operation's counters and the chunk index are updated in one atomic
//               single-document update guarded by "index not yet counted".
// The last counted chunk closes the operation (again guarded, so exactly one caller does).
import { inSlices, yieldToLoop } from '../platform/background.js'
import { ApiError } from '../gateway/errors.js'
import type { Principal } from '../gateway/auth.js'
import { type BulkOp, type Collection, DuplicateKeyError } from '../platform/store/index.js'
import type { Platform } from '../platform/index.js'
import type { Delivery, WorkQueue } from '../platform/bus/index.js'
import { newId, stableId } from '../platform/ids.js'
import { type Actor, COLLECTIONS, type ContactDoc, NO_PRIORITY_RANK } from './collections.js'
import type { ContactInput } from './contact-input.js'
import type { Batches, BatchDoc, DuplicateStrategy } from './batches.js'
import type { BatchLog } from './batch-log.js'
import {
  type LoadCounts,
  type LoadOperationDoc,
  type OperationError,
  type Operations,
} from './operations.js'
import type { QueueWorker } from './queue-workers.js'
import { ActiveContacts } from './active-contacts.js'

export const LOAD_QUEUE = 'dialer.contacts.chunks'
/** Contact writes per store call when a chunk is applied (the loop is given back between them). */
const APPLY_SLICE = 25
/** Contacts reconciled by id per store call (direct lookups, no index search). */
const RECONCILE_SLICE = 100
const MAX_DELIVERIES = 5

export type QueuedContact = ContactInput & { identifier: string; identifierGenerated: boolean }

export interface ChunkMessage {
  operationId: string
  accountId: string
  batchId: string
  index: number
  contacts: QueuedContact[]
  /** Rows already rejected by validation (CSV import); counted as invalid. */
  rejected: OperationError[]
}

type Decision =
  | { kind: 'insert'; contactId: string }
  | { kind: 'update'; mode: 'merge' | 'replace' }
  | { kind: 'recontact'; mode: 'merge' | 'replace' | 'none'; reset: boolean }
  | { kind: 'duplicate' }

interface ChunkPlanDoc {
  _id: string
  plannedAt: Date
  decisions: Decision[]
  counts: LoadCounts
  errors: OperationError[]
  expiresAt: Date
}

export interface LoadAck {
  operationId: string
  operationUrl: string
  status: 'queued'
  contactsReceived: number
  chunksPublished: number
  message: string
}

const emptyCounts = (): LoadCounts => ({ insertedCount: 0, invalidCount: 0, duplicateCount: 0, updatedCount: 0, recontactedCount: 0 })

/**
 * Splits contacts into chunks of at most `size`, keeping every occurrence of an identifier in
 * the chunk of its first occurrence, so duplicates inside one request are resolved in order
 * by one worker.
 */
export function splitIntoChunks<T extends { identifier: string }>(contacts: T[], size: number): T[][] {
  const chunkOf = new Map<string, number>()
  const chunks: T[][] = []
  for (const contact of contacts) {
    const known = chunkOf.get(contact.identifier)
    if (known !== undefined) {
      chunks[known]!.push(contact)
      continue
    }
    if (chunks.length === 0 || chunks[chunks.length - 1]!.length >= size) chunks.push([])
    chunks[chunks.length - 1]!.push(contact)
    chunkOf.set(contact.identifier, chunks.length - 1)
  }
  return chunks
}

export const operationPath = (operationId: string) => `/dialer/v1/batches/operations/${operationId}`

/** The contact fields a write sets, per duplicate mode. */
function dataFields(contact: QueuedContact, mode: 'merge' | 'replace'): Record<string, unknown> {
  const fields: Record<string, unknown> = { name: contact.name, addresses: contact.addresses }
  if (mode === 'replace') {
    fields.scheduledAt = contact.scheduledAt ? new Date(contact.scheduledAt) : null
    fields.contactPriority = contact.contactPriority ?? null
    fields.priorityRank = contact.contactPriority ?? NO_PRIORITY_RANK
    fields.customFields = contact.customFields ?? {}
    return fields
  }
  if (contact.scheduledAt) fields.scheduledAt = new Date(contact.scheduledAt)
  if (contact.contactPriority !== undefined) {
    fields.contactPriority = contact.contactPriority
    fields.priorityRank = contact.contactPriority
  }
  for (const [key, value] of Object.entries(contact.customFields ?? {})) fields[`customFields.${key}`] = value
  return fields
}

export class ContactLoads {
  private readonly contacts: Collection<ContactDoc>
  private readonly plans: Collection<ChunkPlanDoc>
  readonly queue: WorkQueue<ChunkMessage>
  readonly worker: QueueWorker<ChunkMessage>
  /** The account cap's counter of active contacts. */
  readonly active: ActiveContacts

  constructor(
    private readonly platform: Platform,
    private readonly batches: Batches,
    private readonly operations: Operations,
    private readonly log: BatchLog,
  ) {
    this.contacts = platform.store.collection<ContactDoc>(COLLECTIONS.contacts)
    this.plans = platform.store.collection<ChunkPlanDoc>(COLLECTIONS.chunkPlans)
    this.active = new ActiveContacts(platform.store)
    this.queue = platform.bus.queue<ChunkMessage>(LOAD_QUEUE)
    this.worker = {
      queue: this.queue,
      handle: delivery => this.handle(delivery),
      options: { concurrency: platform.config.dialer.workerConcurrency, maxDeliveries: MAX_DELIVERIES },
    }
  }

  /** Fills in missing identifiers (generated ids cannot be related to the source record). */
  static queued(contacts: ContactInput[]): QueuedContact[] {
    return contacts.map(c => (c.identifier ? { ...c, identifier: c.identifier, identifierGenerated: false } : { ...c, identifier: newId(), identifierGenerated: true }))
  }

  async accept(principal: Principal, batchId: string, input: ContactInput[]): Promise<LoadAck> {
    const batch = await this.batches.getWritable(principal.accountId, batchId)
    await this.checkCap(principal.accountId, input.length)
    const chunks = splitIntoChunks(ContactLoads.queued(input), this.platform.config.dialer.chunkSize)
    const op = await this.operations.createLoad({
      accountId: principal.accountId,
      batchId: batch._id,
      type: 'contacts.insert',
      requestedCount: input.length,
      totalChunks: chunks.length,
      sealed: true,
      actor: { id: principal.keyId, name: principal.keyName },
    })
    await this.publishAll(op, chunks.map(contacts => ({ contacts, rejected: [] })))
    return {
      operationId: op._id,
      operationUrl: operationPath(op._id),
      status: 'queued',
      contactsReceived: input.length,
      chunksPublished: chunks.length,
      message: 'Contacts queued for processing',
    }
  }

  /** Publishes chunks; if the queue refuses, the operation fails rather than hanging. */
  async publishAll(op: LoadOperationDoc, chunks: { contacts: QueuedContact[]; rejected: OperationError[] }[], firstIndex = 0) {
    this.platform.metrics.operationsInFlight.inc({ kind: op.kind })
    try {
      // Side by side: the embedded queue commits them in one transaction (each keeps its index).
      await Promise.all(chunks.map((chunk, offset) => this.queue.publish({ operationId: op._id, accountId: op.accountId, batchId: op.batchId, index: firstIndex + offset, ...chunk })))
    } catch (error) {
      await this.operations.closeLoad(op, 'failed')
      this.platform.metrics.operationsInFlight.dec({ kind: op.kind })
      throw new ApiError(503, 'QUEUE_UNAVAILABLE', 'The load could not be queued; retry with the same Idempotency-Key')
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
      throw new ApiError(
        400,
        'CONTACT_LIMIT_EXCEEDED',
        `The account may have at most ${maxContacts} active contacts; ${currentActive} are active or queued, so at most ${room} more can be added`,
        { maxContacts, currentActive, attempting, exceededBy },
      )
    }
  }

  private async handle(delivery: Delivery<ChunkMessage>) {
    const message = delivery.data
    try {
      await this.process(message)
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
      const counts = { ...emptyCounts(), invalidCount: message.contacts.length + message.rejected.length }
      await this.operations.countChunk(message.operationId, message.index, counts, message.contacts.map(c => ({ identifier: c.identifier, reason })))
      await this.tryFinish(message.operationId)
    } finally {
      this.platform.metrics.queueDepth.set({ queue: LOAD_QUEUE }, this.queue.depth())
    }
  }

  /** Applies one chunk (plan, apply, count) and closes the operation after its last chunk. */
  async process(message: ChunkMessage) {
    // Background work: each step starts after pending I/O (live sessions first), see platform/background.ts.
    await yieldToLoop()
    const op = await this.operations.findById(message.operationId)
    if (!op || op.kind !== 'contacts.load') return // expired or unknown: nothing left to report to
    if (!op.countedChunks.includes(message.index)) {
      const batch = await this.batches.docs.findOne({ _id: message.batchId })
      const plan = await this.planOnce(message, batch, op)
      if (batch && !['deleting', 'deleted'].includes(batch.status)) await this.apply(message, plan)
      await yieldToLoop()
      await this.operations.countChunk(op._id, message.index, plan.counts, plan.errors)
    }
    await yieldToLoop()
    await this.tryFinish(op._id)
  }

  private async planOnce(message: ChunkMessage, batch: BatchDoc | null, op: LoadOperationDoc): Promise<ChunkPlanDoc> {
    const _id = `${message.operationId}:${message.index}`
    const stored = await this.plans.findOne({ _id })
    if (stored) return stored
    const plan = await this.plan(message, batch, op.expiresAt)
    try {
      await this.plans.insertOne({ _id, ...plan })
      return { _id, ...plan }
    } catch (error) {
      if (!(error instanceof DuplicateKeyError)) throw error
      return (await this.plans.findOne({ _id }))! // a concurrent delivery planned first
    }
  }

  private async plan(message: ChunkMessage, batch: BatchDoc | null, expiresAt: Date): Promise<Omit<ChunkPlanDoc, '_id'>> {
    const counts = emptyCounts()
    const errors: OperationError[] = [...message.rejected]
    counts.invalidCount += message.rejected.length
    const plannedAt = new Date(this.platform.clock.now())
    if (!batch || ['deleting', 'deleted'].includes(batch.status)) {
      counts.invalidCount += message.contacts.length
      errors.push(...message.contacts.map(c => ({ identifier: c.identifier, reason: 'BATCH_DELETED: the batch was deleted before this load ran' })))
      return { plannedAt, decisions: message.contacts.map(() => ({ kind: 'duplicate' as const })), counts, errors, expiresAt }
    }
    const existing = await this.contacts.find(
      { batchId: batch._id, identifier: { $in: message.contacts.map(c => c.identifier) } },
      { projection: { identifier: 1 } },
    )
    const known = new Set(existing.map(c => c.identifier))
    const strategy: DuplicateStrategy = batch.duplicateStrategy
    const decisions = message.contacts.map((contact): Decision => {
      if (!known.has(contact.identifier)) {
        known.add(contact.identifier)
        counts.insertedCount++
        return { kind: 'insert', contactId: newId() }
      }
      if (contact.onDuplicate === 'recontact') {
        counts.recontactedCount++
        return { kind: 'recontact', mode: strategy === 'skip' ? 'none' : strategy, reset: contact.resetAttempts === true }
      }
      if (strategy === 'skip') {
        counts.duplicateCount++
        errors.push({ identifier: contact.identifier, reason: 'DUPLICATE: identifier already in the batch (duplicateStrategy skip)' })
        return { kind: 'duplicate' }
      }
      counts.updatedCount++
      return { kind: 'update', mode: strategy }
    })
    return { plannedAt, decisions, counts, errors, expiresAt }
  }

  private async apply(message: ChunkMessage, plan: ChunkPlanDoc) {
    const at = plan.plannedAt
    // New contacts are plain inserts under the plan's ids, apart from the rest: an insert is
    // always an identifier's first occurrence in the chunk, so inserting them first keeps every
    // identifier's writes in request order. An insert needs no lookup (an upsert would search the
    // batch for the identifier first); a replayed plan finds its own ids already there.
    const inserts: ContactDoc[] = []
    const changes: BulkOp[] = []
    const recontacted: string[] = []
    message.contacts.forEach((contact, i) => {
      const decision = plan.decisions[i]!
      const key = { batchId: message.batchId, identifier: contact.identifier }
      if (decision.kind === 'insert') {
        const scheduledAt = contact.scheduledAt ? new Date(contact.scheduledAt) : null
        inserts.push({
          _id: decision.contactId,
          accountId: message.accountId,
          batchId: message.batchId,
          identifier: contact.identifier,
          identifierGenerated: contact.identifierGenerated,
          name: contact.name,
          addresses: contact.addresses,
          scheduledAt,
          contactPriority: contact.contactPriority ?? null,
          priorityRank: contact.contactPriority ?? NO_PRIORITY_RANK,
          customFields: contact.customFields ?? {},
          state: 'pending',
          nextAttemptAt: scheduledAt ?? at,
          attempts: 0,
          addressAttempts: {},
          createdAt: at,
          updatedAt: at,
          capCounted: false,
        })
      } else if (decision.kind === 'update') {
        changes.push({ updateOne: { filter: key, update: { $set: { ...dataFields(contact, decision.mode), updatedAt: at } } } })
      } else if (decision.kind === 'recontact') {
        const set: Record<string, unknown> = {
          ...(decision.mode === 'none' ? {} : dataFields(contact, decision.mode)),
          state: 'pending',
          nextAttemptAt: contact.scheduledAt ? new Date(contact.scheduledAt) : at,
          updatedAt: at,
        }
        if (decision.reset) Object.assign(set, { attempts: 0, addressAttempts: {} })
        changes.push({ updateOne: { filter: key, update: { $set: set } } })
        recontacted.push(contact.identifier)
      }
    })
    // In slices, with the loop given back between them (live sessions first).
    try {
      await inSlices(inserts, APPLY_SLICE, slice => this.insertContacts(slice))
      // Ordered, so repeated identifiers inside the chunk apply in request order (an ordered
      // slice after an ordered slice keeps the order).
      await inSlices(changes, APPLY_SLICE, async slice => {
        await this.contacts.bulkWrite(slice, { ordered: true })
      })
    } finally {
      // Inserted and recontacted contacts join the account's active count (once, however often
      // this chunk is applied), also when the apply stopped partway.
      await inSlices(inserts.map(c => c._id), RECONCILE_SLICE, ids => this.active.reconcile(message.accountId, { ids }))
      await inSlices(recontacted, APPLY_SLICE, identifiers => this.active.reconcile(message.accountId, { batchId: message.batchId, identifiers }))
    }
  }

  /**
   * Inserts a plan's new contacts. A duplicate key means the identifier is already in the batch:
   * inserted by an earlier delivery of this plan (same id), or by a concurrent load between plan
   * and apply. Either way it is left as it is, as an upsert would have matched it.
   */
  private async insertContacts(docs: ContactDoc[]) {
    await this.contacts.bulkWrite(docs.map(document => ({ insertOne: { document } })), { ordered: false })
  }

  /** Closes the operation once all its chunks are counted. Every step is idempotent. */
  async tryFinish(operationId: string) {
    const op = await this.operations.findById(operationId)
    if (!op || op.kind !== 'contacts.load' || !['pending', 'running'].includes(op.status)) return
    if (!op.sealed || op.chunksCompleted < op.totalChunks) return
    const totalContacts = await this.contacts.countDocuments({ batchId: op.batchId })
    await this.batches.update(op.batchId, {
      totalContacts,
      ...(op.type === 'contacts.import' ? { uploadStatus: 'completed' as const, uploadProgress: 100 } : {}),
    })
    await this.log.append({
      id: stableId(`${op._id}:contacts_added`),
      accountId: op.accountId,
      batchId: op.batchId,
      operation: 'contacts_added',
      actor: op.actor as Actor,
      details: {
        count: op.insertedCount,
        operationId: op._id,
        updated: op.updatedCount,
        recontacted: op.recontactedCount,
        duplicates: op.duplicateCount,
        invalid: op.invalidCount,
      },
    })
    if (await this.operations.closeLoad(op)) this.platform.metrics.operationsInFlight.dec({ kind: op.kind })
  }
}

