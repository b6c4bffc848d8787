// The MongoDB query and update language on plain documents, shared by the embedded stores:
// mingo for the whole language, plus plain-JS fast paths for the shapes the hot paths send
// (scalar equalities, $in, ranges, $set/$unset/$inc, scalar sort keys).
import { randomUUID } from 'node:crypto'
import { isDeepStrictEqual } from 'node:util'
import { find as mingoFind, Query, update as applyUpdate } from 'mingo'
import { type BulkOp, type BulkResult, type Doc, DuplicateKeyError, type Filter, type FindOptions, type Update, UpdateRefusedError, type UpdateResult } from './types.js'

export const emptyBulk = (): BulkResult => ({
  insertedCount: 0,
  matchedCount: 0,
  modifiedCount: 0,
  upsertedCount: 0,
  deletedCount: 0,
  duplicateKeyIndexes: [],
})

/** What an embedded store does for each kind of bulk operation, synchronously. */
export interface BulkTarget {
  insert(doc: Doc): void
  updateOne(filter: Filter, update: Update, upsert?: boolean): UpdateResult
  updateMany(filter: Filter, update: Update): UpdateResult
  delete(filter: Filter, limit?: number): number
}

/**
 * One operation of a bulk write, counted into `result`; a duplicate key is recorded under its
 * index instead of thrown. Answers false when an ordered bulk must stop there.
 */
export function applyBulkOp(target: BulkTarget, op: BulkOp, index: number, ordered: boolean, result: BulkResult): boolean {
  try {
    if ('insertOne' in op) {
      target.insert(op.insertOne.document)
      result.insertedCount++
    } else if ('updateOne' in op || 'updateMany' in op) {
      const r = 'updateOne' in op ? target.updateOne(op.updateOne.filter, op.updateOne.update, op.updateOne.upsert) : target.updateMany(op.updateMany.filter, op.updateMany.update)
      result.matchedCount += r.matchedCount
      result.modifiedCount += r.modifiedCount
      if (r.upsertedId) result.upsertedCount++
    } else if ('deleteOne' in op) {
      result.deletedCount += target.delete(op.deleteOne.filter, 1)
    } else {
      result.deletedCount += target.delete(op.deleteMany.filter)
    }
    return true
  } catch (error) {
    if (!(error instanceof DuplicateKeyError)) throw error
    result.duplicateKeyIndexes.push(index)
    return !ordered
  }
}

/**
 * Deep copy of a document: objects, arrays and Dates are copied; primitives (strings
 * included: large serialized snapshots live in documents) are shared, which structuredClone
 * would copy byte by byte. Anything exotic falls back to structuredClone.
 */
export function clone<T>(value: T): T {
  if (value === null || typeof value !== 'object') return value
  if (Array.isArray(value)) return value.map(clone) as T
  if (value instanceof Date) return new Date(value.getTime()) as T
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) return structuredClone(value)
  const out: Record<string, unknown> = {}
  for (const key of Object.keys(value)) out[key] = clone((value as Record<string, unknown>)[key])
  return out as T
}

/** `stopAtArrays`: an array met on the way is returned as is (mongod looks into its elements). */
export function getPath(doc: Record<string, any>, path: string, stopAtArrays = false): unknown {
  if (!path.includes('.')) {
    const value = doc[path]
    return value === undefined ? null : value
  }
  let value: any = doc
  for (const part of path.split('.')) {
    if (value === null || typeof value !== 'object') return null
    if (stopAtArrays && Array.isArray(value)) return value
    value = value[part]
  }
  return value === undefined ? null : value
}

/**
 * $set / $unset / $inc (and $min / $max of numbers) on plain paths, applied directly: mingo's updater rebuilds its operator
 * context on every call, which would dominate bulk upserts. Anything else goes to mingo.
 * Returns whether the document changed, or undefined when the update needs mingo; throws
 * UpdateRefusedError where mongod refuses the update (`doc` may then be half changed: callers
 * pass a copy and drop it).
 * `copyOnWrite`: `doc` is a shallow copy of a document that must stay as it was; every object on
 * a path the update writes is copied before it is changed (see updatedCopy).
 */
export function applySimpleUpdate(doc: Record<string, any>, update: Update, copyOnWrite = false): boolean | undefined {
  for (const op in update) if (op !== '$set' && op !== '$unset' && op !== '$inc' && op !== '$min' && op !== '$max') return undefined
  let changed = false
  // Objects this update made or copied (made on the first dotted path: most updates have none).
  let copied: Set<object> | undefined
  // The object holding a path's last part (made on the way when `create`, refused through null or
  // a scalar as mongod does); undefined when the path crosses an array or a Date (left to mingo),
  // or, without `create`, null or a scalar. No tuple per path: every write of the store comes through here.
  const parentOf = (path: string, create: boolean): Record<string, any> | undefined => {
    if (!path.includes('.')) return doc
    const parts = path.split('.')
    if (copyOnWrite) copied ??= new Set()
    let node: any = doc
    for (let i = 0; i < parts.length - 1; i++) {
      const part = parts[i]!
      if (node[part] === undefined) {
        if (!create) return undefined
        node[part] = {}
        copied?.add(node[part])
      }
      let child = node[part]
      if (child === null && !create) return undefined
      // A field inside null, a number, a string or a boolean: mongod refuses the update (PathNotViable).
      if ((child === null || typeof child !== 'object') && create) {
        throw new UpdateRefusedError(`Cannot create field '${parts[i + 1]}' in element {${part}: ${JSON.stringify(child)}}`, 28)
      }
      if (typeof child !== 'object' || Array.isArray(child)) return undefined
      if (copied && !copied.has(child)) {
        // Not a plain object (a Date on the way): left to mingo, on a deep copy.
        if (Object.getPrototypeOf(child) !== Object.prototype) return undefined
        child = node[part] = { ...child }
        copied.add(child)
      }
      node = child
    }
    return node
  }
  const $set = update.$set
  for (const path in $set) {
    const value = $set[path]
    const parent = parentOf(path, true)
    const leaf = leafOf(path)
    if (!parent || isArrayIndex(leaf)) return undefined
    const current = parent[leaf]
    if (!(leaf in parent)) changed = true
    else if (value === null || typeof value !== 'object') changed ||= current !== value
    // Dates (most $sets carry an updatedAt): compared by time, without serializing them.
    else if (value instanceof Date) changed ||= !(current instanceof Date) || !Object.is(current.getTime(), value.getTime())
    // JSON text is field-order sensitive (as mongod is) but cannot tell a Date from its ISO string.
    else if (JSON.stringify(current) !== JSON.stringify(value) || !isDeepStrictEqual(current, value)) changed = true
    parent[leaf] = value !== null && typeof value === 'object' ? clone(value) : value
  }
  for (const path in update.$unset) {
    const parent = parentOf(path, false)
    const leaf = leafOf(path)
    if (parent && leaf in parent) {
      delete parent[leaf]
      changed = true
    }
  }
  const $inc = update.$inc
  for (const path in $inc) {
    const by = $inc[path]
    const parent = parentOf(path, true)
    const leaf = leafOf(path)
    if (!parent || typeof by !== 'number') return undefined
    const current = parent[leaf]
    // null, a string, a Date...: mongod refuses (TypeMismatch); only a missing field counts from 0.
    if (current !== undefined && typeof current !== 'number') {
      throw new UpdateRefusedError(`Cannot apply $inc to a value of non-numeric type: field '${path}' holds ${current === null ? 'null' : typeof current}`, 14)
    }
    if (by !== 0 || !(leaf in parent)) changed = true
    parent[leaf] = (current ?? 0) + by
  }
  // $min / $max of numbers (report blocks keep extremes this way); other operands go to mingo.
  for (const op of MIN_MAX) {
    const bounds = update[op]
    for (const path in bounds) {
      const value = bounds[path]
      const parent = parentOf(path, true)
      const leaf = leafOf(path)
      if (!parent || typeof value !== 'number') return undefined
      const current = parent[leaf]
      if (current === undefined || (current === null && op === '$max')) {
        parent[leaf] = value
        changed = true
      } else if (current === null) continue // null sorts below numbers (mongod's order)
      else if (typeof current !== 'number') return undefined
      else if (op === '$min' ? value < current : value > current) {
        parent[leaf] = value
        changed = true
      }
    }
  }
  return changed
}

const MIN_MAX = ['$min', '$max'] as const

/** Whether a path part is all digits (an array position: left to mingo). */
function isArrayIndex(part: string): boolean {
  if (part.length === 0) return false
  for (let i = 0; i < part.length; i++) {
    const c = part.charCodeAt(i)
    if (c < 48 || c > 57) return false
  }
  return true
}

/** A path's last part ("b" of "a.b"). */
function leafOf(path: string): string {
  const dot = path.lastIndexOf('.')
  return dot < 0 ? path : path.slice(dot + 1)
}

/**
 * Applies an update to a private copy of a stored document and returns [document, changed]:
 * the fast path when it can, else mingo on a fresh copy (the fast path may have stopped halfway).
 */
export function updatedCopy<T extends Record<string, any>>(doc: T, update: Update): [T, boolean] {
  // A shallow copy whose written paths are copied on the way (a contact's addresses and custom
  // fields are not copied by a claim that sets its state): `doc` itself is never changed.
  const next = { ...doc }
  const simple = applySimpleUpdate(next, update, true)
  if (simple !== undefined) return [next, simple]
  const fresh = clone(doc)
  return [fresh, applyUpdate(fresh, update as any).length > 0]
}

/** Mongo filters as cache keys: Dates and RegExps keep their type (plain JSON would not). */
export function filterKey(filter: Filter): string {
  return JSON.stringify(filter, function (this: any, key: string, value: unknown) {
    const raw = this[key]
    if (raw instanceof Date) return { $__date: raw.getTime() }
    if (raw instanceof RegExp) return { $__regexp: raw.toString() }
    return value
  })
}

/**
 * Compiled mingo queries, reused for repeated filters: compiling one copies mingo's whole
 * operator table, and hot callers repeat the same filter (a session's own id).
 */
const compiledQueries = new Map<string, Query<any>>()
export function compiled(filter: Filter): Query<any> {
  const key = filterKey(filter)
  let query = compiledQueries.get(key)
  if (!query) {
    if (compiledQueries.size >= 10_000) compiledQueries.delete(compiledQueries.keys().next().value!)
    query = new Query(filter)
    compiledQueries.set(key, query)
  }
  return query
}

export const isPrimitive = (v: unknown) => v === null || typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean'

const isRangeOperand = (v: unknown) => typeof v === 'number' || typeof v === 'string' || v instanceof Date

/** Operand arrays of $in / $nin longer than this are checked once and tested through a Set. */
const SET_FROM = 16
const operandSets = new WeakMap<unknown[], Set<unknown> | null>()
/** Whether `operand` holds `value`; undefined when it holds anything but scalars (left to mingo). */
function includes(operand: unknown[], value: unknown): boolean | undefined {
  if (operand.length <= SET_FROM) {
    for (const item of operand) if (!isPrimitive(item)) return undefined
    return operand.includes(value)
  }
  let set = operandSets.get(operand)
  if (set === undefined) operandSets.set(operand, (set = operand.every(isPrimitive) ? new Set(operand) : null))
  return set ? set.has(value) : undefined
}

/**
 * One operator of a condition against a document's value: true or false, or undefined for an
 * operator or operand fastMatch() leaves to mingo. Ranges compare only values of the operand's
 * type (mongod's type bracketing).
 */
function testOperator(op: string, operand: unknown, value: unknown): boolean | undefined {
  switch (op) {
    case '$in':
    case '$nin': {
      const found = Array.isArray(operand) ? includes(operand, value) : undefined
      return found === undefined ? undefined : found === (op === '$in')
    }
    // A missing field reads as null here, as mongod matches it.
    case '$ne':
      return isPrimitive(operand) ? !same(value, operand) : undefined
    case '$lt':
    case '$lte':
    case '$gt':
    case '$gte': {
      if (!isRangeOperand(operand)) return undefined
      const date = operand instanceof Date
      if (date ? !(value instanceof Date) : typeof value !== typeof operand) return false
      const x = date ? (value as Date).getTime() : (value as number | string)
      const bound = date ? operand.getTime() : (operand as number | string)
      // NaN (never in JSON; an invalid Date): how it orders is mingo's to say.
      if (x !== x || bound !== bound) return undefined
      return op === '$lt' ? x < bound : op === '$lte' ? x <= bound : op === '$gt' ? x > bound : x >= bound
    }
    default:
      return undefined
  }
}

const DOLLAR = 36

/**
 * Matches a document against the filters selection queries and writes send, in plain JS and
 * without building anything per filter: top-level or dotted fields with scalar equality, $in,
 * $nin and $ne of scalars, $lt/$lte/$gt/$gte on a number, string or Date, $exists on a
 * top-level field. undefined when the filter has anything else, or when the document's value on
 * a filtered path is an array or an embedded document (mongod's rules for those are richer):
 * mingo decides then.
 */
export function fastMatch(doc: Doc, filter: Filter): boolean | undefined {
  // $and, $or, $expr...: the whole filter is mingo's (which also refuses a malformed one).
  for (const path in filter) if (path.charCodeAt(0) === DOLLAR) return undefined
  for (const path in filter) {
    const condition = (filter as Record<string, unknown>)[path]
    if (condition !== null && typeof condition === 'object') {
      if (condition instanceof Date || Array.isArray(condition)) return undefined
      const ops = condition as Record<string, unknown>
      let n = 0
      for (const _ in ops) n++
      if (n === 0) return undefined
      // $exists on a top-level field (a stored null exists; only an absent field does not).
      if ('$exists' in ops) {
        if (n !== 1 || typeof ops.$exists !== 'boolean' || path.includes('.')) return undefined
        if (((doc as Record<string, unknown>)[path] !== undefined) !== ops.$exists) return false
        continue
      }
      const value = getPath(doc, path, true)
      if (value !== null && typeof value === 'object' && !(value instanceof Date)) return undefined
      // Ranges may be combined; $in, $nin and $ne stand alone.
      for (const op in ops) {
        if (n > 1 && op !== '$lt' && op !== '$lte' && op !== '$gt' && op !== '$gte') return undefined
        const passed = testOperator(op, ops[op], value)
        if (passed !== true) return passed
      }
      continue
    }
    if (!isPrimitive(condition)) return undefined
    const value = getPath(doc, path, true)
    if (value !== null && typeof value === 'object' && !(value instanceof Date)) return undefined
    if (!same(value, condition)) return false
  }
  return true
}

/** Scalar equality as mongod has it: NaN equals NaN (as in $in). */
const same = (a: unknown, b: unknown) => a === b || (a !== a && b !== b)

/** mongod's order across the scalar types a sort key may hold: null, numbers, strings, booleans, dates. */
export const typeRank = (v: unknown) => (v === null ? 0 : typeof v === 'number' ? 1 : typeof v === 'string' ? 2 : typeof v === 'boolean' ? 3 : 4)

/** Sort keys of a document, or undefined when one is an array or embedded document (mingo sorts those). */
export function sortKeys(doc: Doc, fields: string[]): unknown[] | undefined {
  const keys: unknown[] = []
  for (const field of fields) {
    const value = getPath(doc, field, true)
    if (value !== null && typeof value === 'object' && !(value instanceof Date)) return undefined
    keys.push(value)
  }
  return keys
}

export function compareKeys(a: unknown[], b: unknown[], directions: number[]): number {
  for (let i = 0; i < directions.length; i++) {
    const x = a[i]
    const y = b[i]
    let c = typeRank(x) - typeRank(y)
    if (c === 0 && x !== null) {
      const xv = x instanceof Date ? x.getTime() : (x as number | string | boolean)
      const yv = y instanceof Date ? y.getTime() : (y as number | string | boolean)
      c = xv < yv ? -1 : xv > yv ? 1 : 0
    }
    if (c !== 0) return c * directions[i]!
  }
  return 0
}

/**
 * The whole filter as a predicate: the plain-JS matcher where it decides, mingo for the rest,
 * compiled only when first needed (compiling costs far more than matching, and hot filters such
 * as one contact's key are rarely repeated, so the compiled-query cache would not help them).
 */
export function matcherOf(filter: Filter): (doc: Doc) => boolean {
  let query: Query<any> | undefined
  return doc => fastMatch(doc, filter) ?? (query ??= compiled(filter)).test(doc)
}

/**
 * Filter, sort, skip and limit in plain JS when every sort key is a scalar (documents fastMatch()
 * cannot decide are tested by mingo, one at a time): with a limit it keeps only the first
 * skip + limit in order (a bounded insertion), instead of sorting every match. undefined: let
 * mingo do it.
 */
export function fastFind<T extends Doc>(candidates: Iterable<T>, filter: Filter, options: FindOptions): T[] | undefined {
  const matches = matcherOf(filter)
  const skip = options.skip ?? 0
  if (!options.sort) {
    const hits: T[] = []
    const want = options.limit ? skip + options.limit : Infinity
    for (const doc of candidates) {
      if (matches(doc)) hits.push(doc)
      if (hits.length >= want) break
    }
    return hits.slice(skip)
  }
  const fields = Object.keys(options.sort)
  const directions = fields.map(f => (options.sort![f] === -1 ? -1 : 1))
  // Ties keep candidate order (as mingo's stable sort does): the sequence number breaks them.
  const cmp = (a: { keys: unknown[]; seq: number }, b: { keys: unknown[]; seq: number }) => compareKeys(a.keys, b.keys, directions) || a.seq - b.seq
  const keep = options.limit ? skip + options.limit : Infinity
  const top: { doc: T; keys: unknown[]; seq: number }[] = []
  let seq = 0
  for (const doc of candidates) {
    if (!matches(doc)) continue
    const keys = sortKeys(doc, fields)
    if (!keys) return undefined
    const entry = { doc, keys, seq: seq++ }
    if (keep === Infinity) {
      top.push(entry)
      continue
    }
    if (top.length >= keep && cmp(entry, top[top.length - 1]!) >= 0) continue
    let lo = 0
    let hi = top.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (cmp(top[mid]!, entry) <= 0) lo = mid + 1
      else hi = mid
    }
    top.splice(lo, 0, entry)
    if (top.length > keep) top.pop()
  }
  if (keep === Infinity) top.sort(cmp)
  return top.slice(skip, options.limit ? skip + options.limit : undefined).map(e => e.doc)
}

/** The values a filter allows for one field, when it pins them down (equality or $in). */
export function pinnedValues(filter: Filter, field: string): unknown[] | undefined {
  const condition = filter[field]
  if (isPrimitive(condition)) return [condition]
  if (condition && typeof condition === 'object' && Array.isArray(condition.$in) && condition.$in.every(isPrimitive)) {
    return condition.$in
  }
  return undefined
}

/**
 * The document an upsert inserts: the filter's equalities (plain values, embedded documents,
 * $eq) seed it, then the update's operators, then $setOnInsert. _id from $setOnInsert, else the
 * filter, else a generated UUID string (mongod would make an ObjectId; repositories give _id).
 */
export function upsertDocument(filter: Filter, update: Update): Doc {
  const seed: Record<string, any> = {}
  for (const [k, v] of Object.entries(filter)) {
    if (k.startsWith('$')) continue
    const operators = v !== null && typeof v === 'object' && !(v instanceof Date) && !Array.isArray(v) && Object.keys(v).some(o => o.startsWith('$'))
    if (!operators) seed[k] = v
    else if ('$eq' in v) seed[k] = v.$eq
  }
  const { $setOnInsert, ...modifier } = update
  const { _id: insertId, ...onInsert } = ($setOnInsert ?? {}) as Record<string, any>
  const { _id: seedId, ...seedFields } = seed
  let doc = { _id: insertId ?? seedId ?? randomUUID() } as Record<string, any>
  if (Object.keys(seedFields).length > 0) doc = updatedCopy(doc, { $set: seedFields })[0] // dotted keys become nested
  if (Object.keys(modifier).length > 0) doc = updatedCopy(doc, modifier)[0]
  if (Object.keys(onInsert).length > 0) doc = updatedCopy(doc, { $set: onInsert })[0]
  return doc as Doc
}

/** A copy of the update without $setOnInsert (which only applies to an inserted document). */
export function withoutSetOnInsert(update: Update): Update {
  const { $setOnInsert: _ignored, ...modifier } = update
  return modifier
}

/**
 * Documents projected as MongoDB projects them. Top-level inclusions or exclusions (the shapes the
 * repositories send) are copied here; anything else goes to mingo, once for all the documents:
 * mingo builds its operator context for every query, which a query per document would pay.
 */
export function projectDocs<T extends Doc>(docs: T[], projection: Record<string, 0 | 1 | boolean> | undefined): T[] {
  if (!projection || docs.length === 0 || Object.keys(projection).length === 0) return docs
  const fields = Object.keys(projection).filter(k => k !== '_id')
  const plain = fields.every(k => !k.includes('.') && !k.startsWith('$')) && Object.values(projection).every(v => v === 0 || v === 1 || typeof v === 'boolean')
  const including = fields.filter(k => projection[k]).length
  if (!plain || (including !== 0 && including !== fields.length)) return mingoFind(docs, {}, projection).all() as T[]
  const withId = projection._id === undefined ? true : !!projection._id
  if (including > 0 || (fields.length === 0 && withId)) {
    // Inclusion (or only `_id: 1`): the named fields, and _id unless `_id: 0`.
    return docs.map(doc => {
      const out: Record<string, unknown> = {}
      if (withId && '_id' in doc) out._id = doc._id
      for (const k of fields) if (k in doc) out[k] = doc[k]
      return out as T
    })
  }
  // Exclusion: everything but the named fields (and _id when `_id: 0`).
  const dropped = new Set(withId ? fields : [...fields, '_id'])
  return docs.map(doc => {
    const out: Record<string, unknown> = {}
    for (const k of Object.keys(doc)) if (!dropped.has(k)) out[k] = doc[k]
    return out as T
  })
}
