// Reading contacts back (the write path is loads.ts).
import { NotFound } from '../platform/errors.js'
import type { Collection, Store } from '../platform/store/index.js'
import { COLLECTIONS, type ContactDoc, type ContactState } from './collections.js'

export function contactView(doc: ContactDoc) {
  return {
    contactId: doc._id,
    batchId: doc.batchId,
    identifier: doc.identifier,
    identifierGenerated: doc.identifierGenerated,
    name: doc.name,
    addresses: doc.addresses,
    scheduledAt: doc.scheduledAt ? new Date(doc.scheduledAt).toISOString() : null,
    contactPriority: doc.contactPriority,
    customFields: doc.customFields,
    state: doc.state,
    nextAttemptAt: new Date(doc.nextAttemptAt).toISOString(),
    attempts: doc.attempts,
    createdAt: new Date(doc.createdAt).toISOString(),
    updatedAt: new Date(doc.updatedAt).toISOString(),
  }
}

export class Contacts {
  private readonly docs: Collection<ContactDoc>
  constructor(store: Store) {
    this.docs = store.collection<ContactDoc>(COLLECTIONS.contacts)
  }

  async list(batchId: string, filter: { identifier?: string; state?: ContactState }, limit: number, offset: number) {
    const query: Record<string, unknown> = { batchId }
    if (filter.identifier) query.identifier = filter.identifier
    if (filter.state) query.state = filter.state
    const [docs, total] = await Promise.all([
      this.docs.find(query, { sort: { createdAt: 1, _id: 1 }, skip: offset, limit }),
      this.docs.countDocuments(query),
    ])
    return { data: docs.map(contactView), total }
  }

  async get(batchId: string, contactId: string) {
    const doc = await this.docs.findOne({ _id: contactId, batchId })
    if (!doc) throw new NotFound('NOT_FOUND', 'Contact not found')
    return contactView(doc)
  }
}
