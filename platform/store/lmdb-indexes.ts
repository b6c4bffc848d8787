// Index declarations of the embedded store: what m:indexes keeps of each index, what a
// collection makes of it (LmdbCollection.loadIndexes), and how definitions and values compare.
import { isDeepStrictEqual } from 'node:util'
import type { Database } from 'lmdb'
import type { Doc, IndexSpec } from './types.js'
import { FIRST_ENCODING, NOT_PLAIN, pathValues, plainValueAt, type KeyPart } from './index-keys.js'
import type { IndexPlan, PlannableIndex } from './planner.js'

/** The m:indexes entry whose number moves with every change of a collection's declarations. */
export const revisionKey = (collection: string) => `revision:${collection}`

/** An IndexSpec as declared (partitionFields is the in-memory store's alone), and its state here. */
export interface StoredIndex extends Omit<IndexSpec, 'partitionFields'> {
  /** The key encoding its entries are written in (index-keys.ts KEY_ENCODING); none: FIRST_ENCODING. */
  encoding?: number
  multikey?: boolean
  /** Which database holds the entries: i:<collection>:<index>, then @1, @2... after each online rebuild. */
  generation?: number
  /** Being built in the background (see buildOnline); `previous` serves queries meanwhile. */
  building?: boolean
  previous?: StoredIndex
}

export interface LiveIndex extends PlannableIndex {
  spec: StoredIndex
  encoding: number
  /** One entry per (key, _id) with an empty value; a counted index has none. */
  db?: Database<Buffer, KeyPart[]>
  /** A counted index's number of documents per key. */
  counts?: Database<number, KeyPart[]>
  /** A partial index: whether a document has entries in it. */
  covers?: (doc: Doc) => boolean
  /** The fields whose values decide the index's entries: its key's, and its partial filter's. */
  watched: string[]
  /** Kept up by every write but read by no query until its background build is done. */
  building?: boolean
  /** The definition of before, serving queries while its replacement is built. */
  previous?: boolean
}
/** An index with entries: what queries read documents through. */
export type EntryIndex = LiveIndex & { db: Database<Buffer, KeyPart[]> }

export function passes(chosen: IndexPlan, key: KeyPart[]): boolean {
  for (const { position, test } of chosen.checks) if (!test(key[position] as number, key[position + 1]!)) return false
  return true
}

/** Whether a definition can replace another in the background: both have entries, neither is unique (its check needs every entry). */
export function rebuildsOnline(serving: StoredIndex, wanted: StoredIndex): boolean {
  return !serving.counted && !wanted.counted && !serving.unique && !wanted.unique
}

export function sameDefinition(a: StoredIndex, b: StoredIndex): boolean {
  return (
    isDeepStrictEqual(Object.entries(a.key), Object.entries(b.key)) &&
    !!a.unique === !!b.unique &&
    a.expireAfterSeconds === b.expireAfterSeconds &&
    !!a.counted === !!b.counted &&
    (a.encoding ?? FIRST_ENCODING) === (b.encoding ?? FIRST_ENCODING) &&
    isDeepStrictEqual(Object.entries(a.partialFilterExpression ?? {}), Object.entries(b.partialFilterExpression ?? {}))
  )
}

/** Whether an update that writes `paths` can change the entries of an index on `fields`. */
export function watchesAny(fields: string[], paths: string[]): boolean {
  for (const field of fields) for (const path of paths) if (onPath(path, field)) return true
  return false
}

/** Whether `path` is `field`, or one lies inside the other (a.b and a.b.c), without building `${path}.`. */
export function onPath(path: string, field: string): boolean {
  if (path.length === field.length) return path === field
  const short = path.length < field.length ? path : field
  const long = short === path ? field : path
  return long.charCodeAt(short.length) === 46 /* . */ && long.startsWith(short)
}

/** Whether two versions of a document hold exactly the same values on these fields (so the same index entries). */
export function sameIndexedValues(a: Doc, b: Doc, fields: string[]): boolean {
  for (const field of fields) {
    // Most indexed values are a primitive or a Date with no array on the way: compared as they
    // are (every update of an indexed field comes here, and most change it: a claim's state).
    const x = plainValueAt(a, field)
    const y = plainValueAt(b, field)
    if (x !== NOT_PLAIN && y !== NOT_PLAIN) {
      if (x instanceof Date || y instanceof Date) {
        if (x instanceof Date && y instanceof Date && Object.is(x.getTime(), y.getTime())) continue
        return false
      }
      if (Object.is(x, y)) continue
      return false
    }
    if (!isDeepStrictEqual(pathValues(a, field).values, pathValues(b, field).values)) return false
  }
  return true
}

/** Whether two documents share a full (uncut) value tuple on these fields. */
export function sameValues(a: Doc, b: Doc, fields: string[]): boolean {
  const tuples = (doc: Doc) => {
    let combos: unknown[][] = [[]]
    for (const field of fields) combos = combos.flatMap(p => pathValues(doc, field).values.map(v => [...p, v instanceof Date ? v.getTime() : v ?? null]))
    return combos
  }
  const theirs = tuples(b)
  return tuples(a).some(t => theirs.some(u => isDeepStrictEqual(t, u)))
}
