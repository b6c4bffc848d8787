// How an accepted load body becomes the chunks queued for the background: identifiers filled
// in, contacts split into chunks, each chunk encoded once as JSON text. For a large body this
// runs in the validation thread (dialer/contact-validation.ts) right after the checks, so the
// loop that serves live sessions never parses, copies or encodes a load's contacts: it passes
// the chunks on as strings (a string is copied between threads and stored by the queue as is).
import { parseJsonBody } from '../gateway/request.js'
import { newOrderedId } from '../platform/ids.js'
import { parseContactsBody, type ContactInput } from './contact-input.js'
import type { QueuedContact } from './chunk-application.js'

/** A validated load, ready to queue: how many contacts, and its chunks as JSON text. */
export interface PreparedLoad {
  count: number
  /** Each chunk's QueuedContact[] as JSON (ChunkMessage.contacts). */
  chunks: string[]
}

/** What a body is checked against (the same wherever it is checked). */
export interface LoadRules {
  /** The service clock's time: scheduledAt must be in the future. */
  now: number
  maxJsonDepth: number
  chunkSize: number
}

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

/** Fills in missing identifiers (generated ids cannot be related to the source record). */
export function queuedContacts(contacts: ContactInput[]): QueuedContact[] {
  return contacts.map(c => (c.identifier ? { ...c, identifier: c.identifier, identifierGenerated: false } : { ...c, identifier: newOrderedId(), identifierGenerated: true }))
}

/** Valid contacts as a load ready to queue. */
export function chunkLoad(contacts: ContactInput[], chunkSize: number): PreparedLoad {
  return { count: contacts.length, chunks: splitIntoChunks(queuedContacts(contacts), chunkSize).map(chunk => JSON.stringify(chunk)) }
}

/** A request body checked (JSON, depth, schema, time rules: the route's Invalid errors) and chunked. */
export function loadFromBody(body: Buffer, rules: LoadRules): PreparedLoad {
  return chunkLoad(parseContactsBody(parseJsonBody(body, rules.maxJsonDepth), rules.now), rules.chunkSize)
}
