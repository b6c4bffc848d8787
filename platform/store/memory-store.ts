// The embedded store: documents live in this process and the same MongoDB filter, update and
// pipeline documents the repositories send to the driver are evaluated by mingo. Unique and
// TTL indexes are enforced here too, so repository code behaves alike on both stores.
// Nothing survives a restart: this is the single-node / development default.
import { randomUUID } from 'node:crypto'
import { isDeepStrictEqual } from 'node:util'
import { aggregate, find, Query, update as applyUpdate } from 'mingo'
import {
  type BulkOp,
  type BulkResult,
  type Collection,
  type Doc,
  DuplicateKeyError,
  type Filter,
  type FindOptions,
  type IndexSpec,
  type Sort,
  type Store,
  type Update,
  type UpdateResult,
} from './types.js'
import { type Clock, systemClock } from '../clock.js'

const emptyBulk = (): BulkResult => ({
  insertedCount: 0,
  matchedCount: 0,
  modifiedCount: 0,
  upsertedCount: 0,
  deletedCount: 0,
  duplicateKeyIndexes: [],
})

/**
 * Deep copy of a document: objects, arrays and Dates are copied; primitives (strings
 * included: large serialized snapshots live in documents) are shared, which structuredClone
 * would copy byte by byte. Anything exotic falls back to structuredClone.
 */
function clone<T>(value: T): T {
  if (value === null || typeof value !== 'object') return value
  if (Array.isArray(value)) return value.map(clone) as T
  if (value instanceof Date) return new Date(value.getTime()) as T
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) return structuredClone(value)
  const out: Record<string, unknown> = {}
  for (const key of Object.keys(value)) out[key] = clone((value as Record<string, unknown>)[key])
  return out as T
}

/** `stopAtArrays`: an array met on the way is returned as is (mongod looks into its elements). */
function getPath(doc: Record<string, any>, path: string, stopAtArrays = false): unknown {
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
 * context on every call (~1 ms), which dominates bulk upserts. Anything else goes to mingo.
 * Returns whether the document changed, or undefined when the update needs mingo.
 */
function applySimpleUpdate(doc: Record<string, any>, update: Update): boolean | undefined {
  if (Object.keys(update).some(op => op !== '$set' && op !== '$unset' && op !== '$inc' && op !== '$min' && op !== '$max')) return undefined
  let changed = false
  const parentOf = (path: string, create: boolean): [Record<string, any>, string] | undefined => {
    const parts = path.split('.')
    let node: any = doc
    for (const part of parts.slice(0, -1)) {
      if (node[part] === undefined || node[part] === null) {
        if (!create) return undefined
        node[part] = {}
      }
      node = node[part]
      if (typeof node !== 'object' || Array.isArray(node)) return undefined
    }
    return [node, parts[parts.length - 1]!]
  }
  for (const [path, value] of Object.entries(update.$set ?? {})) {
    const target = parentOf(path, true)
    if (!target || /^\d+$/.test(target[1])) return undefined
    const current = target[0][target[1]]
    if (!(target[1] in target[0])) changed = true
    else if (value === null || typeof value !== 'object') changed ||= current !== value
    // JSON text is field-order sensitive (as mongod is) but cannot tell a Date from its ISO string.
    else if (JSON.stringify(current) !== JSON.stringify(value) || !isDeepStrictEqual(current, value)) changed = true
    target[0][target[1]] = value !== null && typeof value === 'object' ? clone(value) : value
  }
  for (const path of Object.keys(update.$unset ?? {})) {
    const target = parentOf(path, false)
    if (target && target[1] in target[0]) {
      delete target[0][target[1]]
      changed = true
    }
  }
  for (const [path, by] of Object.entries(update.$inc ?? {})) {
    const target = parentOf(path, true)
    if (!target || typeof by !== 'number') return undefined
    const current = target[0][target[1]] ?? 0
    if (typeof current !== 'number') return undefined
    target[0][target[1]] = current + by
    if (by !== 0 || !(target[1] in target[0])) changed = true
  }
  // $min / $max of numbers (report blocks keep extremes this way); other operands go to mingo.
  for (const op of ['$min', '$max'] as const) {
    for (const [path, value] of Object.entries(update[op] ?? {})) {
      const target = parentOf(path, true)
      if (!target || typeof value !== 'number') return undefined
      const current = target[0][target[1]]
      if (current === undefined || (current === null && op === '$max')) {
        target[0][target[1]] = value
        changed = true
      } else if (current === null) continue // null sorts below numbers (mongod's order)
      else if (typeof current !== 'number') return undefined
      else if (op === '$min' ? value < current : value > current) {
        target[0][target[1]] = value
        changed = true
      }
    }
  }
  return changed
}

/**
 * Applies an update to a private copy of a stored document and returns [document, changed]:
 * the fast path when it can, else mingo on a fresh copy (the fast path may have stopped halfway).
 */
function updatedCopy<T extends Record<string, any>>(doc: T, update: Update): [T, boolean] {
  const next = clone(doc)
  const simple = applySimpleUpdate(next, update)
  if (simple !== undefined) return [next, simple]
  const fresh = clone(doc)
  return [fresh, applyUpdate(fresh, update as any).length > 0]
}

/** Mongo filters as cache keys: Dates and RegExps keep their type (plain JSON would not). */
function filterKey(filter: Filter): string {
  return JSON.stringify(filter, function (this: any, key: string, value: unknown) {
    const raw = this[key]
    if (raw instanceof Date) return { $__date: raw.getTime() }
    if (raw instanceof RegExp) return { $__regexp: raw.toString() }
    return value
  })
}

/**
 * Compiled mingo queries, reused for repeated filters: compiling one copies mingo's whole
 * operator table (~1 ms), and hot callers repeat the same filter (a session's own id).
 */
const compiledQueries = new Map<string, Query<any>>()
function compiled(filter: Filter): Query<any> {
  const key = filterKey(filter)
  let query = compiledQueries.get(key)
  if (!query) {
    if (compiledQueries.size >= 10_000) compiledQueries.delete(compiledQueries.keys().next().value!)
    query = new Query(filter)
    compiledQueries.set(key, query)
  }
  return query
}

const isPrimitive = (v: unknown) => v === null || ['string', 'number', 'boolean'].includes(typeof v)

const RANGE_OPS = new Set(['$lt', '$lte', '$gt', '$gte'])
const isRangeOperand = (v: unknown) => typeof v === 'number' || typeof v === 'string' || v instanceof Date

/**
 * A plain-JS matcher for the filters selection queries send: top-level fields with scalar
 * equality, $in of scalars, or $lt/$lte/$gt/$gte on a number, string or Date. It answers
 * undefined for a document whose value on a filtered path is an array or an embedded document
 * (mongod's rules for those are richer: mingo decides). undefined for any other filter.
 */
function fastMatcher(filter: Filter): ((doc: Doc) => boolean | undefined) | undefined {
  const tests: { path: string; test: (v: unknown) => boolean }[] = []
  for (const [path, condition] of Object.entries(filter)) {
    if (path.startsWith('$')) return undefined
    if (isPrimitive(condition)) {
      tests.push({ path, test: v => v === condition })
      continue
    }
    if (condition === null || typeof condition !== 'object' || condition instanceof Date || Array.isArray(condition)) return undefined
    const ops = Object.entries(condition as Record<string, unknown>)
    if (ops.length === 1 && ops[0]![0] === '$in' && Array.isArray(ops[0]![1]) && (ops[0]![1] as unknown[]).every(isPrimitive)) {
      const allowed = new Set(ops[0]![1] as unknown[])
      tests.push({ path, test: v => allowed.has(v) })
      continue
    }
    if (ops.length === 0 || !ops.every(([op, operand]) => RANGE_OPS.has(op) && isRangeOperand(operand))) return undefined
    const checks = ops.map(([op, operand]) => {
      const kind = operand instanceof Date ? 'date' : typeof operand
      const bound = operand instanceof Date ? operand.getTime() : (operand as number | string)
      return (v: unknown) => {
        // Only values of the operand's type compare (mongod's type bracketing).
        if ((v instanceof Date ? 'date' : typeof v) !== kind) return false
        const x = v instanceof Date ? v.getTime() : (v as number | string)
        return op === '$lt' ? x < bound : op === '$lte' ? x <= bound : op === '$gt' ? x > bound : x >= bound
      }
    })
    tests.push({ path, test: v => checks.every(c => c(v)) })
  }
  return doc => {
    for (const { path, test } of tests) {
      const value = getPath(doc, path, true)
      if (value !== null && typeof value === 'object' && !(value instanceof Date)) return undefined
      if (!test(value)) return false
    }
    return true
  }
}

/** mongod's order across the scalar types a sort key may hold: null, numbers, strings, booleans, dates. */
const typeRank = (v: unknown) => (v === null ? 0 : typeof v === 'number' ? 1 : typeof v === 'string' ? 2 : typeof v === 'boolean' ? 3 : 4)

/** Sort keys of a document, or undefined when one is an array or embedded document (mingo sorts those). */
function sortKeys(doc: Doc, fields: string[]): unknown[] | undefined {
  const keys: unknown[] = []
  for (const field of fields) {
    const value = getPath(doc, field, true)
    if (value !== null && typeof value === 'object' && !(value instanceof Date)) return undefined
    keys.push(value)
  }
  return keys
}

function compareKeys(a: unknown[], b: unknown[], directions: number[]): number {
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
 * Filter, sort, skip and limit in plain JS when fastMatcher() covers the filter and every sort
 * key is a scalar: with a limit it keeps only the first skip + limit in order (a bounded
 * insertion), instead of sorting every match. undefined: let mingo do it.
 */
function fastFind<T extends Doc>(candidates: Iterable<T>, filter: Filter, options: FindOptions): T[] | undefined {
  const match = fastMatcher(filter)
  if (!match) return undefined
  const query = compiled(filter)
  const matches = (doc: T) => match(doc) ?? query.test(doc)
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
function pinnedValues(filter: Filter, field: string): unknown[] | undefined {
  const condition = filter[field]
  if (isPrimitive(condition)) return [condition]
  if (condition && typeof condition === 'object' && Array.isArray(condition.$in) && condition.$in.every(isPrimitive)) {
    return condition.$in
  }
  return undefined
}

/**
 * Hash maps over leading key fields of an IndexSpec: the full key for unique indexes (which
 * also reject a second owner of a key), the first field, and `partitionFields` when set. They
 * narrow the documents a filter has to be tested against; mingo still decides the match.
 */
class HashIndex {
  private readonly maps = new Map<number, Map<string, Set<string>>>()
  /** Documents with an array on an indexed path: mongod matches its elements, so always candidates. */
  private readonly multikey = new Set<string>()
  readonly fields: string[]

  constructor(readonly spec: IndexSpec) {
    this.fields = Object.keys(spec.key)
    const lengths = new Set([1, spec.partitionFields ?? 1, spec.unique ? this.fields.length : 1])
    for (const length of lengths) if (length <= this.fields.length) this.maps.set(length, new Map())
  }

  private keyOf(values: unknown[]) {
    return JSON.stringify(values)
  }

  private docKey(doc: Doc, length: number) {
    return this.keyOf(this.fields.slice(0, length).map(path => getPath(doc, path)))
  }

  conflicts(doc: Doc): boolean {
    if (!this.spec.unique) return false
    const owners = this.maps.get(this.fields.length)!.get(this.docKey(doc, this.fields.length))
    return owners !== undefined && [...owners].some(id => id !== doc._id)
  }

  add(doc: Doc) {
    if (this.fields.some(path => Array.isArray(getPath(doc, path, true)))) this.multikey.add(doc._id)
    for (const [length, map] of this.maps) {
      const key = this.docKey(doc, length)
      let owners = map.get(key)
      if (!owners) map.set(key, (owners = new Set()))
      owners.add(doc._id)
    }
  }

  remove(doc: Doc) {
    this.multikey.delete(doc._id)
    for (const [length, map] of this.maps) {
      const key = this.docKey(doc, length)
      const owners = map.get(key)
      owners?.delete(doc._id)
      if (owners?.size === 0) map.delete(key)
    }
  }

  /** Ids that can match `filter` through the longest prefix it pins, or undefined. */
  candidates(filter: Filter): Set<string> | undefined {
    const lengths = [...this.maps.keys()].sort((a, b) => b - a)
    for (const length of lengths) {
      let combos: unknown[][] = [[]]
      for (const field of this.fields.slice(0, length)) {
        const values = pinnedValues(filter, field)
        if (!values) {
          combos = []
          break
        }
        combos = combos.flatMap(prefix => values.map(v => [...prefix, v]))
        if (combos.length > 10_000) break
      }
      if (combos.length === 0 || combos.length > 10_000) continue
      const map = this.maps.get(length)!
      // One key and no multikey documents: the index's own set (callers only read it).
      if (combos.length === 1 && this.multikey.size === 0) return map.get(this.keyOf(combos[0]!)) ?? new Set()
      const ids = new Set<string>(this.multikey)
      for (const combo of combos) for (const id of map.get(this.keyOf(combo)) ?? []) ids.add(id)
      return ids
    }
    return undefined
  }
}

class MemoryCollection<T extends Doc> implements Collection<T> {
  private readonly docs = new Map<string, T>()
  private readonly indexes: HashIndex[] = []
  private readonly ttl: IndexSpec[] = []

  constructor(readonly name: string, private readonly clock: Clock) {}

  addIndex(spec: IndexSpec) {
    if (spec.expireAfterSeconds === undefined && !this.indexes.some(u => u.spec.name === spec.name)) {
      const index = new HashIndex(spec)
      for (const doc of this.docs.values()) index.add(doc)
      this.indexes.push(index)
    }
    if (spec.expireAfterSeconds !== undefined && !this.ttl.some(t => t.name === spec.name)) this.ttl.push(spec)
  }

  /** mongod's TTL rule: a Date field plus expireAfterSeconds in the past. */
  sweepExpired() {
    if (this.ttl.length === 0) return
    const now = this.clock.now()
    for (const doc of [...this.docs.values()]) {
      for (const spec of this.ttl) {
        const field = Object.keys(spec.key)[0]!
        const value = getPath(doc, field)
        if (value instanceof Date && value.getTime() + spec.expireAfterSeconds! * 1000 <= now) {
          this.remove(doc)
          break
        }
      }
    }
  }

  /** The documents worth testing against `filter`: by _id, by an index it pins, else all. */
  private candidates(filter: Filter): T[] {
    return [...this.lazyCandidates(filter)]
  }

  /**
   * The same, read lazily: a query with a limit and no sort stops at its first matches instead of
   * copying every candidate first. Callers that update documents collect the matches before.
   */
  private lazyCandidates(filter: Filter): Iterable<T> {
    if (typeof filter._id === 'string') {
      const doc = this.docs.get(filter._id)
      return doc ? [doc] : []
    }
    let best: Set<string> | undefined
    for (const index of this.indexes) {
      const ids = index.candidates(filter)
      if (ids && (!best || ids.size < best.size)) best = ids
    }
    if (!best) return this.docs.values()
    const docs = this.docs
    const ids = best
    return (function* () {
      for (const id of ids) {
        const doc = docs.get(id)
        if (doc) yield doc
      }
    })()
  }

  private matching(filter: Filter, options: FindOptions = {}): T[] {
    const candidates = this.lazyCandidates(filter)
    // Plain equality on scalar fields needs no query compiler (the hot path of keyed upserts).
    const entries = Object.entries(filter)
    if (!options.sort && !options.skip && entries.every(([k, v]) => !k.startsWith('$') && isPrimitive(v))) {
      const hits: T[] = []
      let simple = true
      for (const doc of candidates) {
        const values = entries.map(([k]) => getPath(doc, k, true))
        if (values.some(v => typeof v === 'object' && v !== null)) {
          simple = false // arrays/objects have richer match rules: let mingo decide
          break
        }
        if (entries.every(([, v], i) => values[i] === v)) hits.push(doc)
        if (options.limit && hits.length >= options.limit) break
      }
      if (simple) return hits
    }
    // A fresh read each time: the pass above may have stopped partway through its iterator.
    const fast = fastFind(this.lazyCandidates(filter), filter, options)
    if (fast) return fast
    let cursor = compiled(filter).find([...this.lazyCandidates(filter)])
    if (options.sort) cursor = cursor.sort(options.sort)
    if (options.skip) cursor = cursor.skip(options.skip)
    if (options.limit) cursor = cursor.limit(options.limit)
    return cursor.all() as T[]
  }

  private store(doc: T, previous?: T) {
    for (const index of this.indexes) {
      if (index.conflicts(doc)) {
        throw new DuplicateKeyError(`E11000 duplicate key error collection: ${this.name} index: ${index.spec.name}`)
      }
    }
    if (previous) for (const index of this.indexes) index.remove(previous)
    for (const index of this.indexes) index.add(doc)
    this.docs.set(doc._id, doc)
  }

  private remove(doc: T) {
    for (const index of this.indexes) index.remove(doc)
    this.docs.delete(doc._id)
  }

  async insertOne(doc: T) {
    this.insert(doc)
  }

  private insert(doc: T) {
    if (this.docs.has(doc._id)) {
      throw new DuplicateKeyError(`E11000 duplicate key error collection: ${this.name} index: _id_`)
    }
    this.store(clone(doc))
  }

  async insertMany(docs: T[], options: { ordered?: boolean } = {}) {
    return this.bulkWrite(docs.map(document => ({ insertOne: { document } })), options)
  }

  async findOne(filter: Filter, options: FindOptions = {}) {
    const [doc] = this.matching(filter, { ...options, limit: 1 })
    return doc ? this.project(clone(doc), options.projection) : null
  }

  async find(filter: Filter, options: FindOptions = {}) {
    return this.matching(filter, options).map(doc => this.project(clone(doc), options.projection))
  }

  private project(doc: T, projection?: Record<string, 0 | 1>): T {
    if (!projection) return doc
    return find([doc], {}, projection).all()[0] as T
  }

  async countDocuments(filter: Filter) {
    return this.matching(filter).length
  }

  private updateDoc(doc: T, update: Update): boolean {
    const { $setOnInsert: _ignored, ...modifier } = update
    const [next, changed] = updatedCopy(doc, modifier)
    if (changed) this.store(next, doc)
    return changed
  }

  private upsert(filter: Filter, update: Update): string {
    // The filter's equalities (plain values, embedded documents, $eq) seed the new document.
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
    this.insert(doc as T)
    return doc._id
  }

  async updateOne(filter: Filter, update: Update, options: { upsert?: boolean } = {}): Promise<UpdateResult> {
    return this.updateOneSync(filter, update, options)
  }

  private updateOneSync(filter: Filter, update: Update, options: { upsert?: boolean; sort?: Sort } = {}): UpdateResult {
    const [doc] = this.matching(filter, { limit: 1, sort: options.sort })
    if (doc) return { matchedCount: 1, modifiedCount: this.updateDoc(doc, update) ? 1 : 0, upsertedId: null }
    if (options.upsert) return { matchedCount: 0, modifiedCount: 0, upsertedId: this.upsert(filter, update) }
    return { matchedCount: 0, modifiedCount: 0, upsertedId: null }
  }

  async updateMany(filter: Filter, update: Update): Promise<UpdateResult> {
    return this.updateManySync(filter, update)
  }

  private updateManySync(filter: Filter, update: Update): UpdateResult {
    const docs = this.matching(filter)
    let modifiedCount = 0
    for (const doc of docs) if (this.updateDoc(doc, update)) modifiedCount++
    return { matchedCount: docs.length, modifiedCount, upsertedId: null }
  }

  async findOneAndUpdate(
    filter: Filter,
    update: Update,
    options: { upsert?: boolean; returnDocument?: 'before' | 'after'; sort?: Sort } = {},
  ) {
    const [before] = this.matching(filter, { limit: 1, sort: options.sort })
    const result = this.updateOneSync(filter, update, options)
    const id = before?._id ?? result.upsertedId
    if (options.returnDocument === 'before') return before ? clone(before) : null
    const after = id ? this.docs.get(id) : undefined
    return after ? clone(after) : null
  }

  async deleteOne(filter: Filter) {
    const [doc] = this.matching(filter, { limit: 1 })
    if (!doc) return 0
    this.remove(doc)
    return 1
  }

  async deleteMany(filter: Filter) {
    const docs = this.matching(filter)
    for (const doc of docs) this.remove(doc)
    return docs.length
  }

  async bulkWrite(ops: BulkOp[], options: { ordered?: boolean } = {}): Promise<BulkResult> {
    const ordered = options.ordered ?? true
    const result = emptyBulk()
    for (const [index, op] of ops.entries()) {
      try {
        if ('insertOne' in op) {
          this.insert(op.insertOne.document as T)
          result.insertedCount++
        } else if ('updateOne' in op) {
          const r = this.updateOneSync(op.updateOne.filter, op.updateOne.update, { upsert: op.updateOne.upsert })
          result.matchedCount += r.matchedCount
          result.modifiedCount += r.modifiedCount
          if (r.upsertedId) result.upsertedCount++
        } else if ('updateMany' in op) {
          const r = this.updateManySync(op.updateMany.filter, op.updateMany.update)
          result.matchedCount += r.matchedCount
          result.modifiedCount += r.modifiedCount
        } else if ('deleteOne' in op) {
          result.deletedCount += await this.deleteOne(op.deleteOne.filter)
        } else {
          result.deletedCount += await this.deleteMany(op.deleteMany.filter)
        }
      } catch (error) {
        if (!(error instanceof DuplicateKeyError)) throw error
        result.duplicateKeyIndexes.push(index)
        if (ordered) break
      }
    }
    return result
  }

  async aggregate<R>(pipeline: Record<string, any>[]): Promise<R[]> {
    const first = pipeline[0]
    const source = first && '$match' in first ? this.candidates(first.$match) : [...this.docs.values()]
    return clone(aggregate(source, pipeline) as R[])
  }
}

export class MemoryStore implements Store {
  readonly kind = 'memory' as const
  private readonly collections = new Map<string, MemoryCollection<any>>()
  private readonly sweeper: NodeJS.Timeout

  constructor(private readonly clock: Clock = systemClock, sweepIntervalMs = 1000) {
    this.sweeper = setInterval(() => this.sweep(), sweepIntervalMs)
    this.sweeper.unref()
  }

  collection<T extends Doc = Doc>(name: string): Collection<T> {
    let collection = this.collections.get(name)
    if (!collection) {
      collection = new MemoryCollection<T>(name, this.clock)
      this.collections.set(name, collection)
    }
    return collection
  }

  async ensureIndexes(name: string, indexes: IndexSpec[]) {
    const collection = this.collection(name) as MemoryCollection<Doc>
    for (const spec of indexes) collection.addIndex(spec)
  }

  sweep() {
    for (const collection of this.collections.values()) collection.sweepExpired()
  }

  async close() {
    clearInterval(this.sweeper)
  }
}
