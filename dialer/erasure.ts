// Erasing one person from an account (README "Erasure"): POST /dialer/v1/erasures answers 202
// and a `person.erasure` operation; a dialer worker runs it and the operation says what it
// removed (counts only). Another account's data is never read or written.
//
// Who the person is: the addresses and identifiers of the request, plus the addresses of the
// account's contacts those match (a person loaded into several batches under other identifiers
// is the same person at the same phone or e-mail). Identifiers are not widened that way: they
// are the client's own per batch, and `1` in one batch is not `1` in another. Names identify
// nobody (many people share one); what carries a name goes with the contact or session it is in.
// An address is found case-insensitively for e-mail; a phone number also when written with
// spaces, dashes, dots, brackets or a leading + or 00 in a text.
//
// What goes, what stays:
//   contacts         every one holding an identifier or an address of the person: deleted
//                    (through ActiveContacts: out of the account cap's count first)
//   attempts         of those contacts, or at one of the addresses: deleted, with the outcome
//                    reports webhooks sent for them
//   blocked addresses a block at one of the addresses stays (a do-not-call request must keep
//                    refusing the number: erasing it would dial the person again), but holds a
//                    digest of (account, type, address) instead of the address, and no reason;
//                    blocks whose reason text names an address lose the reason
//   sessions         a live session that names the person (one of their attempts, whose id is
//                    its session's; or an address anywhere in its arguments, messages or any
//                    history entry; or an identifier as a value of its arguments) is closed with
//                    reason `erased`, which drops its journal and its checkpoint as every close
//                    does; a closed one's journal is dropped again in case a crash left it
//   session records  of those sessions: the last message and the customer go; of any of the
//                    account's, a last message naming an address and a customer named by an
//                    address or identifier go; counts, times and status stay
//   import errors, the error samples of contact loads (and of their chunk plans), stored
//                    answers of idempotent requests: the entries naming the person go
//   report blocks    hold counts only: untouched
// The person's addresses and identifiers are kept in the operation only while it runs; the write
// that ends it removes them. Erasure closes live sessions through this process's session
// transport: a worker without one (ROLE=worker) reports them as not closed (status partial).
import { NotFound } from '../platform/errors.js'
import type { Principal } from '../platform/principal.js'
import type { Platform } from '../platform/index.js'
import type { Delivery, WorkQueue } from '../platform/bus/index.js'
import type { Collection, Doc, Filter, Store } from '../platform/store/index.js'
import type { SessionTransport } from '../engine/transport.js'
import { SessionStore } from '../engine/persistence/session-store.js'
import { SESSION_RECORDS, type SessionRecordDoc } from '../reports/index.js'
import { ActiveContacts } from './active-contacts.js'
import { type AddressType, type BlockedDoc, erasedAddress, normalizeAddress } from './blocked-addresses.js'
import { COLLECTIONS, type ContactDoc } from './collections.js'
import type { BatchDoc } from './batches.js'
import { operationPath } from './loads.js'
import type { ErasureCounts, ErasureOperationDoc, ErasureTerms, OperationDoc, Operations } from './operations.js'
import type { QueueWorker } from './queue-workers.js'
import { WEBHOOK_REPORTS } from './providers/index.js'

export const ERASURE_QUEUE = 'dialer.erasures'
const MAX_DELIVERIES = 5
/** Documents read per slice where the embedded store scans a collection. */
const SLICE = 500
/** How long a session the erasure closed may take to be closed in the store. */
const CLOSE_WAIT_MS = 10_000
const ERASED_BY = 'system:erasure'

interface ErasureMessage {
  operationId: string
}

export interface ErasureRequest {
  addresses?: { address: string; type: AddressType }[]
  identifiers?: string[]
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
const unique = <T>(values: T[]) => [...new Set(values)]
const isEmail = (address: string) => address.includes('@')
/** Runs of digits as people write phone numbers in text: "+34 611 22-33 44", "(0034) 611.223.344". */
const PHONE_RUN = /\+?\(?\d[\d\s().-]{5,}\d/g

/** Whether texts and JSON values name the person (see the header). */
export class PersonMatcher {
  private readonly emails: string[]
  private readonly phones: Set<string>
  private readonly identifiers: Set<string>

  constructor(addresses: string[], identifiers: string[]) {
    this.emails = addresses.filter(isEmail).map(a => a.toLowerCase())
    this.phones = new Set(addresses.filter(a => !isEmail(a)))
    this.identifiers = new Set(identifiers)
  }

  /** A text holding one of the addresses. */
  text(text: string): boolean {
    if (this.emails.length > 0) {
      const lower = text.toLowerCase()
      if (this.emails.some(email => lower.includes(email))) return true
    }
    if (this.phones.size > 0) {
      for (const [run] of text.matchAll(PHONE_RUN)) {
        const digits = run.replace(/\D/g, '')
        if (this.phones.has(digits) || (digits.startsWith('00') && this.phones.has(digits.slice(2)))) return true
      }
    }
    return false
  }

  /** A JSON value with a string, at any depth, that holds an address, or (`identifiers`) is an identifier. */
  value(value: unknown, identifiers = true, depth = 0): boolean {
    if (typeof value === 'string') return (identifiers && this.identifiers.has(value)) || this.text(value)
    if (value === null || typeof value !== 'object' || depth > 64) return false
    if (Array.isArray(value)) return value.some(v => this.value(v, identifiers, depth + 1))
    return Object.values(value).some(v => this.value(v, identifiers, depth + 1))
  }

  /**
   * A session's checkpoint or history entry that names the person: an address anywhere, an
   * identifier only as a value of the session's arguments (elsewhere a short identifier would
   * match an agent's id or a state name).
   */
  session(value: unknown): boolean {
    if (this.value(value, false)) return true
    const record = value as { arguments?: unknown; conversation?: { arguments?: unknown } } | null
    return typeof record === 'object' && record !== null && (this.value(record.arguments) || this.value(record.conversation?.arguments))
  }

  /** Conditions on a stored address field: e-mail case-insensitive, phone as stored. */
  addressIn(addresses: string[]): { $in: (string | RegExp)[] } {
    return { $in: addresses.map(a => (isEmail(a) ? new RegExp(`^${escape(a)}$`, 'i') : a)) }
  }

  /** A store condition that finds texts naming an address (checked again with text()). */
  textCondition(addresses: string[]): { $regex: RegExp } | undefined {
    const parts = addresses.map(a => (isEmail(a) ? escape(a) : a.split('').join('\\D{0,3}')))
    return parts.length === 0 ? undefined : { $regex: new RegExp(parts.join('|'), 'i') }
  }
}

export class Erasures {
  readonly queue: WorkQueue<ErasureMessage>
  readonly worker: QueueWorker<ErasureMessage>
  private readonly store: Store
  private readonly ops: Collection<OperationDoc>
  private readonly contacts: Collection<ContactDoc>
  private readonly attempts: Collection<Doc & { accountId: string; contactId: string; address: string }>
  private readonly batches: Collection<BatchDoc>
  private readonly blocked: Collection<BlockedDoc>
  private readonly importErrors: Collection<Doc & { batchId: string; identifier: string | null }>
  private readonly webhookReports: Collection<Doc>
  private readonly plans: Collection<Doc>
  private readonly records: Collection<SessionRecordDoc>
  private readonly idempotency: Collection<Doc & { accountId: string; state: string; response: { body: unknown } | null }>
  private readonly sessions: SessionStore
  private readonly active: ActiveContacts

  constructor(
    private readonly platform: Platform,
    private readonly operations: Operations,
    private readonly idempotencyStore: Store,
    /** The engine's transport, to close live sessions (undefined in a process without one). */
    private readonly transport: () => SessionTransport | undefined,
  ) {
    const store = (this.store = platform.store)
    this.queue = platform.bus.queue<ErasureMessage>(ERASURE_QUEUE)
    this.worker = { queue: this.queue, handle: d => this.run(d), options: { concurrency: 1, maxDeliveries: MAX_DELIVERIES } }
    this.ops = operations.docs
    this.contacts = store.collection(COLLECTIONS.contacts)
    this.attempts = store.collection(COLLECTIONS.attempts)
    this.batches = store.collection(COLLECTIONS.batches)
    this.blocked = store.collection(COLLECTIONS.blocked)
    this.importErrors = store.collection(COLLECTIONS.importErrors)
    this.webhookReports = store.collection(WEBHOOK_REPORTS)
    this.plans = store.collection(COLLECTIONS.chunkPlans)
    this.records = store.collection(SESSION_RECORDS)
    this.idempotency = idempotencyStore.collection(COLLECTIONS.idempotency)
    this.sessions = new SessionStore(store)
    this.active = new ActiveContacts(store)
  }

  async request(principal: Principal, body: ErasureRequest) {
    const addresses = unique((body.addresses ?? []).map(a => JSON.stringify([a.type, normalizeAddress(a.type, a.address)]))).map(text => {
      const [type, address] = JSON.parse(text) as [AddressType, string]
      return { type, address }
    })
    const op = await this.operations.createErasure({
      accountId: principal.accountId,
      terms: { addresses, identifiers: unique(body.identifiers ?? []) },
      actor: { id: principal.keyId, name: principal.keyName },
    })
    this.platform.metrics.operationsInFlight.inc({ kind: op.kind })
    await this.queue.publish({ operationId: op._id })
    return { operationId: op._id, operationUrl: operationPath(op._id), status: 'queued' as const }
  }

  private async run(delivery: Delivery<ErasureMessage>) {
    const op = await this.operations.findById(delivery.data.operationId)
    if (!op || op.kind !== 'person.erasure' || !op.terms || op.status === 'succeeded' || op.status === 'failed' || op.status === 'partial') return
    try {
      await this.ops.updateOne({ _id: op._id, status: 'pending' }, { $set: { status: 'running' } })
      const problems = await this.erase(op)
      await this.finish(op, problems.length === 0 ? 'succeeded' : 'partial', problems.length === 0 ? null : problems.join('; '))
    } catch (error) {
      if (delivery.attempt < MAX_DELIVERIES) throw error
      await this.finish(op, 'failed', (error as Error).message)
    }
    this.platform.metrics.operationsInFlight.dec({ kind: op.kind })
  }

  /** Ends the operation; the person's addresses and identifiers leave it in the same write. */
  private async finish(op: ErasureOperationDoc, status: 'succeeded' | 'partial' | 'failed', error: string | null) {
    await this.ops.updateOne(
      { _id: op._id, status: { $in: ['pending', 'running'] } },
      { $set: { status, error, completedAt: new Date(this.platform.clock.now()) }, $unset: { terms: '' } },
    )
  }

  private async count(op: ErasureOperationDoc, field: keyof ErasureCounts, n: number) {
    if (n > 0) await this.ops.updateOne({ _id: op._id }, { $inc: { [`counts.${field}`]: n } })
  }

  /** Every step; each finds what is left, so a redelivery after a failure finishes the work. Answers what it could not do. */
  private async erase(op: ErasureOperationDoc): Promise<string[]> {
    const { accountId } = op
    // What the person is found by is fixed before anything is deleted: a redelivery erases the same.
    let expanded = op.terms!.expanded
    if (!expanded) {
      expanded = await this.expand(accountId, op.terms!)
      await this.ops.updateOne({ _id: op._id }, { $set: { 'terms.expanded': expanded } })
    }
    const { addresses, identifiers, contactIds, attemptIds, contactKeys } = expanded
    const person = new PersonMatcher(addresses, identifiers)
    const now = new Date(this.platform.clock.now())

    // Contacts (and any a load added meanwhile), then the totals of their batches.
    let contacts = await this.active.deleteContacts(accountId, contactIds)
    const late = await this.contactsNaming(accountId, person, addresses, identifiers)
    contacts += await this.active.deleteContacts(accountId, late.map(c => c._id))
    await this.count(op, 'contacts', contacts)
    for (const batchId of unique([...contactKeys.map(([batchId]) => batchId), ...late.map(c => c.batchId)])) {
      await this.batches.updateOne({ _id: batchId, accountId }, { $set: { totalContacts: await this.contacts.countDocuments({ batchId }) } })
    }

    // Attempts, with the outcome reports received for them; their ids are their sessions' ids.
    const lateAttempts = await this.attemptsOf(accountId, person, [...contactIds, ...late.map(c => c._id)], addresses)
    const allAttempts = unique([...attemptIds, ...lateAttempts])
    await this.count(op, 'attempts', await this.attempts.deleteMany({ accountId, _id: { $in: allAttempts } }))
    await this.count(op, 'webhookReports', await this.webhookReports.deleteMany({ _id: { $in: allAttempts } }))

    // Blocks stay, without the address; reasons naming the person go.
    let blocks = 0
    if (addresses.length > 0) {
      // Blocks hold normalized addresses: found by value.
      for (const block of await this.blocked.find({ accountId, address: { $in: addresses } })) {
        const erased = await this.blocked.updateOne(
          { _id: block._id, address: block.address },
          { $set: { address: erasedAddress(accountId, block.addressType, block.address), reason: null, erasedAt: now } },
        )
        blocks += erased.modifiedCount
      }
      const reason = person.textCondition(addresses)
      const naming = (await this.matching(this.blocked, { accountId }, { reason })).filter(b => b.reason !== null && person.text(b.reason))
      if (naming.length > 0) blocks += (await this.blocked.updateMany({ _id: { $in: naming.map(b => b._id) } }, { $set: { reason: null } })).modifiedCount
    }
    await this.count(op, 'blockedAddresses', blocks)

    // Sessions: closed when live.
    const problems: string[] = []
    const named = new Set(allAttempts)
    for (const sessionId of await this.liveSessionsNaming(accountId, person)) named.add(sessionId)
    let closed = 0
    const unreached: string[] = []
    for (const sessionId of named) {
      const state = await this.sessions.stateOf(sessionId, accountId)
      if (state === null) continue
      if (state === 'live') {
        if (!(await this.close(accountId, sessionId))) {
          unreached.push(sessionId)
          continue
        }
        closed++
      }
      // After its tombstone: nothing of the session is written any more.
      await this.sessions.deleteLog(sessionId)
    }
    await this.count(op, 'sessions', closed)
    if (unreached.length > 0) {
      problems.push(`${unreached.length} live session(s) naming the person could not be closed (${this.transport() ? 'they did not close in time' : 'no assistant engine in this process: run the dialer workers with ROLE=all'}): ${unreached.join(', ')}`)
    }
    const reached = [...named].filter(id => !unreached.includes(id))
    // Their records lose the last message and the customer the arguments named; any other record
    // loses whichever of the two names the person (a customer by address or identifier).
    const erasedRecords = new Set<string>()
    const unsetIn = async (ids: string[], fields: Record<string, ''>, having: Filter) => {
      if (ids.length === 0) return
      const modified = await this.records.find({ accountId, _id: { $in: ids }, ...having }, { projection: { _id: 1 } })
      if (modified.length === 0) return
      await this.records.updateMany({ accountId, _id: { $in: modified.map(r => r._id) } }, { $unset: fields })
      for (const r of modified) erasedRecords.add(r._id)
    }
    await unsetIn(reached, { last_message: '', customer: '' }, { $or: [{ last_message: { $exists: true } }, { customer: { $exists: true } }] })
    const text = person.textCondition(addresses)
    const arms: Filter[] = []
    if (text) arms.push({ 'last_message.text': text }, { 'customer.address': text })
    if (identifiers.length > 0) arms.push({ 'customer.address': { $in: identifiers } })
    if (arms.length > 0) {
      const others = (await this.matching(this.records, { accountId }, { $or: arms })).filter(r => !unreached.includes(r._id) && !reached.includes(r._id))
      await unsetIn(others.filter(r => r.last_message && person.text(r.last_message.text)).map(r => r._id), { last_message: '' }, {})
      await unsetIn(others.filter(r => r.customer && person.value(r.customer)).map(r => r._id), { customer: '' }, {})
    }
    const records = erasedRecords.size
    await this.count(op, 'sessionRecords', records)

    // Entries naming the person's identifiers: per batch for the contacts' own, account-wide for the request's.
    const byBatch = new Map<string, string[]>()
    for (const [batchId, identifier] of contactKeys) byBatch.set(batchId, [...(byBatch.get(batchId) ?? []), identifier])
    const accountBatches = (await this.batches.find({ accountId }, { projection: { _id: 1 } })).map(b => b._id)
    let importErrors = 0
    let operationErrors = 0
    const scopes: [Filter, string[]][] = [...byBatch].map(([batchId, ids]) => [{ batchId }, ids])
    if (identifiers.length > 0) scopes.push([{ batchId: { $in: accountBatches } }, identifiers])
    for (const [scope, ids] of scopes) {
      if (accountBatches.length === 0) break
      importErrors += await this.importErrors.deleteMany({ ...scope, identifier: { $in: ids } })
      const pulled = await this.ops.updateMany({ accountId, kind: 'contacts.load', ...scope, 'errors.identifier': { $in: ids } }, { $pull: { errors: { identifier: { $in: ids } } } })
      operationErrors += pulled.modifiedCount
      // The loads' chunk plans keep the errors they counted (a redelivered chunk reuses them).
      const loads = (await this.ops.find({ accountId, kind: 'contacts.load', ...scope }, { projection: { totalChunks: 1 } })) as { _id: string; totalChunks: number }[]
      const plans = loads.flatMap(load => Array.from({ length: load.totalChunks }, (_, i) => `${load._id}:${i}`))
      if (plans.length > 0) await this.plans.updateMany({ _id: { $in: plans }, 'errors.identifier': { $in: ids } }, { $pull: { errors: { identifier: { $in: ids } } } })
    }
    await this.count(op, 'importErrors', importErrors)
    await this.count(op, 'operationErrors', operationErrors)

    // Answers kept for idempotent retries that carry the person (a contact's view, say).
    const stored = (await this.matching(this.idempotency, { accountId }, { state: 'completed' }, this.idempotencyStore)).filter(r => r.response && person.value(r.response.body))
    if (stored.length > 0) await this.count(op, 'idempotencyRecords', await this.idempotency.deleteMany({ _id: { $in: stored.map(r => r._id) } }))
    return problems
  }

  /** The person's contacts, attempts and widened addresses, before anything is deleted. */
  private async expand(accountId: string, terms: ErasureTerms): Promise<NonNullable<ErasureTerms['expanded']>> {
    const requested = terms.addresses.map(a => a.address)
    const first = await this.contactsNaming(accountId, new PersonMatcher(requested, terms.identifiers), requested, terms.identifiers)
    const addresses = unique([...requested, ...first.flatMap(c => c.addresses.map(a => normalizeAddress(a.type, a.address)))])
    const person = new PersonMatcher(addresses, terms.identifiers)
    const contacts = addresses.length > requested.length ? await this.contactsNaming(accountId, person, addresses, terms.identifiers) : first
    const contactIds = contacts.map(c => c._id)
    return {
      addresses,
      identifiers: terms.identifiers,
      contactIds,
      attemptIds: await this.attemptsOf(accountId, person, contactIds, addresses),
      contactKeys: contacts.map(c => [c.batchId, c.identifier]),
    }
  }

  private async contactsNaming(accountId: string, person: PersonMatcher, addresses: string[], identifiers: string[]) {
    const arms: Filter[] = []
    if (identifiers.length > 0) arms.push({ identifier: { $in: identifiers } })
    if (addresses.length > 0) arms.push({ 'addresses.address': person.addressIn(addresses) })
    if (arms.length === 0) return []
    return this.matching(this.contacts, { accountId }, { $or: arms }, this.store, { batchId: 1, identifier: 1, addresses: 1 })
  }

  private async attemptsOf(accountId: string, person: PersonMatcher, contactIds: string[], addresses: string[]): Promise<string[]> {
    const arms: Filter[] = []
    if (contactIds.length > 0) arms.push({ contactId: { $in: contactIds } })
    if (addresses.length > 0) arms.push({ address: person.addressIn(addresses) })
    if (arms.length === 0) return []
    return (await this.matching(this.attempts, { accountId }, { $or: arms }, this.store, { _id: 1 })).map(a => a._id)
  }

  /** The account's live sessions whose checkpoint or journal names the person. */
  private async liveSessionsNaming(accountId: string, person: PersonMatcher): Promise<string[]> {
    const named: string[] = []
    for (let after: string | null = null; ; ) {
      const page = await this.sessions.liveOfAccount(accountId, after, 100)
      for (const { sessionId, checkpoint } of page) {
        if ((checkpoint !== null && person.session(parseJson(checkpoint))) || (await this.journalNames(sessionId, person))) named.push(sessionId)
      }
      if (page.length < 100) return named
      after = page[page.length - 1]!.sessionId
      await new Promise(resolve => setImmediate(resolve))
    }
  }

  private async journalNames(sessionId: string, person: PersonMatcher): Promise<boolean> {
    for (let after = 0; ; ) {
      const page = await this.sessions.journalPage(sessionId, after, SLICE)
      if (page.some(value => person.session(value))) return true
      const entries = page.filter((v): v is { seq: number } => typeof (v as { seq?: unknown }).seq === 'number' && !('control' in (v as object)))
      if (entries.length < SLICE) return false
      after = entries[entries.length - 1]!.seq
    }
  }

  /** Closes a live session through its owner; true once it is closed in the store. */
  private async close(accountId: string, sessionId: string): Promise<boolean> {
    const transport = this.transport()
    if (!transport) return false
    try {
      await transport.command({ sessionId, accountId }, { type: 'session.destroy', reason: 'erased', by: 'admin', userId: ERASED_BY })
    } catch (error) {
      // Closed meanwhile (or by its idle deadline): what the store says decides.
      if (!(error instanceof NotFound)) throw error
    }
    const deadline = Date.now() + CLOSE_WAIT_MS
    while ((await this.sessions.stateOf(sessionId, accountId)) === 'live') {
      if (Date.now() > deadline) return false
      await new Promise(resolve => setTimeout(resolve, 50))
    }
    return true
  }

  /**
   * The documents of `scope` matching `filter`. MongoDB: one query, the server scans. The
   * embedded store: the whole collection in _id order, a slice per read, so that no read holds
   * the loop long whatever the collection's size (these filters have no index to read).
   */
  private async matching<T extends Doc>(collection: Collection<T>, scope: Filter, filter: Filter, store: Store = this.store, projection?: Record<string, 1>): Promise<T[]> {
    const options = projection ? { projection } : {}
    // One helper for every collection: its filters are the callers', checked there.
    const where = (f: Filter) => f as Filter<T>
    if (store.kind === 'mongo') return collection.find(where({ ...scope, ...filter }), options)
    const out: T[] = []
    for (let after: string | null = null; ; ) {
      const ids = await collection.find(where(after === null ? {} : { _id: { $gt: after } }), { sort: { _id: 1 }, limit: SLICE, projection: { _id: 1 } })
      if (ids.length > 0) out.push(...(await collection.find(where({ ...scope, ...filter, _id: { $in: ids.map(d => d._id) } }), options)))
      if (ids.length < SLICE) return out
      after = ids[ids.length - 1]!._id
      await new Promise(resolve => setImmediate(resolve))
    }
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}
