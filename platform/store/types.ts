// The storage seam. Repositories speak the MongoDB collection language once (filters, update
// operators, pipelines); MongoStore hands those documents to the driver and MemoryStore
// evaluates them in-process with mingo. Only the methods below exist, so both stay alike.
// Hot paths leave that generic layer for named, purpose-built operations (OrderedLog), each
// implemented once per store and held to the same contract (test/platform/store-contract.test.ts).

import type { CountRow, CountValue } from './counted-index.js'

export type Doc = { _id: string } & Record<string, any>

/** A field's value, or one of its elements when it is an array (a filter matches either). */
type Matched<V> = V extends readonly (infer E)[] ? V | E : V
/** The query operators on one field, typed by the field's value. */
interface FieldOperators<V> {
  $eq?: Matched<V> | null
  $ne?: Matched<V> | null
  $in?: readonly (Matched<V> | null | RegExp)[]
  $nin?: readonly (Matched<V> | null)[]
  $gt?: Matched<V>
  $gte?: Matched<V>
  $lt?: Matched<V>
  $lte?: Matched<V>
  $exists?: boolean
  $regex?: RegExp | string
  $not?: FieldOperators<V> | RegExp
  $elemMatch?: Record<string, unknown>
  $size?: number
}
/**
 * A MongoDB filter over documents of type T: a declared field takes its own type (or its
 * operators); dotted paths into sub-documents and the logical operators are not checked deeper.
 */
export type Filter<T extends Doc = Doc> = { [K in keyof T & string]?: Matched<T[K]> | null | RegExp | FieldOperators<T[K]> } & {
  $or?: Filter<T>[]
  $and?: Filter<T>[]
  $nor?: Filter<T>[]
  [path: string]: unknown
}
/** A MongoDB update document ($set, $inc, $unset, ... by path). */
export type Update = { [operator: `$${string}`]: Record<string, unknown> | undefined }
export type Sort = Record<string, 1 | -1>

export interface IndexSpec {
  name: string
  key: Record<string, 1 | -1>
  unique?: boolean
  /** TTL: the indexed field is a Date; the document expires that many seconds after it. */
  expireAfterSeconds?: number
  /**
   * Embedded store only (MongoStore ignores it): also hash documents by the first N key fields,
   * so a filter giving all N as plain values scans that partition instead of the collection.
   */
  partitionFields?: number
  /**
   * Embedded store: no entry per document, only the number of documents per distinct key, kept
   * by each write's own transaction. `countDocuments` with plain equalities on the key's leading
   * fields, and `countBy` over the rest, read those numbers instead of the documents; no query
   * reads documents through it. Neither unique nor TTL. MongoStore builds a plain index.
   */
  counted?: boolean
  /**
   * A partial index: only documents whose fields equal these values have entries (MongoDB's
   * partialFilterExpression, equalities only). A query uses it only when its filter pins the
   * same fields to the same values. Not unique, not counted: every store can keep it alike.
   */
  partialFilterExpression?: Record<string, string | number | boolean>
}

export interface FindOptions {
  sort?: Sort
  skip?: number
  limit?: number
  projection?: Record<string, 0 | 1>
}

export type BulkOp =
  | { insertOne: { document: Doc } }
  | { updateOne: { filter: Filter; update: Update; upsert?: boolean } }
  | { updateMany: { filter: Filter; update: Update } }
  | { deleteOne: { filter: Filter } }
  | { deleteMany: { filter: Filter } }

export interface BulkResult {
  insertedCount: number
  matchedCount: number
  modifiedCount: number
  upsertedCount: number
  deletedCount: number
  /** Operations rejected by a unique index (ordered:false keeps going past them). */
  duplicateKeyIndexes: number[]
}

export interface UpdateResult {
  matchedCount: number
  modifiedCount: number
  upsertedId: string | null
}

export class DuplicateKeyError extends Error {
  override name = 'DuplicateKeyError'
  readonly code = 11000
}

/**
 * An update mongod refuses for the document it would change: `$inc` of a field that holds
 * something other than a number (code 14, TypeMismatch), or a field created inside a value that
 * is not an embedded document (code 28, PathNotViable). The embedded stores refuse them alike
 * and leave the document as it was, so code developed on `make run` meets the same refusal it
 * would meet in production.
 */
export class UpdateRefusedError extends Error {
  override name = 'UpdateRefusedError'
  constructor(
    message: string,
    readonly code: number = 14,
  ) {
    super(message)
  }
}

/** A partial index's filter: plain equalities to short scalars (what the planner can prove a filter implies). */
export function assertPartialFilter(name: string, spec: IndexSpec) {
  if (spec.unique || spec.counted) throw new TypeError(`${name}: a partial index is neither unique nor counted`)
  const entries = Object.entries(spec.partialFilterExpression!)
  const plain = (v: unknown) => (typeof v === 'string' && v.length < 100) || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v))
  if (entries.length === 0 || entries.some(([field, value]) => field.startsWith('$') || !plain(value))) {
    throw new TypeError(`${name}: partialFilterExpression takes plain equalities to strings (under 100 characters), finite numbers or booleans`)
  }
}

/** The store could not be reached; callers decide whether to degrade (idempotency does). */
export class StoreUnavailableError extends Error {
  override name = 'StoreUnavailableError'
}

export interface Collection<T extends Doc = Doc> {
  readonly name: string
  insertOne(doc: T): Promise<void>
  insertMany(docs: T[], options?: { ordered?: boolean }): Promise<BulkResult>
  findOne(filter: Filter<T>, options?: FindOptions): Promise<T | null>
  find(filter: Filter<T>, options?: FindOptions): Promise<T[]>
  countDocuments(filter: Filter<T>): Promise<number>
  updateOne(filter: Filter<T>, update: Update, options?: { upsert?: boolean }): Promise<UpdateResult>
  updateMany(filter: Filter<T>, update: Update): Promise<UpdateResult>
  findOneAndUpdate(
    filter: Filter<T>,
    update: Update,
    options?: { upsert?: boolean; returnDocument?: 'before' | 'after'; sort?: Sort },
  ): Promise<T | null>
  deleteOne(filter: Filter<T>): Promise<number>
  deleteMany(filter: Filter<T>): Promise<number>
  bulkWrite(ops: BulkOp[], options?: { ordered?: boolean }): Promise<BulkResult>
  aggregate<R = Record<string, any>>(pipeline: Record<string, any>[]): Promise<R[]>
  /**
   * How many documents `match` (plain equalities) finds per distinct values of `fields`, a
   * missing field counted as null: one row per group, in no particular order (counted-index.ts).
   */
  countBy(match: Record<string, CountValue>, fields: string[]): Promise<CountRow[]>
}

/** One record of an ordered log: `position` (a non-negative integer) orders the records of a stream. */
export interface LogRecord<V> {
  stream: string
  position: number
  value: V
}

/**
 * Records kept in (stream, position) order, written by plain puts and read back by position:
 * no document layer, no secondary index, no query language. One `write` is one commit (one
 * LMDB transaction on the embedded store, one bulk write on MongoDB), so what it writes is
 * there together or not at all. A position written again holds the newer value. Values are
 * JSON values (what JSON.stringify keeps, without undefined).
 */
export interface OrderedLog<V> {
  readonly name: string
  write(records: LogRecord<V>[]): Promise<void>
  /** The stream's records with position > after, in position order (at most `limit`). */
  read(stream: string, after: number, limit?: number): Promise<LogRecord<V>[]>
  /** The value at one position, or undefined. */
  get(stream: string, position: number): Promise<V | undefined>
  /** Removes every record of the stream. */
  drop(stream: string): Promise<void>
}

/** A stream id that every store can keep as a key: a non-empty string without U+0000, at most 512 characters. */
export function assertLogStream(stream: string) {
  if (typeof stream !== 'string' || stream.length === 0 || stream.length > 512 || stream.includes('\u0000')) {
    throw new TypeError('an ordered log stream is a non-empty string of at most 512 characters without U+0000')
  }
}

export function assertLogPosition(position: number) {
  if (!Number.isSafeInteger(position) || position < 0) throw new TypeError(`an ordered log position is a non-negative integer (got ${position})`)
}

/** How a collection's documents are kept; every store answers the same either way. */
export interface CollectionOptions {
  /**
   * Embedded store only (the others ignore it): the documents hold JSON values only (no binary,
   * and no Date except at the top level, where a TTL field is: json-documents.ts), so they are
   * kept as JSON text. Wide documents whose keys differ from one to the next (report blocks: a
   * key per histogram bin) decode faster from JSON than from MessagePack, which defines a record
   * structure for nearly every such object.
   */
  json?: boolean
}

export interface Store {
  readonly kind: 'memory' | 'lmdb' | 'mongo'
  /**
   * countDocuments over a counted index's leading fields reads numbers the store keeps in each
   * write's transaction (the embedded store): constant time, exact after a crash. false: it counts
   * index entries (MongoDB, the memory store), so callers keep counters of their own.
   */
  readonly keepsCounts: boolean
  /** Where another thread of this process can open the same database (the embedded store); absent: it cannot. */
  readonly sharedPath?: string
  /** Writes another thread committed to `sharedPath` are seen by this thread's next read (lmdb-js keeps a read snapshot per macrotask). */
  renewReads?(): void
  /** Every caller of one collection passes the same options. */
  collection<T extends Doc = Doc>(name: string, options?: CollectionOptions): Collection<T>
  /** A purpose-built ordered log (see OrderedLog); one name is either a log or a collection, never both. */
  orderedLog<V>(name: string): OrderedLog<V>
  ensureIndexes(collection: string, indexes: IndexSpec[]): Promise<void>
  close(): Promise<void>
}
