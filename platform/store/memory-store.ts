// The embedded store: documents live in this process and the same MongoDB filter, update and
// pipeline documents the repositories send to the driver are evaluated by mingo. Unique and
// TTL indexes are enforced here too, so repository code behaves alike on every store.
// Nothing survives a restart: this is the pure in-memory double unit tests construct directly;
// the service's embedded store is LmdbStore (lmdb-store.ts).
import { aggregate } from 'mingo'
import {
  assertPartialFilter,
  type BulkOp,
  type BulkResult,
  type Collection,
  type Doc,
  DuplicateKeyError,
  type Filter,
  type FindOptions,
  type IndexSpec,
  type OrderedLog,
  type Sort,
  type Store,
  type Update,
  type UpdateResult,
} from './types.js'
import { type Clock, systemClock } from '../clock.js'
import { assertSafeBulk, assertSafeDocument, assertSafeUpdate } from './update-paths.js'
import { countByPipeline, countRowsOf, type CountRow, type CountValue } from './counted-index.js'
import { MemoryLog } from './memory-log.js'
import { applyBulkOp, type BulkTarget, clone, compiled, emptyBulk, fastFind, getPath, isPrimitive, pinnedValues, projectDocs, updatedCopy, upsertDocument } from './query.js'


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

  /** A partial index is kept whole here: a hash index only narrows what the filter then decides. */
  addIndex(spec: IndexSpec) {
    if (spec.partialFilterExpression) assertPartialFilter(`${this.name}.${spec.name}`, spec)
    if (spec.expireAfterSeconds === undefined && !this.indexes.some(u => u.spec.name === spec.name)) {
      const index = new HashIndex(spec)
      for (const doc of this.docs.values()) index.add(doc)
      this.indexes.push(index)
    }
    // Declared again with another TTL (a retention setting), or none: the latest declaration holds.
    const declared = this.ttl.findIndex(t => t.name === spec.name)
    if (declared !== -1) this.ttl.splice(declared, 1)
    if (spec.expireAfterSeconds !== undefined) this.ttl.push(spec)
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
    assertSafeDocument(doc)
    this.insert(doc)
  }

  private insert(doc: T) {
    if (this.docs.has(doc._id)) {
      throw new DuplicateKeyError(`E11000 duplicate key error collection: ${this.name} index: _id_`)
    }
    this.store(clone(doc))
  }

  async insertMany(docs: T[], options: { ordered?: boolean } = {}) {
    for (const doc of docs) assertSafeDocument(doc)
    return this.bulkWrite(docs.map(document => ({ insertOne: { document } })), options)
  }

  async findOne(filter: Filter, options: FindOptions = {}) {
    const [doc] = this.matching(filter, { ...options, limit: 1 })
    // Projected first, then copied: only the fields asked for are cloned.
    return doc ? clone(projectDocs([doc], options.projection)[0]!) : null
  }

  async find(filter: Filter, options: FindOptions = {}) {
    return projectDocs(this.matching(filter, options), options.projection).map(clone)
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
    const doc = upsertDocument(filter, update) as T
    this.insert(doc)
    return doc._id
  }

  async updateOne(filter: Filter, update: Update, options: { upsert?: boolean } = {}): Promise<UpdateResult> {
    assertSafeUpdate(update)
    return this.updateOneSync(filter, update, options)
  }

  private updateOneSync(filter: Filter, update: Update, options: { upsert?: boolean; sort?: Sort } = {}): UpdateResult {
    const [doc] = this.matching(filter, { limit: 1, sort: options.sort })
    if (doc) return { matchedCount: 1, modifiedCount: this.updateDoc(doc, update) ? 1 : 0, upsertedId: null }
    if (options.upsert) return { matchedCount: 0, modifiedCount: 0, upsertedId: this.upsert(filter, update) }
    return { matchedCount: 0, modifiedCount: 0, upsertedId: null }
  }

  async updateMany(filter: Filter, update: Update): Promise<UpdateResult> {
    assertSafeUpdate(update)
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
    assertSafeUpdate(update)
    const [before] = this.matching(filter, { limit: 1, sort: options.sort })
    const result = this.updateOneSync(filter, update, options)
    const id = before?._id ?? result.upsertedId
    if (options.returnDocument === 'before') return before ? clone(before) : null
    const after = id ? this.docs.get(id) : undefined
    return after ? clone(after) : null
  }

  async deleteOne(filter: Filter) {
    return this.deleteSync(filter, 1)
  }

  async deleteMany(filter: Filter) {
    return this.deleteSync(filter)
  }

  private deleteSync(filter: Filter, limit?: number): number {
    const docs = this.matching(filter, limit ? { limit } : {})
    for (const doc of docs) this.remove(doc)
    return docs.length
  }

  async bulkWrite(ops: BulkOp[], options: { ordered?: boolean } = {}): Promise<BulkResult> {
    assertSafeBulk(ops)
    const ordered = options.ordered ?? true
    const result = emptyBulk()
    for (const [index, op] of ops.entries()) if (!applyBulkOp(this.bulkTarget, op, index, ordered, result)) break
    return result
  }

  private readonly bulkTarget: BulkTarget = {
    insert: doc => this.insert(doc as T),
    updateOne: (filter, update, upsert) => this.updateOneSync(filter, update, { upsert }),
    updateMany: (filter, update) => this.updateManySync(filter, update),
    delete: (filter, limit) => this.deleteSync(filter, limit),
  }

  async aggregate<R>(pipeline: Record<string, any>[]): Promise<R[]> {
    const first = pipeline[0]
    const source = first && '$match' in first ? this.candidates(first.$match) : [...this.docs.values()]
    return clone(aggregate(source, pipeline) as R[])
  }

  async countBy(match: Record<string, CountValue>, fields: string[]): Promise<CountRow[]> {
    return countRowsOf(await this.aggregate(countByPipeline(match, fields)), fields)
  }
}

export class MemoryStore implements Store {
  readonly kind = 'memory' as const
  readonly keepsCounts = false
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

  private readonly logs = new Map<string, MemoryLog<any>>()

  orderedLog<V>(name: string): OrderedLog<V> {
    let log = this.logs.get(name)
    if (!log) this.logs.set(name, (log = new MemoryLog<V>(name)))
    return log
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
