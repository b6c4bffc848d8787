// Ordered index keys for the LMDB store. An index entry's key is a flat array of primitives
// (lmdb-js's ordered-binary encoding sorts arrays element by element): for each indexed field
// a type rank then a payload, then the document's _id, so entries sort as mongod sorts values
// (null < numbers < strings < objects < arrays < booleans < dates, then by value) and ties come
// in _id order. A document whose indexed path holds an array gets one entry per element
// (mongod's multikey indexes); the index is then marked multikey and no longer serves sorts.
//
// Payloads are the values themselves, except: Dates are their milliseconds, booleans 0/1,
// embedded documents and other types 0 (their rank only), and strings are escaped and cut to
// MAX_KEY_STRING characters to stay under LMDB's key size limit (keyString). An index therefore
// narrows and orders the candidates; the full filter is still checked on each document it yields.
//
// Why strings are escaped: lmdb-js writes a string of fewer than 64 characters with U+0000 to
// U+0004 escaped, and a longer one byte for byte, while a zero byte ends each part of an array
// key. Unescaped, a long string holding U+0000 would read back as two parts ("x"*70 + "\0y"
// sorted and matched as "x"*70 followed by "y"), and two different strings could be written as
// the same bytes (a short one with an escape and a long one holding the escape's bytes). So no
// key string holds U+0000 to U+0005: ESCAPE followed by one character stands for each of them
// (U+0006 to U+000B) and for a lone surrogate (U+0100 to U+08FF; in a long string lmdb-js would
// write it as U+FFFD).
// Every string then has one key, read back as written, and keys sort as the strings do by code
// point (a lone surrogate, which MongoDB cannot store, sorts among the escaped characters).

export const RANK = { null: 1, number: 2, string: 3, object: 4, array: 5, other: 6, boolean: 8, date: 9 } as const

/** Strings longer than this are cut in index keys (LMDB keys are at most 1978 bytes). */
export const MAX_KEY_STRING = 100

/**
 * The key encoding of this version, kept in each index's declaration: an index declared with
 * another is rebuilt (LmdbCollection.addIndex), and serves meanwhile only what reads the same
 * in both (planner.ts). FIRST_ENCODING, of declarations that name none, wrote strings as they
 * are, cut at MAX_KEY_STRING characters, and the _id as it is.
 */
export const KEY_ENCODING = 2
export const FIRST_ENCODING = 1

const ESCAPE = '\u0005'
const NEEDS_ESCAPE = /[\u0000-\u0005\uD800-\uDFFF]/
/** A surrogate pair (kept), or a character to escape. */
const TO_ESCAPE = /[\uD800-\uDBFF][\uDC00-\uDFFF]|[\u0000-\u0005\uD800-\uDFFF]/g
const ESCAPED = /\u0005([\s\S])/g

function escapeString(s: string): string {
  if (!NEEDS_ESCAPE.test(s)) return s
  return s.replace(TO_ESCAPE, c => {
    if (c.length === 2) return c
    const unit = c.charCodeAt(0)
    return ESCAPE + String.fromCharCode(unit <= 5 ? unit + 6 : unit - 0xd800 + 0x100)
  })
}

/** A string as a key holds it, when it was not cut. */
export function unescapeString(s: string): string {
  if (!s.includes(ESCAPE)) return s
  return s.replace(ESCAPED, (_, c: string) => {
    const unit = c.charCodeAt(0)
    return String.fromCharCode(unit < 0x100 ? unit - 6 : unit - 0x100 + 0xd800)
  })
}

/**
 * A string as a key holds it: escaped, and cut after MAX_KEY_STRING characters but never
 * between the halves of a surrogate pair (a lone half would be escaped, and sort elsewhere).
 */
function keyString(s: string): string {
  if (s.length <= MAX_KEY_STRING) return escapeString(s)
  const last = s.charCodeAt(MAX_KEY_STRING - 1)
  return escapeString(s.slice(0, last >= 0xd800 && last <= 0xdbff ? MAX_KEY_STRING + 1 : MAX_KEY_STRING))
}

/** Whether a string has the same key in every encoding (an index of an older one can find it). */
export const sameInEveryEncoding = (s: string) => !NEEDS_ESCAPE.test(s)

/** An index entry's key: a document's key parts, then its _id. */
export const entryKey = (key: KeyPart[], id: string, encoding = KEY_ENCODING): KeyPart[] => [...key, encoding === FIRST_ENCODING ? id : escapeString(id)]

/** The _id an index entry's key ends with. */
export function entryId(entry: readonly KeyPart[], encoding = KEY_ENCODING): string {
  const id = entry[entry.length - 1] as string
  return encoding === FIRST_ENCODING ? id : unescapeString(id)
}

/** Sorts after every key part (a byte no ordered-binary value starts with). */
export const KEY_MAX = Buffer.from([0xff])

export type KeyPart = number | string
/** One indexed value: [rank, payload]. */
export type Encoded = [number, KeyPart]

const EMPTY_ARRAY = Symbol('empty array')
const NESTED_ARRAY = Symbol('nested array')

export function encodeValue(value: unknown, encoding = KEY_ENCODING): Encoded {
  const rank = rankOf(value)
  return [rank, payloadOf(value, rank, encoding)]
}

/** The rank of a value in index order (see RANK). */
function rankOf(value: unknown): number {
  if (value === null || value === undefined) return RANK.null
  switch (typeof value) {
    case 'number':
    case 'bigint':
      return RANK.number
    case 'string':
      return RANK.string
    case 'boolean':
      return RANK.boolean
  }
  if (value instanceof Date) return RANK.date
  if (value === EMPTY_ARRAY || value === NESTED_ARRAY) return RANK.array
  if (typeof value === 'object' && (Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null)) return RANK.object
  return RANK.other
}

/** The payload that follows a value's rank in a key. */
function payloadOf(value: unknown, rank: number, encoding: number): KeyPart {
  switch (rank) {
    case RANK.number:
      // -0 is 0 (mongod indexes them as one value); lmdb-js's key encoding also cannot write -0:
      // the key would come back garbled and an update could not take it out again.
      return typeof value === 'bigint' ? Number(value) : Number.isNaN(value) ? -Infinity : (value as number) === 0 ? 0 : (value as number)
    case RANK.string:
      if (encoding !== FIRST_ENCODING) return keyString(value as string)
      return (value as string).length > MAX_KEY_STRING ? (value as string).slice(0, MAX_KEY_STRING) : (value as string)
    case RANK.boolean:
      return value ? 1 : 0
    case RANK.date:
      return (value as Date).getTime()
  }
  return 0
}

/**
 * Whether an encoded string may have been cut (so equal payloads do not prove equal values). In
 * any encoding a cut string is that long or longer; so is a short one with many escapes.
 */
export const mayBeCut = (e: Encoded) => typeof e[1] === 'string' && e[1].length >= MAX_KEY_STRING

/** Whether a key (fields only) holds a string that may have been cut: equal keys then do not prove equal values. */
export const keyMayBeCut = (key: readonly KeyPart[]) => key.some((part, i) => i % 2 === 1 && mayBeCut([key[i - 1] as number, part]))

/**
 * The values an index holds for one path of a document, as mongod indexes them: a missing path
 * is null, an array on the way or at the end contributes each element. `multi` reports arrays.
 */
export function pathValues(doc: Record<string, any>, path: string): { values: unknown[]; multi: boolean } {
  const out: unknown[] = []
  let multi = false
  const parts = path.split('.')
  const walk = (value: any, i: number) => {
    if (i === parts.length) {
      if (!Array.isArray(value)) {
        out.push(value)
        return
      }
      multi = true
      if (value.length === 0) out.push(EMPTY_ARRAY)
      for (const element of value) out.push(Array.isArray(element) ? NESTED_ARRAY : element)
      return
    }
    if (Array.isArray(value)) {
      multi = true
      if (value.length === 0) out.push(null)
      for (const element of value) {
        if (element !== null && typeof element === 'object' && !Array.isArray(element) && !(element instanceof Date)) walk(element[parts[i]!], i + 1)
        else out.push(null)
      }
      return
    }
    if (value === null || value === undefined || typeof value !== 'object' || value instanceof Date) {
      out.push(null)
      return
    }
    walk(value[parts[i]!], i + 1)
  }
  walk(doc, 0)
  return { values: out, multi }
}

export const NOT_PLAIN = Symbol('not plain')

/**
 * The one value pathValues() gives for a path (null when something other than an embedded
 * document lies on the way, undefined when the last part is missing), or NOT_PLAIN when an array
 * lies on the way or the value is an embedded document or an array (pathValues() then says what
 * the index holds). Allocates nothing for a top-level field: every write comes here.
 */
export function plainValueAt(doc: Record<string, any>, path: string): unknown {
  let value: any = doc
  let start = 0
  for (;;) {
    const dot = path.indexOf('.', start)
    value = value[dot < 0 ? (start === 0 ? path : path.slice(start)) : path.slice(start, dot)]
    if (dot < 0) break
    if (Array.isArray(value)) return NOT_PLAIN
    if (value === null || value === undefined || typeof value !== 'object' || value instanceof Date) return null
    start = dot + 1
  }
  if (value !== null && typeof value === 'object' && !(value instanceof Date)) return NOT_PLAIN
  return value
}

/** Most entries one document may put in one index (parallel arrays multiply). */
const MAX_ENTRIES_PER_DOC = 1000

export class IndexKeyError extends Error {
  override name = 'IndexKeyError'
}

/**
 * The key prefixes (fields only, without _id) a document puts in an index, deduplicated, and
 * whether any indexed path held an array.
 */
export function documentKeys(doc: Record<string, any>, fields: string[], encoding = KEY_ENCODING): { keys: KeyPart[][]; multi: boolean } {
  // Most documents hold a plain value at every indexed path (a session's deadlines.idle too): one
  // key, built directly.
  const key: KeyPart[] = []
  for (const field of fields) {
    const value = plainValueAt(doc, field)
    if (value === NOT_PLAIN) return everyKey(doc, fields, encoding)
    // Rank and payload pushed as they are: no [rank, payload] pair per field (every write builds these keys).
    const rank = rankOf(value)
    key.push(rank, payloadOf(value, rank, encoding))
  }
  return { keys: [key], multi: false }
}

/** Every key prefix of a document whose indexed paths go through embedded documents or arrays. */
function everyKey(doc: Record<string, any>, fields: string[], encoding: number): { keys: KeyPart[][]; multi: boolean } {
  let combos: KeyPart[][] = [[]]
  let multi = false
  for (const field of fields) {
    const found = pathValues(doc, field)
    multi ||= found.multi
    const encoded = new Map<string, Encoded>()
    for (const value of found.values) {
      const e = encodeValue(value, encoding)
      encoded.set(partId(e), e)
    }
    const next: KeyPart[][] = []
    for (const prefix of combos) for (const e of encoded.values()) next.push([...prefix, e[0], e[1]])
    if (next.length > MAX_ENTRIES_PER_DOC) throw new IndexKeyError(`document ${doc._id} would put more than ${MAX_ENTRIES_PER_DOC} entries in one index`)
    combos = next
  }
  return { keys: combos, multi }
}

/** Whether two keys (part lists) are the same, as partId() would tell. */
export function sameKey(a: readonly KeyPart[], b: readonly KeyPart[]): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i]) && !(a[i] === 0 && b[i] === 0)) return false
  return true
}

/** A string naming a key (part list) exactly, for sets and diffs (a KEY_ENCODING string holds no U+0000). */
export function partId(parts: readonly KeyPart[]): string {
  let out = ''
  for (const p of parts) out += (typeof p === 'number' ? 'n' + (Object.is(p, -0) ? '0' : String(p)) : 's' + p) + '\u0000'
  return out
}

/**
 * Compares two payloads of the same rank. Strings compare as JS does (UTF-16 units), as mingo
 * does (escapes keep that order); the keys themselves sort by UTF-8 bytes, which differs only
 * between characters beyond U+FFFF and those in U+E000..U+FFFF.
 */
export function comparePayload(a: KeyPart, b: KeyPart): number {
  return a < b ? -1 : a > b ? 1 : 0
}
