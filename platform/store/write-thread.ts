// Writes to the embedded store done by a thread of their own, off the loop that serves live
// sessions. An LMDB write's cost is on the thread that runs it: reading and decoding the old
// document, applying the update, key diffs, encoding and puts, tens of microseconds per session
// update, and lmdb-js runs every write queued in a macrotask as one transaction, so a batch of
// them holds the loop for milliseconds (write-holds.ts measures it). LMDB lets several threads of
// one process open one environment (its single writer lock orders their transactions; see
// dialer/chunk-thread.ts for the same idea), so the thread opens the same database and runs the
// very same LmdbCollection code; the loop only posts the operation and reads back its result.
//
// Reads stay on the loop. After each answer the loop's read transaction is renewed, so a read
// that follows an acknowledged write sees it (lmdb-js would otherwise keep reading from the
// snapshot it opened earlier in the same turn). Writes keep their order: writes asked for together
// go as one message (sent a microtask after the first of them), the thread starts them in that
// order as the message arrives, and lmdb-js commits writes in the order they were started.
//
// Collections kept as JSON write on the loop: their one-time move from MessagePack runs in the
// handle that opens them, and it must be one. If the thread cannot start (or died too often),
// writes run on the loop, as without the thread. A write in flight when the thread dies is
// answered with an error: it may or may not have been committed, and repeating an $inc could
// count twice.
import { ThreadRequests } from '../thread-requests.js'
import type { LmdbStore } from './lmdb-store.js'
import { UnsafeUpdatePathError } from './update-paths.js'
import { type BulkOp, type BulkResult, type Collection, type CollectionOptions, type Doc, DuplicateKeyError, type Filter, type FindOptions, type IndexSpec, type OrderedLog, type Sort, type Store, StoreUnavailableError, type Update, UpdateRefusedError, type UpdateResult } from './types.js'

/** The collection methods the thread runs. */
export type WriteMethod = 'insertOne' | 'insertMany' | 'updateOne' | 'updateMany' | 'findOneAndUpdate' | 'deleteOne' | 'deleteMany' | 'bulkWrite'

/** One write: the collection and method it runs, with its arguments. */
export interface WriteOp {
  collection: string
  method: WriteMethod
  args: unknown[]
}
export type WriteOutcome = { result: unknown } | { error: { name: string; message: string; code?: number } }

/** Writes asked for together go as one message (a postMessage and a wake-up of the thread each cost more than most writes' clone). */
export type WriteRequest = { id: number; path: string; writes: WriteOp[] } | { id: number; path: string; close: true }
export type WriteAnswer = { id: number; outcomes: WriteOutcome[] } | { id: number; released: true }

/** One thread per process, shared by every store in it (tests open many); each request names its database. */
const shared = new ThreadRequests<WriteRequest, WriteAnswer>(import.meta.url, 'write-thread-worker')

/** The errors callers tell apart keep their class across the thread. */
const KNOWN_ERRORS: Record<string, new (message: string, code?: number) => Error> = {
  DuplicateKeyError,
  UpdateRefusedError,
  UnsafeUpdatePathError,
  StoreUnavailableError,
  TypeError,
  RangeError,
}

function rebuilt(error: { name: string; message: string; code?: number }): Error {
  const Known = KNOWN_ERRORS[error.name]
  if (Known) return new Known(error.message, error.code)
  const other = new Error(error.message)
  other.name = error.name
  return other
}

/** The store as seen by a writer whose writes run in the write thread (an embedded store), reads on the loop. */
export class OffLoopStore implements Store {
  readonly kind: Store['kind']
  readonly keepsCounts: boolean
  readonly sharedPath: string
  private readonly collections = new Map<string, Collection<any>>()
  private used = false

  constructor(readonly local: LmdbStore) {
    this.kind = local.kind
    this.keepsCounts = local.keepsCounts
    this.sharedPath = local.sharedPath
  }

  collection<T extends Doc = Doc>(name: string, options: CollectionOptions = {}): Collection<T> {
    const local = this.local.collection<T>(name, options)
    if (options.json) return local
    let collection = this.collections.get(name)
    if (!collection) {
      collection = new OffLoopCollection<T>(local, this)
      this.collections.set(name, collection)
    }
    return collection
  }

  /** lmdb-js already commits an ordered log's puts on a thread of its own: the loop only encodes them. */
  orderedLog<V>(name: string): OrderedLog<V> {
    return this.local.orderedLog<V>(name)
  }

  ensureIndexes(collection: string, indexes: IndexSpec[]) {
    // Declared here; the thread's handle reloads declarations whose revision moved before each write.
    return this.local.ensureIndexes(collection, indexes)
  }

  /** Writes asked for since the last message, sent together a microtask after the first of them. */
  private queued: { op: WriteOp; settle: (outcome: WriteOutcome | 'unsent' | 'lost') => void }[] = []

  /** @internal runs one write in the thread; undefined when there is no thread (the caller writes here). */
  async write(collection: string, method: WriteMethod, args: unknown[]): Promise<{ result: unknown } | undefined> {
    this.used = true
    const outcome = await new Promise<WriteOutcome | 'unsent' | 'lost'>(settle => {
      if (this.queued.length === 0) queueMicrotask(() => this.send())
      this.queued.push({ op: { collection, method, args }, settle })
    })
    if (outcome === 'unsent') return undefined
    if (outcome === 'lost') throw new StoreUnavailableError(`store write thread stopped during ${method} on ${collection}; the write may or may not be committed`)
    if ('error' in outcome) throw rebuilt(outcome.error)
    return outcome
  }

  private async send() {
    const queued = this.queued
    this.queued = []
    const answer = await shared.request(id => ({ id, path: this.sharedPath, writes: queued.map(q => q.op) }))
    // Whatever the thread committed is visible to this loop's next read.
    if (answer !== 'unsent') this.local.renewReads()
    queued.forEach((q, i) => q.settle(typeof answer === 'string' ? answer : 'outcomes' in answer ? answer.outcomes[i]! : 'lost'))
  }

  /** Closes the thread's handle on this database; the store itself belongs to whoever opened it. */
  async close() {
    if (!this.used || !shared.up) return
    await shared.request(id => ({ id, path: this.sharedPath, close: true }))
  }
}

class OffLoopCollection<T extends Doc> implements Collection<T> {
  readonly name: string

  constructor(
    private readonly local: Collection<T>,
    private readonly store: OffLoopStore,
  ) {
    this.name = local.name
  }

  private async write<R>(method: WriteMethod, args: unknown[]): Promise<R> {
    const done = await this.store.write(this.name, method, args)
    if (done) return done.result as R
    return (this.local[method] as (...a: unknown[]) => Promise<R>)(...args)
  }

  insertOne(doc: T) {
    return this.write<void>('insertOne', [doc])
  }
  insertMany(docs: T[], options?: { ordered?: boolean }) {
    return this.write<BulkResult>('insertMany', [docs, options])
  }
  updateOne(filter: Filter, update: Update, options?: { upsert?: boolean }) {
    return this.write<UpdateResult>('updateOne', [filter, update, options])
  }
  updateMany(filter: Filter, update: Update) {
    return this.write<UpdateResult>('updateMany', [filter, update])
  }
  findOneAndUpdate(filter: Filter, update: Update, options?: { upsert?: boolean; returnDocument?: 'before' | 'after'; sort?: Sort }) {
    return this.write<T | null>('findOneAndUpdate', [filter, update, options])
  }
  deleteOne(filter: Filter) {
    return this.write<number>('deleteOne', [filter])
  }
  deleteMany(filter: Filter) {
    return this.write<number>('deleteMany', [filter])
  }
  bulkWrite(ops: BulkOp[], options?: { ordered?: boolean }) {
    return this.write<BulkResult>('bulkWrite', [ops, options])
  }

  findOne(filter: Filter, options?: FindOptions) {
    return this.local.findOne(filter, options)
  }
  find(filter: Filter, options?: FindOptions) {
    return this.local.find(filter, options)
  }
  countDocuments(filter: Filter) {
    return this.local.countDocuments(filter)
  }
  aggregate<R = Record<string, any>>(pipeline: Record<string, any>[]) {
    return this.local.aggregate<R>(pipeline)
  }
  countBy(...args: Parameters<Collection<T>['countBy']>) {
    return this.local.countBy(...args)
  }
}

/** `store` with its writes off the loop when it is an embedded store that another thread can open; else `store` itself. */
export function writesOffTheLoop(store: Store): Store {
  return store.kind === 'lmdb' && store.sharedPath ? new OffLoopStore(store as LmdbStore) : store
}
