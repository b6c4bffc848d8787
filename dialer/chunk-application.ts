// Applying one chunk of a contact load: the background half of dialer/loads.ts, kept apart
// because it runs wherever the store is written best: on the loop (MongoDB, whose driver waits
// on the network), or in a thread of its own next to the embedded store (dialer/chunk-thread.ts),
// so that writing a load never holds the loop that serves live sessions.
//
// A chunk is applied in three idempotent steps, so a worker that dies anywhere and is
// redelivered the chunk neither loses nor double-counts it:
//   1. plan   - decide each contact's outcome against the current batch and store the plan
//               under a key unique to (operation, chunk); a redelivery reuses the stored plan
//               instead of re-deciding against data it already changed;
//   2. apply  - new contacts are inserted under the plan's ids (a replay finds them there),
//               the rest are $set keyed by (batch, identifier): replaying them changes nothing;
//   3. count  - the operation's counters and the chunk index are updated in one atomic
//               single-document update guarded by "index not yet counted".
// The last counted chunk closes the operation (again guarded, so exactly one caller does).
import { inSlices, yieldToLoop } from '../platform/background.js'
import type { Clock } from '../platform/clock.js'
import { type BulkOp, type Collection, DuplicateKeyError, type Store } from '../platform/store/index.js'
import { newOrderedId, stableId } from '../platform/ids.js'
import { type Actor, COLLECTIONS, type ContactDoc, NO_PRIORITY_RANK } from './collections.js'
import type { ContactInput } from './contact-input.js'
import type { Batches, BatchDoc, DuplicateStrategy } from './batches.js'
import type { BatchLog } from './batch-log.js'
import type { LoadCounts, LoadOperationDoc, OperationError, Operations } from './operations.js'
import type { ActiveContacts } from './active-contacts.js'
import { selectsByDueTime } from './rules.js'

/** Contact writes per store call when a chunk is applied (the loop is given back between them). */
const APPLY_SLICE = 25
/** Contacts reconciled by id per store call (direct lookups, no index search). */
const RECONCILE_SLICE = 100

export type QueuedContact = ContactInput & { identifier: string; identifierGenerated: boolean }

export interface ChunkMessage {
  operationId: string
  accountId: string
  batchId: string
  index: number
  /**
   * The chunk's QueuedContact[] as JSON text, encoded once where the load was validated
   * (dialer/load-chunks.ts): the loop and the queue pass it on without reading it. Messages
   * stored by earlier versions carry the array itself; chunkContacts reads both.
   */
  contacts: string | QueuedContact[]
  /** Rows already rejected by validation (CSV import); counted as invalid. */
  rejected: OperationError[]
}

/** A chunk with its contacts decoded. */
type DecodedChunk = Omit<ChunkMessage, 'contacts'> & { contacts: QueuedContact[] }

/** A chunk's contacts, decoded. */
export function chunkContacts(message: ChunkMessage): QueuedContact[] {
  return typeof message.contacts === 'string' ? (JSON.parse(message.contacts) as QueuedContact[]) : message.contacts
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

export const emptyCounts = (): LoadCounts => ({ insertedCount: 0, invalidCount: 0, duplicateCount: 0, updatedCount: 0, recontactedCount: 0 })

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

/** What applying a chunk needs: the dialer's repositories over one store. */
export interface ChunkApplicationDeps {
  store: Store
  clock: Clock
  batches: Batches
  operations: Operations
  log: BatchLog
  active: ActiveContacts
}

export class ChunkApplication {
  private readonly contacts: Collection<ContactDoc>
  private readonly plans: Collection<ChunkPlanDoc>
  private readonly clock: Clock
  private readonly batches: Batches
  private readonly operations: Operations
  private readonly log: BatchLog
  private readonly active: ActiveContacts

  constructor(deps: ChunkApplicationDeps) {
    this.contacts = deps.store.collection<ContactDoc>(COLLECTIONS.contacts)
    this.plans = deps.store.collection<ChunkPlanDoc>(COLLECTIONS.chunkPlans)
    this.clock = deps.clock
    this.batches = deps.batches
    this.operations = deps.operations
    this.log = deps.log
    this.active = deps.active
  }

  /** Applies one chunk (plan, apply, count) and closes the operation after its last chunk; answers whether it closed it. */
  async process(message: ChunkMessage): Promise<boolean> {
    // Background work: each step starts after pending I/O (live sessions first), see platform/background.ts.
    await yieldToLoop()
    const op = await this.operations.findById(message.operationId)
    if (!op || op.kind !== 'contacts.load') return false // expired or unknown: nothing left to report to
    if (!op.countedChunks.includes(message.index)) {
      const chunk: DecodedChunk = { ...message, contacts: chunkContacts(message) }
      const batch = await this.batches.docs.findOne({ _id: message.batchId })
      const plan = await this.planOnce(chunk, batch, op)
      if (batch && !['deleting', 'deleted'].includes(batch.status)) {
        await this.apply(chunk, plan, batch)
        // Contacts loaded into a finished batch: its retention counts from this load.
        if (batch.finishedAt) await this.batches.finished(batch._id, batch.finishedAt, new Date(this.clock.now()))
      }
      await yieldToLoop()
      await this.operations.countChunk(op._id, message.index, plan.counts, plan.errors)
    }
    await yieldToLoop()
    return this.tryFinish(op._id)
  }

  private async planOnce(message: DecodedChunk, batch: BatchDoc | null, op: LoadOperationDoc): Promise<ChunkPlanDoc> {
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

  private async plan(message: DecodedChunk, batch: BatchDoc | null, expiresAt: Date): Promise<Omit<ChunkPlanDoc, '_id'>> {
    const counts = emptyCounts()
    const errors: OperationError[] = [...message.rejected]
    counts.invalidCount += message.rejected.length
    const plannedAt = new Date(this.clock.now())
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
        return { kind: 'insert', contactId: newOrderedId() }
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

  private async apply(message: DecodedChunk, plan: ChunkPlanDoc, batch: BatchDoc) {
    const at = plan.plannedAt
    const selection = selectsByDueTime(batch.rules) ? { dueOrdered: true as const } : {}
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
          ...selection,
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

  /** Closes the operation once all its chunks are counted; answers whether this call closed it. Every step is idempotent. */
  async tryFinish(operationId: string): Promise<boolean> {
    const op = await this.operations.findById(operationId)
    if (!op || op.kind !== 'contacts.load' || !['pending', 'running'].includes(op.status)) return false
    if (!op.sealed || op.chunksCompleted < op.totalChunks) return false
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
    return this.operations.closeLoad(op)
  }
}
