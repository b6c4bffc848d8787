// Counts per distinct value tuple, the store's answer to "how many of this batch's contacts are
// in each state, and how did the done ones end" without reading the batch.
//
// `countBy(match, fields)` is part of the collection contract: every store answers it with a
// `$match` + `$group` (mongod and mingo count as they read). An index declared `counted` lets the
// embedded store answer it, and `countDocuments` over the same equalities, from a number per
// distinct key that its write transaction keeps, instead of reading one entry per document: a
// `GET` of a batch reads a dozen numbers whatever the batch's size, not its contacts. The
// numbers move inside the transaction that writes the document, so a crash never leaves them
// apart from the documents.
import { MAX_KEY_STRING, RANK, mayBeCut, unescapeString, type KeyPart } from './index-keys.js'
import { keyText } from './sliced-group.js'

/** Plain values a counted read can match on (and a group's values, null for a missing field). */
export type CountValue = string | number | boolean | null | Date

export interface CountRow {
  /** The group's values, in the order of `fields`; a missing field is null. */
  values: CountValue[]
  n: number
}

/** The `$match` + `$group` that answers countBy on any store (field names inside `_id` cannot hold dots). */
export function countByPipeline(match: Record<string, CountValue>, fields: string[]) {
  const key: Record<string, string> = {}
  fields.forEach((field, i) => (key[`k${i}`] = `$${field}`))
  return [{ $match: match }, { $group: { _id: key, n: { $sum: 1 } } }]
}

/** The rows of countByPipeline, missing and null merged (as counted indexes and `{ field: null }` see them). */
export function countRowsOf(groups: { _id: Record<string, unknown>; n: number }[], fields: string[]): CountRow[] {
  const rows = new Map<string, CountRow>()
  for (const group of groups) {
    const values = fields.map((_, i) => (group._id[`k${i}`] ?? null) as CountValue)
    const id = keyText(values)
    const row = rows.get(id)
    if (row) row.n += group.n
    else rows.set(id, { values, n: group.n })
  }
  return [...rows.values()]
}

/**
 * The key value a key part pair stands for, or undefined when the key cannot tell (an object or
 * array, of which the key keeps only the type, or a string cut to the key's length).
 */
export function keyValue(rank: number, payload: KeyPart): CountValue | undefined {
  switch (rank) {
    case RANK.null:
      return null
    case RANK.number:
      return payload === -Infinity ? undefined : (payload as number) // or NaN
    case RANK.string:
      return mayBeCut([rank, payload]) ? undefined : unescapeString(payload as string)
    case RANK.boolean:
      return payload === 1
    case RANK.date:
      return new Date(payload as number)
    default:
      return undefined
  }
}

/** Whether `value` is one a counted index can match exactly (a string of the key's length or longer may have been cut). */
export const countable = (value: unknown): value is CountValue =>
  value === null ||
  typeof value === 'boolean' ||
  // NaN is keyed as -Infinity: neither can tell the two apart.
  (typeof value === 'number' && !Number.isNaN(value) && value !== -Infinity) ||
  (value instanceof Date && !Number.isNaN(value.getTime())) ||
  (typeof value === 'string' && value.length < MAX_KEY_STRING)

/** Most key ranges one counted read takes (the product of its `$in` lists). */
const MAX_PREFIXES = 64

/** The values an equality allows: a plain value, or a `$in` of plain values; undefined for anything else. */
function allowed(condition: unknown): CountValue[] | undefined {
  if (countable(condition)) return [condition]
  if (condition === null || typeof condition !== 'object' || Object.keys(condition).length !== 1) return undefined
  const values = (condition as { $in?: unknown }).$in
  if (!Array.isArray(values) || values.length === 0 || !values.every(countable)) return undefined
  // Equal values once (a count per value would count their documents twice).
  return [...new Map(values.map(v => [JSON.stringify([typeof v, v instanceof Date ? v.getTime() : v]), v])).values()]
}

/**
 * How a counted index with these fields answers a count: the value tuples of its leading fields
 * that the equalities (or `$in`s) allow, one key range each, and the key positions of the fields
 * to group by; null when it cannot.
 */
export function countPlan(indexFields: string[], match: Record<string, unknown>, fields: string[]): { prefixes: CountValue[][]; groupPositions: number[] } | null {
  const pinned = Object.keys(match)
  if (pinned.length > indexFields.length) return null
  const prefix = indexFields.slice(0, pinned.length)
  let prefixes: CountValue[][] = [[]]
  for (const field of prefix) {
    const values = pinned.includes(field) ? allowed(match[field]) : undefined
    if (!values) return null
    prefixes = prefixes.flatMap(p => values.map(v => [...p, v]))
    if (prefixes.length > MAX_PREFIXES) return null
  }
  const groupPositions = fields.map(field => indexFields.indexOf(field))
  if (groupPositions.some(p => p < pinned.length)) return null
  return { prefixes, groupPositions }
}
