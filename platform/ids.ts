// Identifiers. Random ones come from node:crypto's randomUUID; stable ones (the same input
// always gives the same id, used to make retried writes idempotent) are name-based UUIDs
// (RFC 9562 version 5 layout over SHA-256 instead of SHA-1).
import { createHash, randomUUID } from 'node:crypto'
import { v7 } from 'uuid'

export const newId = () => randomUUID()

/**
 * A time-ordered UUID (RFC 9562 version 7, from the `uuid` package): for records written in
 * bulk and kept (contacts, attempts, operations, batch log entries). Documents are stored in id
 * order, so ids in creation order append to the end of the store's tree instead of touching a
 * random page each, and bulk inserts do not slow down as the store grows (bench/ordered-ids).
 * Sessions keep random ids: they are handed to clients and never inserted in bulk.
 */
export const newOrderedId = () => v7()

export function stableId(name: string): string {
  const h = createHash('sha256').update(name).digest('hex')
  const variant = ((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16)
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i
export const isUuid = (value: string) => UUID.test(value)
