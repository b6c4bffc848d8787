// The production store: the official MongoDB driver. Driver errors are translated into the
// two the repositories care about (duplicate key, unavailable); everything else propagates.
import {
  type AnyBulkWriteOperation,
  type BulkWriteResult,
  MongoBulkWriteError,
  MongoClient,
  type MongoClientOptions,
  MongoNetworkError,
  MongoServerError,
  MongoServerSelectionError,
  MongoTopologyClosedError,
  type Collection as DriverCollection,
  type Db,
} from 'mongodb'
import { isDeepStrictEqual } from 'node:util'
import { MongoLog } from './mongo-log.js'
import { assertSafeBulk, assertSafeDocument, assertSafeUpdate } from './update-paths.js'
import { countByPipeline, countRowsOf, type CountRow, type CountValue } from './counted-index.js'
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
  StoreUnavailableError,
  type Update,
  UpdateRefusedError,
} from './types.js'

function translate(error: unknown): never {
  if (error instanceof MongoServerError && error.code === 11000) throw new DuplicateKeyError(error.message)
  if (error instanceof MongoServerError && (error.code === 14 || error.code === 28)) throw new UpdateRefusedError(error.message, error.code)
  if (error instanceof MongoServerSelectionError || error instanceof MongoNetworkError || error instanceof MongoTopologyClosedError) {
    throw new StoreUnavailableError(error.message)
  }
  throw error
}

/** Runs a driver call, translating errors; `onUnavailable` lets the store recover its client. */
async function guard<R>(work: () => Promise<R>, onUnavailable?: () => void): Promise<R> {
  try {
    return await work()
  } catch (error) {
    if (error instanceof MongoTopologyClosedError) onUnavailable?.()
    translate(error)
  }
}

/** Whether an index mongod lists is the one declared (its key, in order, and its options). */
function sameIndex(listed: Record<string, any>, wanted: { key: Record<string, number>; unique?: boolean; expireAfterSeconds?: number; partialFilterExpression?: Record<string, unknown> }): boolean {
  const number = (v: unknown) => (typeof v === 'object' && v !== null ? Number(v) : v) // mongod may list 1 as a Long or a Double
  const keys = (key: Record<string, unknown>) => Object.entries(key).map(([field, direction]) => [field, number(direction)])
  return (
    isDeepStrictEqual(keys(listed.key ?? {}), keys(wanted.key)) &&
    !!listed.unique === !!wanted.unique &&
    number(listed.expireAfterSeconds) === wanted.expireAfterSeconds &&
    isDeepStrictEqual(listed.partialFilterExpression ?? undefined, wanted.partialFilterExpression)
  )
}

class MongoCollection<T extends Doc> implements Collection<T> {
  constructor(private readonly inner: DriverCollection<any>, private readonly recover: () => void) {}

  private run<R>(work: () => Promise<R>): Promise<R> {
    return guard(work, this.recover)
  }
  get name() {
    return this.inner.collectionName
  }

  insertOne(doc: T) {
    return this.run(async () => {
      assertSafeDocument(doc)
      await this.inner.insertOne(doc)
    })
  }

  insertMany(docs: T[], options: { ordered?: boolean } = {}) {
    return this.bulkWrite(docs.map(document => ({ insertOne: { document } })), options)
  }

  findOne(filter: Filter, options: FindOptions = {}) {
    return this.run(() => this.inner.findOne(filter, options) as Promise<T | null>)
  }

  find(filter: Filter, options: FindOptions = {}) {
    return this.run(() => this.inner.find(filter, options).toArray() as Promise<T[]>)
  }

  countDocuments(filter: Filter) {
    return this.run(() => this.inner.countDocuments(filter))
  }

  updateOne(filter: Filter, update: Update, options: { upsert?: boolean } = {}) {
    return this.run(async () => {
      assertSafeUpdate(update)
      const r = await this.inner.updateOne(filter, update, options)
      return { matchedCount: r.matchedCount, modifiedCount: r.modifiedCount, upsertedId: (r.upsertedId as any) ?? null }
    })
  }

  updateMany(filter: Filter, update: Update) {
    return this.run(async () => {
      assertSafeUpdate(update)
      const r = await this.inner.updateMany(filter, update)
      return { matchedCount: r.matchedCount, modifiedCount: r.modifiedCount, upsertedId: null }
    })
  }

  findOneAndUpdate(
    filter: Filter,
    update: Update,
    options: { upsert?: boolean; returnDocument?: 'before' | 'after'; sort?: Sort } = {},
  ) {
    return this.run(async () => {
      assertSafeUpdate(update)
      return (await this.inner.findOneAndUpdate(filter, update, {
        upsert: options.upsert,
        sort: options.sort,
        returnDocument: options.returnDocument ?? 'after',
        includeResultMetadata: false,
      })) as T | null
    })
  }

  deleteOne(filter: Filter) {
    return this.run(async () => (await this.inner.deleteOne(filter)).deletedCount)
  }

  deleteMany(filter: Filter) {
    return this.run(async () => (await this.inner.deleteMany(filter)).deletedCount)
  }

  async bulkWrite(ops: BulkOp[], options: { ordered?: boolean } = {}): Promise<BulkResult> {
    assertSafeBulk(ops)
    if (ops.length === 0) {
      return { insertedCount: 0, matchedCount: 0, modifiedCount: 0, upsertedCount: 0, deletedCount: 0, duplicateKeyIndexes: [] }
    }
    const counts = (r: BulkWriteResult, duplicateKeyIndexes: number[]): BulkResult => ({
      insertedCount: r.insertedCount,
      matchedCount: r.matchedCount,
      modifiedCount: r.modifiedCount,
      upsertedCount: r.upsertedCount,
      deletedCount: r.deletedCount,
      duplicateKeyIndexes,
    })
    try {
      return counts(await this.inner.bulkWrite(ops as AnyBulkWriteOperation<any>[], { ordered: options.ordered ?? true }), [])
    } catch (error) {
      if (!(error instanceof MongoBulkWriteError)) translate(error)
      // Unique-index rejections are an expected outcome (ordered:false keeps going past them).
      const errors = Array.isArray(error.writeErrors) ? error.writeErrors : [error.writeErrors]
      // No write error at all: the batch failed as a whole (e.g. the connection closed), nothing to count as written.
      if (errors.length === 0 || errors.some(e => e?.code !== 11000)) throw error
      return counts(error.result, errors.map(e => e.index))
    }
  }

  aggregate<R>(pipeline: Record<string, any>[]) {
    return this.run(() => this.inner.aggregate(pipeline, { allowDiskUse: true }).toArray() as Promise<R[]>)
  }

  async countBy(match: Record<string, CountValue>, fields: string[]): Promise<CountRow[]> {
    return countRowsOf(await this.aggregate(countByPipeline(match, fields)), fields)
  }
}

export class MongoStore implements Store {
  readonly kind = 'mongo' as const
  readonly keepsCounts = false
  private closing = false
  private reconnecting = false
  private constructor(private readonly client: MongoClient, private readonly db: Db) {}

  /**
   * The driver closes its topology when a first connection attempt fails and never retries on
   * its own; reconnect in the background so the store comes back when the server does.
   */
  private readonly recover = () => {
    if (this.closing || this.reconnecting) return
    this.reconnecting = true
    this.client.connect().then(
      () => (this.reconnecting = false),
      () => (this.reconnecting = false),
    )
  }

  static async connect(url: string, options: MongoClientOptions = {}): Promise<MongoStore> {
    const store = MongoStore.lazy(url, options)
    await guard(() => store.client.connect())
    return store
  }

  /** Connects on first use; for optional dependencies that must not block start-up. */
  static lazy(url: string, options: MongoClientOptions = {}): MongoStore {
    const client = new MongoClient(url, { serverSelectionTimeoutMS: 5000, ...options })
    return new MongoStore(client, client.db())
  }

  collection<T extends Doc = Doc>(name: string): Collection<T> {
    return new MongoCollection<T>(this.db.collection(name), this.recover)
  }

  private readonly logs = new Map<string, MongoLog<any>>()

  orderedLog<V>(name: string): OrderedLog<V> {
    let log = this.logs.get(name)
    if (!log) this.logs.set(name, (log = new MongoLog<V>(this.db.collection(name), work => guard(work, this.recover))))
    return log
  }

  async ensureIndexes(name: string, indexes: IndexSpec[]) {
    if (indexes.length === 0) return
    for (const spec of indexes) if (spec.partialFilterExpression) assertPartialFilter(`${name}.${spec.name}`, spec)
    const specs = indexes.map(spec => ({
      name: spec.name,
      key: spec.key,
      ...(spec.unique ? { unique: true } : {}),
      ...(spec.expireAfterSeconds !== undefined ? { expireAfterSeconds: spec.expireAfterSeconds } : {}),
      ...(spec.partialFilterExpression ? { partialFilterExpression: spec.partialFilterExpression } : {}),
    }))
    const collection = this.db.collection(name)
    // An index declared before under the same name with another definition is built again
    // (createIndexes would refuse it: IndexOptionsConflict), as the embedded store does.
    const existing = await guard(() => collection.listIndexes().toArray(), this.recover).catch(error => {
      if (error instanceof MongoServerError && error.code === 26) return [] // NamespaceNotFound: no collection yet
      throw error
    })
    for (const spec of specs) {
      const current = existing.find(index => index.name === spec.name)
      if (!current || sameIndex(current, spec)) continue
      // Only the TTL changed (a retention setting): collMod changes it in place, where dropping
      // and building the index again would read the whole collection and leave it without a TTL
      // meanwhile. Turning a TTL off (or a server that cannot add one) takes the rebuild.
      if (spec.expireAfterSeconds !== undefined && sameIndex({ ...current, expireAfterSeconds: spec.expireAfterSeconds }, spec)) {
        const changed = await guard(() => this.db.command({ collMod: name, index: { name: spec.name, expireAfterSeconds: spec.expireAfterSeconds } }), this.recover).then(
          () => true,
          error => {
            if (error instanceof MongoServerError) return false
            throw error
          },
        )
        if (changed) continue
      }
      await guard(() => collection.dropIndex(spec.name), this.recover)
    }
    await guard(() => collection.createIndexes(specs), this.recover)
  }

  async close() {
    this.closing = true
    await this.client.close()
  }
}
