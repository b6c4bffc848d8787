// The dialer's collections, their document shapes and indexes, in one place.
import type { IndexSpec } from '../platform/store/index.js'

export const COLLECTIONS = {
  batches: 'dialer_batches',
  contacts: 'dialer_contacts',
  operations: 'dialer_operations',
  chunkPlans: 'dialer_chunk_plans',
  blocked: 'dialer_blocked_addresses',
  logs: 'dialer_batch_logs',
  idempotency: 'dialer_idempotency_keys',
  idempotencyUsage: 'dialer_idempotency_usage',
  uploads: 'dialer_uploads',
  importErrors: 'dialer_import_errors',
  attempts: 'dialer_attempts',
  schedulers: 'dialer_schedulers',
  /** One document per data migration done (its id), so it runs once per database. */
  migrations: 'dialer_migrations',
} as const

export const INDEXES: Record<string, IndexSpec[]> = {
  [COLLECTIONS.batches]: [{ name: 'account_created', key: { accountId: 1, createdAt: -1 } }],
  [COLLECTIONS.contacts]: [
    { name: 'batch_identifier_unique', key: { batchId: 1, identifier: 1 }, unique: true },
    // Counts only: the account's contacts in flight (each selection cycle) and its active ones
    // (the account cap on the embedded store, which keeps the numbers; MongoDB keeps a counter
    // of its own, dialer/active-contacts.ts).
    { name: 'account_state', key: { accountId: 1, state: 1 }, counted: true },
    // Contacts in flight (claims past their timeout: state in_progress, claimedAt < t; a batch's
    // first one when it may be complete). Partial, like the two below: a claim or a settlement
    // moves a contact in or out of an index instead of re-keying it in all three, and the done
    // contacts (most of an old batch) have no entry in any. `state` leads so the in-memory
    // store's hash maps never answer a (batchId, identifier) lookup with the whole batch.
    { name: 'state_batch_next', key: { state: 1, batchId: 1, nextAttemptAt: 1 }, partitionFields: 2, partialFilterExpression: { state: 'in_progress' } },
    // Selection cycles: a batch's due contacts in selection order, read in index order up to the
    // room left (dialer/scheduler/scheduler.ts): by priority (the default), or by due time for
    // rules.priorityOrder = scheduledAt. Only pending contacts are ever selected. A batch's order
    // never changes after it is created, so the due-time index holds only the contacts of the
    // batches that use it (`dueOrdered`, set at insert): a default batch's contacts cost one
    // selection-index write per claim, requeue or insert instead of two.
    { name: 'batch_state_rank_next', key: { batchId: 1, state: 1, priorityRank: 1, nextAttemptAt: 1, _id: 1 }, partialFilterExpression: { state: 'pending' } },
    { name: 'batch_state_next_rank', key: { batchId: 1, state: 1, nextAttemptAt: 1, priorityRank: 1, _id: 1 }, partialFilterExpression: { state: 'pending', dueOrdered: true } },
    // The contact listing's order (GET .../contacts): a page reads its rows, not the whole batch.
    { name: 'batch_created', key: { batchId: 1, createdAt: 1, _id: 1 } },
    // A batch's progress (GET .../batches/{id}) and its contacts in flight (each selection
    // cycle): the embedded store keeps the number per batch, state and ending, so neither reads
    // the batch's contacts (platform/store/counted-index.ts).
    { name: 'batch_progress', key: { batchId: 1, state: 1, lastOutcome: 1, doneReason: 1 }, counted: true },
  ],
  [COLLECTIONS.operations]: [
    // TTL: documents carry their own absolute expiry (retention differs per kind and phase).
    { name: 'expires_ttl', key: { expiresAt: 1 }, expireAfterSeconds: 0 },
    { name: 'account_status', key: { accountId: 1, kind: 1, status: 1 } },
  ],
  [COLLECTIONS.chunkPlans]: [{ name: 'expires_ttl', key: { expiresAt: 1 }, expireAfterSeconds: 0 }],
  [COLLECTIONS.blocked]: [
    { name: 'identity_unique', key: { accountId: 1, addressType: 1, address: 1 }, unique: true },
    { name: 'account_created', key: { accountId: 1, createdAt: -1 } },
  ],
  [COLLECTIONS.logs]: [{ name: 'batch_created', key: { batchId: 1, createdAt: -1 } }],
  [COLLECTIONS.uploads]: [
    { name: 'expires_ttl', key: { expiresAt: 1 }, expireAfterSeconds: 0 },
    { name: 'account_held', key: { accountId: 1, state: 1, expiresAt: 1 }, partitionFields: 1 },
  ],
  [COLLECTIONS.importErrors]: [{ name: 'batch_row', key: { batchId: 1, row: 1 } }],
  [COLLECTIONS.attempts]: [
    { name: 'batch_started', key: { batchId: 1, startedAt: -1 } },
    { name: 'batch_outcome', key: { batchId: 1, outcome: 1, startedAt: -1 }, partitionFields: 2 },
    { name: 'contact_started', key: { contactId: 1, startedAt: -1 } },
    // Pacing per account and minute: attempts started in the last 60 s.
    { name: 'account_started', key: { accountId: 1, startedAt: -1 } },
  ],
  // The schedulers' beats (dialer/scheduler/presence.ts), gone a day after the last one.
  [COLLECTIONS.schedulers]: [{ name: 'expires_ttl', key: { expiresAt: 1 }, expireAfterSeconds: 0 }],
}

export const IDEMPOTENCY_INDEXES: IndexSpec[] = [{ name: 'expires_ttl', key: { expiresAt: 1 }, expireAfterSeconds: 0 }]
export const IDEMPOTENCY_USAGE_INDEXES: IndexSpec[] = [
  { name: 'account_hour', key: { accountId: 1, hour: 1 }, partitionFields: 1 },
  { name: 'expires_ttl', key: { expiresAt: 1 }, expireAfterSeconds: 0 },
]

export type ContactState = 'pending' | 'in_progress' | 'done' | 'cancelled'
export const ACTIVE_CONTACT_STATES: ContactState[] = ['pending', 'in_progress']

export interface AddressDoc {
  address: string
  type: 'phone' | 'email' | 'whatsapp'
  priority: number
}

export interface ContactDoc {
  _id: string
  accountId: string
  batchId: string
  identifier: string
  identifierGenerated: boolean
  name: string
  addresses: AddressDoc[]
  scheduledAt: Date | null
  contactPriority: number | null
  /** contactPriority, or NO_PRIORITY_RANK when unset: the selection sort key (lower first, unset last). */
  priorityRank: number
  customFields: Record<string, unknown>
  state: ContactState
  nextAttemptAt: Date
  attempts: number
  addressAttempts: Record<string, number>
  createdAt: Date
  updatedAt: Date
  /** Set by the dialing scheduler (absent on contacts never dialed). */
  claimedBy?: string | null
  claimedAt?: Date | null
  lastOutcome?: string | null
  /** In its account's active-contacts counter (dialer/active-contacts.ts); absent on contacts older than it. */
  capCounted?: boolean
  /** Why a `done` contact is done: final_outcome, attempts_exhausted or blocked. */
  doneReason?: string | null
  /** The last reason a selection cycle passed the contact over (outside_window, ...). */
  lastSkipReason?: string | null
  /** Its batch selects by due time (rules.priorityOrder = scheduledAt): in `batch_state_next_rank`. */
  dueOrdered?: true
  /**
   * When its batch finished, on a contact no longer active in a finished batch (dialer/retention.ts):
   * the TTL field. `batchFinished` puts it in the partial TTL index, so other contacts have no entry.
   */
  batchFinished?: true
  batchFinishedAt?: Date
}

/** Contacts without contactPriority are selected after every prioritized one. */
export const NO_PRIORITY_RANK = Number.MAX_SAFE_INTEGER

export interface Actor {
  /** User uuid, or 'system'. */
  id: string
  name?: string
}
