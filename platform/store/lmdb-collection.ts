// One collection of the embedded store (lmdb-store.ts: the environment and its layout).
//
// Queries read an index in key order (planner.ts) and stop at their limit; documents are read
// only for entries whose key passes the filter's indexed conditions.
//
// Writes: every write runs inside an lmdb-js asynchronous transaction callback. lmdb-js batches
// the callbacks of one event turn into one LMDB write transaction, committed off the main
// thread; the returned promise resolves once it is committed (durable: kill -9 cannot lose it).
// Inside a callback reads see the transaction's own writes, so read-modify-write (updates,
// $inc, upserts, unique checks) is atomic and two concurrent updates cannot lose one another.
// A callback that throws does not roll back what it already wrote, so each operation checks
// everything (unique keys, key sizes) before its first write. Reads outside writes are
// synchronous, from the committed state.
//
// Transactions stay small: a bulk write, or an updateMany/deleteMany that matches more than
// WRITE_SLICE documents, commits WRITE_SLICE documents per transaction (not atomic as a whole,
// like MongoDB without a transaction: every document is re-checked against the filter in its
// own slice). One large transaction frees most pages of the trees it touches at once, and
// LMDB rewrites that free list on every later commit until it is used up: every small commit
// after it pays for the large one.
//
// TTL: a TTL index is an ordered index on its Date field; a sweep reads the expired end of it
// a bounded slice at a time (TTL_SLICE entries per transaction), never the whole collection.
import type { Database, RootDatabase } from 'lmdb'
import { aggregate } from 'mingo'
import {
  type BulkOp,
  type BulkResult,
  type Collection,
  type Doc,
  assertPartialFilter,
  DuplicateKeyError,
  type Filter,
  type FindOptions,
  type IndexSpec,
  type Sort,
  type Update,
  type UpdateResult,
} from './types.js'
import { assertSafeBulk, assertSafeDocument, assertSafeUpdate } from './update-paths.js'
import { applyBulkOp, type BulkTarget, clone, compareKeys, compiled, emptyBulk, fastFind, matcherOf, projectDocs, sortKeys, updatedCopy, upsertDocument, withoutSetOnInsert } from './query.js'
import { documentKeys, encodeValue, entryId, entryKey, FIRST_ENCODING, KEY_ENCODING, KEY_MAX, keyMayBeCut, mayBeCut, partId, pathValues, RANK, sameKey, type KeyPart } from './index-keys.js'
import { effectiveSort, plan, shapeOf, type IndexPlan } from './planner.js'
import { countByPipeline, countPlan, countRowsOf, keyValue, type CountRow, type CountValue } from './counted-index.js'
import { groupInSlices, simpleGroup } from './sliced-group.js'
import { sharedStructures } from './shared-structures.js'
import { jsonDocuments } from './json-documents.js'
import {
  type EntryIndex,
  type LiveIndex,
  passes,
  rebuildsOnline,
  revisionKey,
  sameDefinition,
  sameIndexedValues,
  sameValues,
  type StoredIndex,
  watchesAny,
} from './lmdb-indexes.js'
import type { WriteBatches } from './write-batch.js'
import type { Logger } from '../logger.js'

/**
 * What a collection uses of its store (LmdbStore): the environment, the databases collections
 * share, and the store's bookkeeping. Declared here so that the store depends on its
 * collections and not the other way round.
 */
export interface CollectionEnvironment {
  readonly env: RootDatabase
  readonly meta: Database<unknown, string>
  readonly structures: Database<unknown, string>
  readonly reads: { keys: number; documents: number }
  readonly batches: WriteBatches
  readonly closed: boolean
  readonly logger?: Logger
  declared(collection: string): StoredIndex[]
  revision(collection: string): number
  indexDb(collection: string, index: string, generation?: number): Database<Buffer, KeyPart[]>
  countDb(collection: string, index: string): Database<number, KeyPart[]>
  existingCountDb(collection: string, index: string): Database<number, KeyPart[]> | undefined
  storedKeys(db: Database<any, any>, limit?: number): Buffer[]
  background(chore: Promise<unknown>): void
}

/** Documents written per transaction by a bulk write, updateMany or deleteMany (see above). */
export const WRITE_SLICE = 256
/** Longest _id accepted (bytes of UTF-8): it is a key of the documents and of every index entry. */
const MAX_ID_BYTES = 512
const EMPTY = Buffer.alloc(0)
/** Update operators whose keys are the paths they write ($rename, for one, writes its values). */
const PATH_KEYED_OPERATORS = new Set(['$set', '$unset', '$inc', '$min', '$max', '$mul', '$push', '$pull', '$pullAll', '$addToSet', '$pop', '$currentDate'])

/** Work per transaction of a background copy to JSON: it runs on the loop that serves requests. */
const COPY_SLICE_MS = 4
/** The m:indexes entry that says a JSON collection's documents have all moved to j:. */
const movedKey = (collection: string) => `json:${collection}`

/** A DuplicateKeyError as mongod words it. */
const duplicate = (collection: string, index: string) => new DuplicateKeyError(`E11000 duplicate key error collection: ${collection} index: ${index}`)

type Outcome<R> = { ok: R } | { error: unknown }

export class LmdbCollection<T extends Doc> implements Collection<T> {
  /** Where documents are read: the c: database, or j: for a JSON collection once moved. */
  private docs: Database<T, string>
  /** While a JSON collection's documents are being copied from c: to j:, every write goes to both. */
  private mirror?: Database<T, string>
  /** The background copy to JSON, when one is running (close() waits for its current slice). */
  moving?: Promise<void>
  indexes: LiveIndex[] = []
  /** The indexes queries can read documents through (a counted index has no entry per document). */
  private plannable: EntryIndex[] = []

  constructor(readonly name: string, private readonly store: CollectionEnvironment, readonly json: boolean) {
    // A JSON collection only looks for a c: database left from before; it never creates one.
    this.docs = store.env.openDB<T, string>({ name: `c:${name}`, create: !json, ...sharedStructures(store.structures, name) } as { name: string })
    if (json) {
      const target = store.env.openDB<T, string>({ name: `j:${name}`, encoder: jsonDocuments } as { name: string })
      // lmdb-js answers undefined for a database that does not exist when asked not to create it.
      const old = this.docs as Database<T, string> | undefined
      if (!old || store.meta.get(movedKey(name))) {
        this.docs = target
        // Moved before; what a restart cut short of removing the old copy is removed now.
        if (old && old.getCount() > 0) this.moving = this.empty(old).catch(error => this.store.logger?.error('store: removing the MessagePack copy failed; the next start goes on', { collection: this.name, error }))
      } else {
        // Documents written before the collection was kept as JSON: copied in the background
        // (reads stay on c: meanwhile, complete). A copy cut short by a restart starts over.
        this.mirror = target
        this.moving = this.copyToJson(old, target)
      }
    }
    this.loadIndexes()
  }

  /**
   * Copies c: into j: in key order, a few milliseconds of work (at most WRITE_SLICE documents)
   * per transaction. Writes meanwhile go to both (putDocument/removeDocument), so j: holds each
   * document either not yet or exactly as c: does. The slice that finds nothing left also marks
   * the move done in the store; once that is committed, reads switch to j: and c: is emptied.
   */
  private async copyToJson(old: Database<T, string>, target: Database<T, string>) {
    let cursor: string | undefined
    let copied = 0
    try {
      // What an earlier, unfinished copy left is removed first. A write meanwhile lands in both
      // and may be removed here again: the copy brings it back from c:.
      await this.empty(target)
      const done = await this.inSlices(started => {
        let n = 0
        for (const { key, value } of old.getRange({ start: cursor })) {
          if (key === cursor) continue // start is inclusive
          // Wide documents are slow to re-encode: a slice also stops after COPY_SLICE_MS of work.
          if (n === WRITE_SLICE || (n > 0 && performance.now() - started > COPY_SLICE_MS)) return true
          target.putSync(key, value)
          cursor = key
          n++
          copied++
        }
        this.store.meta.putSync(movedKey(this.name), true)
        return false
      })
      if (!done) return
      this.docs = target
      this.mirror = undefined
      this.store.logger?.info('store: documents moved to JSON', { collection: this.name, documents: copied })
      await this.empty(old)
    } catch (error) {
      // Bounded: the collection keeps working on c: (writes still mirrored); the next start tries again.
      this.store.logger?.error('store: moving documents to JSON failed; reading MessagePack until the next start', { collection: this.name, error })
    } finally {
      this.moving = undefined
    }
  }

  /**
   * Removes every entry of `db` a slice at a time like the copy. Clearing it in one go would free
   * all its pages in one transaction, and LMDB would then rewrite that free list on every later
   * commit until it is used up (see "Transactions stay small" above). The empty database itself
   * stays: dropping it (mdb_drop) leaves this process's later reads of the j: database seeing
   * nothing until the next start.
   */
  private async empty(db: Database<any, any>) {
    await this.inSlices(started => {
      const keys = this.store.storedKeys(db, WRITE_SLICE)
      for (const [i, key] of keys.entries()) {
        if (i > 0 && performance.now() - started > COPY_SLICE_MS) return true // each slice makes progress
        db.removeSync(key)
      }
      return keys.length === WRITE_SLICE
    })
  }

  /** Removes every entry of `db` in the current transaction. */
  private clearSync(db: Database<any, any>) {
    for (const key of this.store.storedKeys(db)) db.removeSync(key)
  }

  /**
   * Background work on the loop that serves requests: `slice` runs in a write transaction of its
   * own (given the time it started) until it answers that nothing is left, yielding between
   * slices. Resolves true when done, false when the store closed first.
   */
  private async inSlices(slice: (started: number) => boolean): Promise<boolean> {
    for (;;) {
      if (this.store.closed) return false
      const more = await this.transaction(() => slice(performance.now()))
      if (!more) return true
      await new Promise(resolve => setImmediate(resolve))
    }
  }

  /** A document and, while a copy to JSON runs, its copy. */
  private putDocument(doc: T) {
    this.docs.putSync(doc._id, doc)
    this.mirror?.putSync(doc._id, doc)
  }

  private removeDocument(id: string) {
    this.docs.removeSync(id)
    this.mirror?.removeSync(id)
  }

  /** The revision of the declarations this collection loaded (see fresh()). */
  private revision = -1

  /**
   * Declarations change under a running process (an online rebuild finishing, an index going
   * multikey, another thread or process declaring one): each write and query first checks the
   * revision number stored beside them, one small read, and reloads them when it moved.
   */
  private fresh() {
    const batch = this.store.batches.running
    if (batch !== 0 && batch === this.checkedIn) return
    const revision = this.store.revision(this.name)
    if (revision !== this.revision) this.loadIndexes()
    this.checkedIn = batch
  }

  /** The write transaction callback in which fresh() last checked (see WriteBatches.running). */
  private checkedIn = 0

  /** Writes the declarations (inside a write transaction) and moves their revision. */
  private saveIndexes(stored: StoredIndex[]) {
    this.checkedIn = 0
    this.store.meta.putSync(this.name, stored)
    this.store.meta.putSync(revisionKey(this.name), this.store.revision(this.name) + 1)
  }

  /** The indexes declared for this collection (by any process sharing the environment). */
  loadIndexes() {
    this.revision = this.store.revision(this.name)
    const stored = this.store.declared(this.name)
    const live = (spec: StoredIndex, role: { building?: boolean; previous?: boolean } = {}): LiveIndex => ({
      name: spec.name,
      fields: Object.keys(spec.key),
      multikey: !!spec.multikey,
      spec,
      encoding: spec.encoding ?? FIRST_ENCODING,
      ...(spec.partialFilterExpression ? { partial: spec.partialFilterExpression, covers: matcherOf(spec.partialFilterExpression) } : {}),
      watched: [...new Set([...Object.keys(spec.key), ...Object.keys(spec.partialFilterExpression ?? {})])],
      ...(spec.counted ? { counts: this.store.countDb(this.name, spec.name) } : { db: this.store.indexDb(this.name, spec.name, spec.generation) }),
      ...role,
    })
    this.indexes = stored.flatMap(spec => (spec.building && spec.previous ? [live(spec, { building: true }), live(spec.previous, { previous: true })] : [live(spec)]))
    this.plannable = this.indexes.filter((index): index is EntryIndex => index.db !== undefined && !index.building)
  }

  /**
   * `work` inside a write transaction (write-batch.ts), its counted moves written at the
   * transaction's end whatever it did (an unordered bulk write keeps the writes before a duplicate).
   */
  private transaction<R>(work: () => R, queuedAt?: number): Promise<R> {
    return this.store.batches.run(work, queuedAt)
  }

  /** Runs `work` inside a write transaction; its error (thrown before any write) rejects. */
  private async write<R>(work: () => R): Promise<R> {
    const outcome = await this.transaction((): Outcome<R> => {
      try {
        this.fresh()
        return { ok: work() }
      } catch (error) {
        return { error }
      }
    }, performance.now())
    if ('error' in outcome) throw outcome.error
    return outcome.ok
  }

  // ------------------------------------------------------------------ reading

  /** A document by _id; none for an id too long to be stored (LMDB keys are bounded: no lookup can take it). */
  private byId(id: string): T | undefined {
    if (id.length > MAX_ID_BYTES && Buffer.byteLength(id) > MAX_ID_BYTES) return undefined
    return this.docs.get(id)
  }

  /**
   * The documents worth testing against `filter`, lazily: by _id, by the planned index (in sort
   * order when `ordered`), else every document in _id order.
   */
  private candidates(filter: Filter, sort: Sort | undefined, limited: boolean): { docs: Iterable<T>; ordered: boolean } {
    this.fresh()
    const id = filter._id
    // By one id (most writes): no filter shape to work out.
    if (typeof id === 'string') {
      const doc = this.byId(id)
      this.store.reads.documents++
      return { docs: doc ? [doc] : [], ordered: true }
    }
    const shape = shapeOf(filter)
    if (id && typeof id === 'object' && Array.isArray(id.$in) && Object.keys(id).length === 1 && id.$in.every((v: unknown) => typeof v === 'string')) {
      const docs: T[] = []
      for (const key of new Set<string>(id.$in)) {
        const doc = this.byId(key)
        this.store.reads.documents++
        if (doc) docs.push(doc)
      }
      return { docs, ordered: effectiveSort(sort, shape.pinned).length === 0 }
    }
    const chosen = plan(shape, sort, limited, this.plannable)
    if (chosen) return { docs: this.fromIndex(chosen, effectiveSort(sort, shape.pinned)), ordered: chosen.ordered }
    const sortFields = effectiveSort(sort, shape.pinned)
    const byId = sortFields.length === 1 && sortFields[0]![0] === '_id'
    const reverse = byId && sortFields[0]![1] === -1
    const reads = this.store.reads
    // An _id range (a migration's or a scan's slice: `_id: {$gt: last}`) reads from its lower
    // bound to its upper one, not the collection from its first document.
    const bounds: IdBounds = reverse ? { hiInclusive: false } : idBounds(id)
    const entries = this.docs.getRange({ reverse, ...(bounds.lo === undefined ? {} : { start: bounds.lo }) })
    const docs = bounds.hi === undefined ? entries.map(entry => (reads.documents++, entry.value)) : upTo(entries, bounds.hi, bounds.hiInclusive, reads)
    return { docs, ordered: sortFields.length === 0 || byId }
  }

  /**
   * The documents behind an index plan's entries, skipping entries whose key fails a check. In an
   * ordered plan, entries whose sort values tie only because a string was cut in the key are
   * put back in order by their full values.
   */
  private *fromIndex(chosen: IndexPlan, sort: [string, 1 | -1][]): Generator<T> {
    const seen = chosen.index.multikey ? new Set<string>() : undefined
    const positions = sort.map(([field]) => chosen.index.fields.indexOf(field)).filter(p => p >= 0).map(p => p * 2)
    let group: { doc: T; tie: string }[] = []
    const flush = function* () {
      if (group.length > 1) {
        const fields = sort.map(([field]) => field)
        const directions = sort.map(([, dir]) => dir)
        group.sort((a, b) => compareKeys(sortKeys(a.doc, fields) ?? [], sortKeys(b.doc, fields) ?? [], directions))
      }
      for (const entry of group) yield entry.doc
      group = []
    }
    for (const range of chosen.ranges) {
      for (const key of this.keysIn(chosen, range)) {
        this.store.reads.keys++
        if (!passes(chosen, key)) continue
        const id = entryId(key, chosen.index.encoding)
        if (seen) {
          if (seen.has(id)) continue
          seen.add(id)
        }
        const doc = this.docs.get(id)
        this.store.reads.documents++
        if (!doc) continue
        // The first sort field whose string may be cut: the key orders its entries by what
        // follows it (a later sort field, the _id) where only the full value can.
        const cutAt = chosen.ordered ? positions.findIndex(p => mayBeCut([key[p] as number, key[p + 1]!])) : -1
        if (cutAt < 0) {
          yield* flush()
          yield doc
          continue
        }
        // Entries tie when their keys agree up to that field (such entries are consecutive).
        const tie = partId(positions.slice(0, cutAt + 1).flatMap(p => [key[p]!, key[p + 1]!]))
        if (group.length > 0 && group[0]!.tie !== tie) yield* flush()
        group.push({ doc, tie })
      }
    }
    yield* flush()
  }

  private keysIn(chosen: IndexPlan, range: { start?: KeyPart[]; end?: KeyPart[] }) {
    const db = (chosen.index as EntryIndex).db
    return chosen.reverse ? db.getKeys({ start: range.end, end: range.start, reverse: true }) : db.getKeys({ start: range.start, end: range.end })
  }

  private matching(filter: Filter, options: FindOptions = {}): T[] {
    const skip = options.skip ?? 0
    const limited = options.limit !== undefined && options.limit > 0
    const { docs, ordered } = this.candidates(filter, options.sort, limited)
    if (ordered) {
      const matches = matcherOf(filter)
      const want = limited ? skip + options.limit! : Infinity
      const hits: T[] = []
      for (const doc of docs) {
        if (!matches(doc)) continue
        hits.push(doc)
        if (hits.length >= want) break
      }
      return skip ? hits.slice(skip) : hits
    }
    const sorted = fastFind(docs, filter, options)
    if (sorted) return sorted
    let cursor = compiled(filter).find([...this.candidates(filter, options.sort, limited).docs])
    if (options.sort) cursor = cursor.sort(options.sort)
    if (options.skip) cursor = cursor.skip(options.skip)
    if (options.limit) cursor = cursor.limit(options.limit)
    return cursor.all() as T[]
  }

  async findOne(filter: Filter, options: FindOptions = {}) {
    const [doc] = this.matching(filter, { ...options, limit: 1 })
    return doc ? projectDocs([doc], options.projection)[0]! : null
  }

  async find(filter: Filter, options: FindOptions = {}) {
    return projectDocs(this.matching(filter, options), options.projection)
  }

  async countDocuments(filter: Filter) {
    const shape = shapeOf(filter)
    if (Object.keys(filter).length === 0) return this.docs.getCount()
    const counted = this.fromCounts(filter, [])
    if (counted) return counted.reduce((sum, row) => sum + row.n, 0)
    const chosen = typeof filter._id === 'string' ? undefined : plan(shape, undefined, false, this.plannable)
    if (chosen?.exact) {
      let n = 0
      for (const range of chosen.ranges) {
        if (chosen.checks.length === 0) n += (chosen.index as EntryIndex).db.getKeysCount({ start: range.start, end: range.end })
        else for (const key of this.keysIn(chosen, range)) if (passes(chosen, key)) n++
      }
      return n
    }
    return this.matching(filter).length
  }

  async countBy(match: Record<string, CountValue>, fields: string[]): Promise<CountRow[]> {
    return this.fromCounts(match, fields) ?? countRowsOf(await this.aggregate(countByPipeline(match, fields)), fields)
  }

  /**
   * The counts of a counted index whose leading fields `match` pins to plain values, grouped by
   * `fields` (the index's other fields): one range read over its distinct keys. Undefined when no
   * counted index can answer (a filter with an operator, a multikey index, a cut string).
   */
  private fromCounts(match: Filter, fields: string[]): CountRow[] | undefined {
    this.fresh()
    for (const index of this.indexes) {
      // One of an older key encoding is rebuilt before it answers (its keys may not read back).
      if (!index.counts || index.multikey || index.encoding !== KEY_ENCODING) continue
      const how = countPlan(index.fields, match, fields)
      if (!how) continue
      const rows = new Map<string, CountRow>()
      for (const prefix of how.prefixes) {
        const start: KeyPart[] = prefix.flatMap(value => encodeValue(value))
        for (const { key, value } of index.counts.getRange({ start, end: [...start, KEY_MAX as unknown as KeyPart] })) {
          const values = how.groupPositions.map(p => keyValue(key[p * 2] as number, key[p * 2 + 1]!))
          if (values.some(v => v === undefined)) return undefined
          const id = partId(how.groupPositions.flatMap(p => [key[p * 2]!, key[p * 2 + 1]!]))
          const row = rows.get(id)
          if (row) row.n += value
          else rows.set(id, { values: values as CountValue[], n: value })
        }
      }
      return [...rows.values()]
    }
    return undefined
  }

  async aggregate<R>(pipeline: Record<string, any>[]): Promise<R[]> {
    const first = pipeline[0]
    // $match then a plain $group: read lazily and added up in slices (sliced-group.ts).
    const group = pipeline.length === 2 && first && '$match' in first && '$group' in pipeline[1]! ? simpleGroup(pipeline[1]!.$group) : null
    if (group) return groupInSlices<R>(this.candidates(first!.$match, undefined, false).docs, matcherOf(first!.$match), group)
    const source = first && '$match' in first ? this.matching(first.$match) : [...this.docs.getRange({}).map(e => e.value)]
    return aggregate(source, first && '$match' in first ? pipeline.slice(1) : pipeline) as R[]
  }

  // ------------------------------------------------------------------ writing (inside a transaction)

  /** Index entries of a document, checked for size; throws before anything is written. */
  private entriesOf(doc: Doc, indexes: LiveIndex[] = this.indexes): { index: LiveIndex; keys: KeyPart[][]; multi: boolean }[] {
    if (typeof doc._id !== 'string') throw new TypeError(`${this.name}: _id must be a string`)
    if (Buffer.byteLength(doc._id) > MAX_ID_BYTES) throw new RangeError(`${this.name}: _id longer than ${MAX_ID_BYTES} bytes`)
    return indexes.map(index => (index.covers && !index.covers(doc) ? { index, keys: [], multi: false } : { index, ...documentKeys(doc, index.fields, index.encoding) }))
  }

  /**
   * Moves a counted index's number for one key. The moves of one transaction are added up and
   * written once at its end (flushCounts, called by write-batch.ts): a slice of a load's new
   * contacts moves the same two keys once per contact, and claims and their settlements move
   * them back and forth.
   */
  private count(counts: Database<number, KeyPart[]>, key: KeyPart[], by: number) {
    let moves = this.countMoves.get(counts)
    if (!moves) {
      if (this.countMoves.size === 0) this.store.batches.moved(this)
      this.countMoves.set(counts, (moves = new Map()))
    }
    const id = partId(key)
    const move = moves.get(id)
    if (move) move.by += by
    else moves.set(id, { key, by })
  }

  /** Counted moves not yet written, per counted index (see count()). */
  private readonly countMoves = new Map<Database<number, KeyPart[]>, Map<string, { key: KeyPart[]; by: number }>>()

  /**
   * Writes the counted moves (removing a key at zero: only keys some document has are kept). Each
   * is forgotten once written: after a write that fails (the map full), the next flush writes
   * only the rest.
   */
  flushCounts() {
    for (const [counts, moves] of this.countMoves) {
      for (const [id, { key, by }] of moves) {
        if (by !== 0) {
          const n = (counts.get(key) ?? 0) + by
          if (n > 0) counts.putSync(key, n)
          else counts.removeSync(key)
        }
        moves.delete(id)
      }
      this.countMoves.delete(counts)
    }
  }

  /** Takes a document's key out of an index, or one off its number. */
  private removeEntry(index: LiveIndex, key: KeyPart[], id: string) {
    if (index.counts) this.count(index.counts, key, -1)
    else index.db!.removeSync(entryKey(key, id, index.encoding))
  }

  private putEntry(index: LiveIndex, key: KeyPart[], id: string) {
    if (index.counts) this.count(index.counts, key, 1)
    else index.db!.putSync(entryKey(key, id, index.encoding), EMPTY)
  }

  /** The first unique index a document's entries would share with another document. */
  private conflict(doc: Doc, entries: ReturnType<LmdbCollection<T>['entriesOf']>): string | undefined {
    for (const { index, keys } of entries) {
      if (!index.spec.unique || !index.db) continue
      for (const key of keys) {
        for (const other of index.db.getKeys({ start: key, end: [...key, KEY_MAX as unknown as KeyPart] })) {
          const otherId = entryId(other, index.encoding)
          if (otherId === doc._id) continue
          // A cut string only proves a shared prefix: compare the documents' values.
          if (!keyMayBeCut(key)) return index.name
          const otherDoc = this.docs.get(otherId)
          if (otherDoc && sameValues(doc, otherDoc, index.fields)) return index.name
        }
      }
    }
    return undefined
  }

  /** Writes a document and its entries in `indexes` (an update passes only the indexes it can change). */
  private putDoc(doc: T, previous: T | undefined, indexes: LiveIndex[] = this.indexes) {
    const entries = this.entriesOf(doc, indexes)
    const taken = this.conflict(doc, entries)
    if (taken) throw duplicate(this.name, taken)
    const before = previous ? this.entriesOf(previous, indexes) : undefined
    entries.forEach(({ index, keys, multi }, i) => {
      const oldKeys = before?.[i]?.keys ?? []
      if (oldKeys.length === 0) {
        for (const key of keys) this.putEntry(index, key, doc._id)
      } else if (oldKeys.length === 1 && keys.length === 1) {
        // One key before and after (no array on an indexed path): the common update.
        if (!sameKey(oldKeys[0]!, keys[0]!)) {
          this.removeEntry(index, oldKeys[0]!, doc._id)
          this.putEntry(index, keys[0]!, doc._id)
        }
      } else {
        const old = new Set(oldKeys.map(partId))
        const fresh = new Set(keys.map(partId))
        for (const key of oldKeys) if (!fresh.has(partId(key))) this.removeEntry(index, key, doc._id)
        for (const key of keys) if (!old.has(partId(key))) this.putEntry(index, key, doc._id)
      }
      if (multi && !index.multikey) this.markMultikey(index)
    })
    this.putDocument(doc)
  }

  private removeDoc(doc: T) {
    for (const { index, keys } of this.entriesOf(doc)) for (const key of keys) this.removeEntry(index, key, doc._id)
    this.removeDocument(doc._id)
  }

  private markMultikey(index: LiveIndex) {
    index.multikey = true
    index.spec.multikey = true
    const mark = (s: StoredIndex): StoredIndex => (index.previous ? { ...s, ...(s.previous ? { previous: { ...s.previous, multikey: true } } : {}) } : { ...s, multikey: true })
    const stored = this.store.declared(this.name).map(s => (s.name === index.name ? mark(s) : s))
    this.saveIndexes(stored)
  }

  private insertSync(doc: T) {
    if (typeof doc._id === 'string' && Buffer.byteLength(doc._id) > MAX_ID_BYTES) throw new RangeError(`${this.name}: _id longer than ${MAX_ID_BYTES} bytes`)
    if (this.docs.doesExist(doc._id)) throw duplicate(this.name, '_id_')
    this.putDoc(doc, undefined)
  }

  /** Writes `update` applied to `doc`; answers the document written, or undefined when nothing changed. */
  private updateDocSync(doc: T, update: Update): T | undefined {
    const [next, changed] = updatedCopy(doc, withoutSetOnInsert(update))
    if (!changed) return undefined
    // Only the indexes on a path the update writes, and whose values it changed, get new entries:
    // the others keep theirs (no key encoding, no unique check, no diff). Most updates need none.
    const touched = this.indexesTouchedBy(update).filter(index => !sameIndexedValues(doc, next, index.watched))
    if (touched.length === 0) this.putDocument(next)
    else this.putDoc(next, doc, touched)
    return next
  }

  /** The indexes with a field that a path the update writes is, contains or lies inside (all of them for an update it cannot read). */
  private indexesTouchedBy(update: Update): LiveIndex[] {
    // Runs for every update (several per session message): no strings or closures built per field.
    const paths: string[] = []
    for (const operator in update) {
      if (operator === '$setOnInsert') continue
      const fields = update[operator as `$${string}`]
      if (!PATH_KEYED_OPERATORS.has(operator) || !fields || typeof fields !== 'object') return this.indexes
      for (const path in fields) paths.push(path)
    }
    const touched: LiveIndex[] = []
    for (const index of this.indexes) if (watchesAny(index.watched, paths)) touched.push(index)
    return touched
  }

  private updateOneSync(filter: Filter, update: Update, options: { upsert?: boolean; sort?: Sort } = {}): UpdateResult & { after?: T; before?: T } {
    const [doc] = this.matching(filter, { limit: 1, sort: options.sort })
    if (doc) {
      // updatedCopy() leaves `doc` as read: it is the document before the update.
      const written = this.updateDocSync(doc, update)
      return { matchedCount: 1, modifiedCount: written ? 1 : 0, upsertedId: null, before: doc, after: written ?? doc }
    }
    if (options.upsert) {
      const created = upsertDocument(filter, update) as T
      this.insertSync(created)
      return { matchedCount: 0, modifiedCount: 0, upsertedId: created._id }
    }
    return { matchedCount: 0, modifiedCount: 0, upsertedId: null }
  }

  private updateManySync(filter: Filter, update: Update): UpdateResult {
    const docs = this.matching(filter)
    let modifiedCount = 0
    for (const doc of docs) if (this.updateDocSync(doc, update)) modifiedCount++
    return { matchedCount: docs.length, modifiedCount, upsertedId: null }
  }

  private deleteSync(filter: Filter, limit?: number): number {
    const docs = this.matching(filter, limit ? { limit } : {})
    for (const doc of docs) this.removeDoc(doc)
    return docs.length
  }

  async insertOne(doc: T) {
    assertSafeDocument(doc)
    const copy = clone(doc)
    await this.write(() => this.insertSync(copy))
  }

  async insertMany(docs: T[], options: { ordered?: boolean } = {}) {
    for (const doc of docs) assertSafeDocument(doc)
    return this.bulkWrite(docs.map(document => ({ insertOne: { document } })), options)
  }

  async updateOne(filter: Filter, update: Update, options: { upsert?: boolean } = {}): Promise<UpdateResult> {
    assertSafeUpdate(update)
    const [f, u] = [clone(filter), clone(update)]
    // Only the counts leave the callback: lmdb-js keeps each callback's result until its
    // transaction commits, and the documents before and after would live that long with it
    // (long enough to be promoted out of the young generation).
    return this.write(() => {
      const { matchedCount, modifiedCount, upsertedId } = this.updateOneSync(f, u, options)
      return { matchedCount, modifiedCount, upsertedId }
    })
  }

  async updateMany(filter: Filter, update: Update): Promise<UpdateResult> {
    assertSafeUpdate(update)
    const [f, u] = [clone(filter), clone(update)]
    const result: UpdateResult = { matchedCount: 0, modifiedCount: 0, upsertedId: null }
    await this.eachMatching(f, doc => {
      result.matchedCount++
      if (this.updateDocSync(doc, u)) result.modifiedCount++
    })
    return result
  }

  /**
   * `apply` to every document matching `filter`: in one transaction when they are at most
   * WRITE_SLICE (the common case, read once), else WRITE_SLICE per transaction, each document
   * re-checked against the filter in its own slice.
   */
  private async eachMatching(filter: Filter, apply: (doc: T) => void) {
    const done = await this.write(() => {
      const docs = this.matching(filter, { limit: WRITE_SLICE + 1 })
      if (docs.length > WRITE_SLICE) return false
      for (const doc of docs) apply(doc)
      return true
    })
    if (done) return
    const ids = this.matching(filter).map(doc => doc._id)
    const matches = matcherOf(filter)
    for (let from = 0; from < ids.length; from += WRITE_SLICE) {
      const slice = ids.slice(from, from + WRITE_SLICE)
      await this.write(() => {
        for (const id of slice) {
          const doc = this.docs.get(id)
          if (doc && matches(doc)) apply(doc)
        }
      })
    }
  }

  async findOneAndUpdate(filter: Filter, update: Update, options: { upsert?: boolean; returnDocument?: 'before' | 'after'; sort?: Sort } = {}) {
    assertSafeUpdate(update)
    const [f, u] = [clone(filter), clone(update)]
    return this.write(() => {
      const result = this.updateOneSync(f, u, options)
      if (options.returnDocument === 'before') return result.before ?? null
      // The document as written, not read back (a claim of the dialer's is one of these), except
      // where a read gives something else: JSON text turns Dates into strings; an upsert.
      if (result.after && !this.json) return result.after
      const id = result.before?._id ?? result.upsertedId
      return id ? (this.docs.get(id) ?? null) : null
    })
  }

  async deleteOne(filter: Filter) {
    const f = clone(filter)
    return this.write(() => this.deleteSync(f, 1))
  }

  async deleteMany(filter: Filter) {
    const f = clone(filter)
    let deleted = 0
    await this.eachMatching(f, doc => {
      this.removeDoc(doc)
      deleted++
    })
    return deleted
  }

  async bulkWrite(ops: BulkOp[], options: { ordered?: boolean } = {}): Promise<BulkResult> {
    assertSafeBulk(ops)
    if (ops.length === 0) return emptyBulk()
    const ordered = options.ordered ?? true
    const copies = clone(ops)
    const result = emptyBulk()
    for (let from = 0; from < copies.length; from += WRITE_SLICE) {
      const stopped = await this.write(() => this.bulkSlice(copies, from, Math.min(copies.length, from + WRITE_SLICE), ordered, result))
      if (stopped) break
    }
    return result
  }

  /** ops[from, to) into `result`, in the current transaction; true when an ordered bulk stopped at a duplicate. */
  private bulkSlice(ops: BulkOp[], from: number, to: number, ordered: boolean, result: BulkResult): boolean {
    for (let index = from; index < to; index++) if (!applyBulkOp(this.bulkTarget, ops[index]!, index, ordered, result)) return true
    return false
  }

  private readonly bulkTarget: BulkTarget = {
    insert: doc => this.insertSync(doc as T),
    updateOne: (filter, update, upsert) => this.updateOneSync(filter, update, { upsert }),
    updateMany: (filter, update) => this.updateManySync(filter, update),
    delete: (filter, limit) => this.deleteSync(filter, limit),
  }

  // ------------------------------------------------------------------ indexes

  /** Declares an index (builds it over the documents present); same name, other definition: rebuilt. */
  async addIndex(spec: IndexSpec) {
    const wanted: StoredIndex = {
      name: spec.name,
      key: spec.key,
      encoding: KEY_ENCODING,
      ...(spec.unique ? { unique: true } : {}),
      ...(spec.expireAfterSeconds !== undefined ? { expireAfterSeconds: spec.expireAfterSeconds } : {}),
      ...(spec.counted ? { counted: true } : {}),
      ...(spec.partialFilterExpression ? { partialFilterExpression: spec.partialFilterExpression } : {}),
    }
    if (spec.counted && (spec.unique || spec.expireAfterSeconds !== undefined)) throw new TypeError(`${this.name}.${spec.name}: a counted index is neither unique nor TTL`)
    if (spec.partialFilterExpression) assertPartialFilter(`${this.name}.${spec.name}`, spec)
    const covers = spec.partialFilterExpression ? matcherOf(spec.partialFilterExpression) : undefined
    const stored = this.store.declared(this.name)
    const current = stored.find(s => s.name === spec.name)
    if (current && sameDefinition(current, wanted)) {
      if (!this.indexes.some(i => i.name === spec.name)) this.loadIndexes()
      // A start cut short while emptying the entries a counted index had before resumes here
      // (the other way round, counted back to entries, is only emptied when the index changes).
      if (spec.counted) this.emptyOtherKind(spec)
      if (current.building) this.buildOnline(spec.name) // cut short by a restart: built again
      // A restart cut short the emptying of the generation it replaced: emptied again.
      else if (current.generation) for (const generation of new Set([0, current.generation - 1])) this.emptyInBackground(this.store.indexDb(this.name, spec.name, generation), spec.name)
      return
    }
    if (current && !current.building && current.unique && sameDefinition({ ...current, unique: false }, wanted)) {
      // Uniqueness dropped: a unique index's entries are the same (key, _id) entries, so only the
      // declaration changes; nothing is rebuilt.
      await this.write(() => {
        const { unique: _, ...relaxed } = current
        this.saveIndexes(this.store.declared(this.name).map(s => (s.name === spec.name ? relaxed : s)))
      })
      this.loadIndexes()
      return
    }
    if (current && !current.building && sameDefinition({ ...current, expireAfterSeconds: wanted.expireAfterSeconds }, wanted)) {
      // Only the TTL changed (a retention setting, or retention turned on or off): the entries
      // are the same (key, _id) entries either way, so only the declaration changes.
      await this.write(() => {
        const { expireAfterSeconds: _, ...rest } = current
        const next: StoredIndex = wanted.expireAfterSeconds === undefined ? rest : { ...rest, expireAfterSeconds: wanted.expireAfterSeconds }
        this.saveIndexes(this.store.declared(this.name).map(s => (s.name === spec.name ? next : s)))
      })
      this.loadIndexes()
      return
    }
    const serving = current?.building ? current.previous : current
    if (serving && rebuildsOnline(serving, wanted) && this.docs.getCount() > WRITE_SLICE) {
      await this.redefineOnline(current!, serving, wanted)
      return
    }
    const db = spec.counted ? this.store.countDb(this.name, spec.name) : this.store.indexDb(this.name, spec.name)
    const fields = Object.keys(spec.key)
    await this.write(() => {
      // Moves made earlier in this transaction would be added to the counts written below, which already hold them.
      this.flushCounts()
      // Built in memory first: a unique violation fails the declaration before anything is written.
      const entries: KeyPart[][] = []
      const counts = new Map<string, { key: KeyPart[]; n: number }>()
      /** The documents holding each key (several when a string was cut). */
      const owners = new Map<string, string[]>()
      let multikey = false
      for (const { value: doc } of this.docs.getRange({})) {
        if (covers && !covers(doc)) continue
        const { keys, multi } = documentKeys(doc, fields)
        multikey ||= multi
        for (const key of keys) {
          if (spec.counted) {
            const id = partId(key)
            const current = counts.get(id)
            if (current) current.n++
            else counts.set(id, { key, n: 1 })
            continue
          }
          if (spec.unique) {
            const id = partId(key)
            const others = owners.get(id)
            if (!others) owners.set(id, [doc._id])
            else {
              // As conflict(): a cut string only proves a shared prefix, the documents tell.
              const cut = keyMayBeCut(key)
              if (others.some(other => other !== doc._id && (!cut || sameValues(doc, this.docs.get(other)!, fields)))) throw duplicate(this.name, spec.name)
              others.push(doc._id)
            }
          }
          entries.push(entryKey(key, doc._id))
        }
      }
      this.clearSync(db)
      if (spec.counted) for (const { key, n } of counts.values()) (db as Database<number, KeyPart[]>).putSync(key, n)
      else for (const key of entries) (db as Database<Buffer, KeyPart[]>).putSync(key, EMPTY)
      const latest = this.store.declared(this.name).filter(s => s.name !== spec.name)
      this.saveIndexes([...latest, { ...wanted, ...(multikey ? { multikey: true } : {}) }])
    })
    this.loadIndexes()
    this.emptyOtherKind(spec)
    // Databases of earlier generations nothing reads any more.
    for (const old of [current, current?.previous]) if (old?.generation && !old.counted) this.emptyInBackground(this.store.indexDb(this.name, old.name, old.generation), spec.name)
  }

  /**
   * A changed definition of an index with entries over a large collection (a partial filter
   * added, a field changed) is not rebuilt in one transaction before the service listens: over
   * a large collection that delays the start by the whole build, and the pages it frees at once
   * slow every later commit (see "Transactions stay small"). Instead the new definition gets a
   * database of its own (the next generation), every write keeps both up from then on, the old
   * definition keeps serving queries, and buildOnline fills the new one in the background; then
   * it takes over and the old database is emptied a slice at a time.
   */
  private async redefineOnline(current: StoredIndex, serving: StoredIndex, wanted: StoredIndex) {
    const generation = Math.max(current.generation ?? 0, serving.generation ?? 0) + 1
    const abandoned = current.building ? current : undefined // an earlier redefinition not finished
    await this.write(() => {
      const stored = this.store.declared(this.name).filter(s => s.name !== wanted.name)
      this.saveIndexes([...stored, { ...wanted, generation, building: true, previous: serving }])
    })
    this.loadIndexes()
    if (abandoned) this.emptyInBackground(this.store.indexDb(this.name, abandoned.name, abandoned.generation), wanted.name)
    this.buildOnline(wanted.name)
  }

  /** Index builds running in the background, by index name. */
  private readonly builds = new Set<string>()

  /** Fills a building index from every document, a slice per transaction, then lets it serve. */
  private buildOnline(name: string) {
    const generation = this.indexes.find(i => i.name === name && i.building)?.spec.generation
    if (generation === undefined || this.builds.has(name)) return
    this.builds.add(name)
    let cursor: string | undefined
    let finished: StoredIndex | undefined
    const build = this.inSlices(started => {
      // Looked up again each slice: declarations reload (another index declared, a restart of this one).
      const building = this.indexes.find(i => i.name === name && i.building)
      if (building?.spec.generation !== generation) return false // redefined again meanwhile
      let n = 0
      for (const { key, value: doc } of this.docs.getRange({ start: cursor })) {
        if (key === cursor) continue // start is inclusive
        if (n === WRITE_SLICE || (n > 0 && performance.now() - started > COPY_SLICE_MS)) return true
        const [{ keys, multi }] = this.entriesOf(doc, [building])
        for (const entry of keys) building.db!.putSync(entryKey(entry, doc._id, building.encoding), EMPTY)
        if (multi && !building.multikey) this.markMultikey(building)
        cursor = key
        n++
      }
      // Every document is in: the new definition serves from this transaction on.
      const stored = this.store.declared(this.name)
      const entry = stored.find(s => s.name === name)
      if (!entry?.building || entry.generation !== generation) return false
      const { building: _, previous, ...done } = entry
      this.saveIndexes(stored.map(s => (s === entry ? done : s)))
      finished = previous
      return false
    })
      .then(() => {
        if (!finished) return
        this.loadIndexes()
        this.store.logger?.info('store: index rebuilt in the background', { collection: this.name, index: name })
        this.emptyInBackground(this.store.indexDb(this.name, name, finished.generation), name)
      })
      .catch(error => this.store.logger?.error('store: building an index failed; the next start builds it again', { collection: this.name, index: name, error }))
      .finally(() => this.builds.delete(name))
    this.store.background(build)
  }

  /** Empties a database nothing reads any more, a slice at a time, in the background. */
  private emptyInBackground(db: Database<any, any>, index: string) {
    if (db.getCount() === 0) return
    this.store.background(this.empty(db).catch(error => this.store.logger?.error('store: emptying an old index failed; the next start goes on', { collection: this.name, index, error })))
  }

  /**
   * An index declared as the other kind before (entries, now counted, or back) left a database
   * nothing reads: emptied in the background a slice at a time, as a move to JSON does.
   */
  private emptyOtherKind(spec: IndexSpec) {
    const other = spec.counted ? this.store.indexDb(this.name, spec.name) : this.store.existingCountDb(this.name, spec.name)
    if (other) this.emptyInBackground(other, spec.name)
  }

  /** Removes expired documents, `slices` slices of `slice` at most per TTL index; answers how many went. */
  async sweepExpired(now: number, slice: number, slices: number): Promise<number> {
    let removed = 0
    for (const index of this.plannable) {
      if (index.spec.expireAfterSeconds === undefined) continue
      const cutoff = now - index.spec.expireAfterSeconds * 1000
      const field = index.fields[0]!
      for (let round = 0; round < slices; round++) {
        const expired = new Map<string, KeyPart[][]>()
        for (const key of index.db.getKeys({ start: [RANK.date], end: [RANK.date, cutoff, KEY_MAX as unknown as KeyPart], limit: slice })) {
          const id = entryId(key, index.encoding)
          expired.set(id, [...(expired.get(id) ?? []), key])
        }
        if (expired.size === 0) break
        removed += await this.write(() => {
          let n = 0
          for (const [id, keys] of expired) {
            const doc = this.docs.get(id)
            if (!doc) {
              for (const key of keys) index.db.removeSync(key) // an entry left without its document
              continue
            }
            // mongod's rule: the earliest Date of the field plus expireAfterSeconds is past.
            const dates = pathValues(doc, field).values.filter((v): v is Date => v instanceof Date)
            if (dates.length > 0 && Math.min(...dates.map(d => d.getTime())) <= cutoff) {
              this.removeDoc(doc)
              n++
            }
          }
          return n
        })
        if (expired.size < slice) break
      }
    }
    return removed
  }
}

/**
 * Bounds of an _id condition the documents' key order can seek to. Only for strings of characters
 * from U+0005 to U+D7FF: against such a bound, the keys' order (UTF-8 bytes) and mingo's (UTF-16
 * units), which decides each document after, agree; other bounds scan as before.
 */
interface IdBounds {
  lo?: string
  hi?: string
  hiInclusive: boolean
}

function idBounds(id: unknown): IdBounds {
  if (id === null || typeof id !== 'object' || Array.isArray(id)) return { hiInclusive: false }
  const condition = id as Record<string, unknown>
  const seekable = (v: unknown): v is string => typeof v === 'string' && /^[\u0005-\ud7ff]*$/.test(v)
  const lo = condition.$gt ?? condition.$gte
  const hi = condition.$lt ?? condition.$lte
  return {
    ...(seekable(lo) ? { lo } : {}),
    ...(seekable(hi) ? { hi } : {}),
    hiInclusive: condition.$lt === undefined,
  }
}

/** The documents of `entries` (in key order) up to the upper bound `hi`. */
function* upTo<T>(entries: Iterable<{ key: string; value: T }>, hi: string, inclusive: boolean, reads: { documents: number }): Generator<T> {
  for (const entry of entries) {
    if (entry.key > hi || (!inclusive && entry.key === hi)) return
    reads.documents++
    yield entry.value
  }
}
