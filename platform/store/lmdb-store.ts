// The embedded store on LMDB (the `lmdb` package: a copy-on-write B+tree in one memory-mapped
// file, crash-safe, ordered keys, several processes on one host). It keeps the contract of the
// other stores: repositories send MongoDB filter, update and pipeline documents, evaluated
// here by mingo (with the plain-JS fast paths of query.ts).
//
// Layout, in one environment under DATA_DIR:
//   c:<collection>          documents by _id (MessagePack: Dates, numbers and nesting round-trip)
//   j:<collection>          the same as JSON text, for a collection opened with { json: true }
//                           (Dates at the top level only: json-documents.ts); documents a c:
//                           database of the same name still holds are copied over in the
//                           background when it is opened
//   i:<collection>:<index>  one entry per (indexed values, _id), see index-keys.ts; no value
//   n:<collection>:<index>  a `counted` index: the number of documents per distinct indexed
//                           values (no entry per document), see counted-index.ts
//   l:<log>                 an ordered log (lmdb-log.ts): records by [stream, position]
//   m:indexes               declared indexes per collection (and whether they went multikey)
//   m:structures            msgpackr's record structures of each collection's documents
//                           (shared-structures.ts: a document stores values, not key names)
//
// Each collection (lmdb-collection.ts) reads and writes its documents and index entries;
// index declarations and their definitions are in lmdb-indexes.ts.
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { open, type Database, type RootDatabase } from 'lmdb'
import type { Collection, CollectionOptions, Doc, IndexSpec, OrderedLog, Store } from './types.js'
import { LmdbLog } from './lmdb-log.js'
import { type Clock, systemClock } from '../clock.js'
import type { Logger } from '../logger.js'
import type { KeyPart } from './index-keys.js'
import { WriteBatches } from './write-batch.js'
import { WriteHolds } from './write-holds.js'
import { LmdbCollection } from './lmdb-collection.js'
import { revisionKey, type StoredIndex } from './lmdb-indexes.js'

export interface LmdbStoreOptions {
  /** Directory of the environment (created when missing). */
  path: string
  clock?: Clock
  /** TTL sweep period; 0 = never (tests call sweep()). */
  sweepIntervalMs?: number
  /** Where one-off work at open (documents moved to JSON) is told. */
  logger?: Logger
  /** Virtual address space reserved for the map (the file grows as data does). */
  mapSize?: number
  /** Expired documents removed per transaction by one TTL slice (default 500). */
  ttlSlice?: number
  /** Slices per sweep and TTL index (default 8): a backlog drains over several sweeps. */
  ttlSlicesPerSweep?: number
}

/** The embedded database's directory under DATA_DIR: the service and the key CLI open the same one. */
export const embeddedStorePath = (dataDir: string) => join(dataDir, 'db')

export class LmdbStore implements Store {
  readonly kind = 'lmdb' as const
  readonly keepsCounts = true
  /** Index entries and documents read by queries since the store opened (what a plan costs). */
  readonly reads = { keys: 0, documents: 0 }
  /** How long this thread's write transactions held its loop, and how long each write waited (see write-holds.ts). */
  readonly holds = new WriteHolds()
  /** Every write of this thread, run by one callback per transaction (write-batch.ts). */
  readonly batches: WriteBatches
  readonly env: RootDatabase
  readonly meta: Database<unknown, string>
  /** The documents' msgpackr record structures, per collection (shared-structures.ts). */
  readonly structures: Database<unknown, string>
  private readonly collections = new Map<string, LmdbCollection<any>>()
  private readonly clock: Clock
  private readonly ttl: { slice: number; slices: number }
  private readonly sweeper?: NodeJS.Timeout
  private sweeping?: Promise<unknown>
  /** Background chores (an index of the other kind being emptied): close() waits for their current slice. */
  private readonly chores = new Set<Promise<unknown>>()
  /** Set when close() starts: background work stops at its next step. */
  closed = false
  /** Set once the environment is being closed: writes are refused from then on. */
  private writesEnded = false

  readonly sharedPath: string
  readonly logger?: Logger

  constructor(options: LmdbStoreOptions) {
    mkdirSync(options.path, { recursive: true })
    this.sharedPath = options.path
    this.logger = options.logger
    this.clock = options.clock ?? systemClock
    this.ttl = { slice: options.ttlSlice ?? 500, slices: options.ttlSlicesPerSweep ?? 8 }
    this.env = open({
      path: options.path,
      maxDbs: 512,
      mapSize: options.mapSize ?? 64 * 1024 ** 3,
      // Readers are released by lmdb-js itself; several processes (service, key CLI) share the file.
      maxReaders: 252,
    })
    this.batches = new WriteBatches(this.env, this.holds, () => this.writesEnded)
    this.meta = this.env.openDB<unknown, string>({ name: 'm:indexes' })
    this.structures = this.env.openDB<unknown, string>({ name: 'm:structures' })
    const interval = options.sweepIntervalMs ?? 1000
    if (interval > 0) {
      this.sweeper = setInterval(() => {
        if (!this.sweeping) void this.sweep()
      }, interval)
      this.sweeper.unref()
    }
  }

  collection<T extends Doc = Doc>(name: string, options: CollectionOptions = {}): Collection<T> {
    const collection = this.open<T>(name, options)
    if (collection.json !== !!options.json) throw new Error(`collection ${name} is opened both as JSON and as MessagePack`)
    return collection
  }

  private readonly logs = new Map<string, LmdbLog<any>>()

  orderedLog<V>(name: string): OrderedLog<V> {
    let log = this.logs.get(name)
    if (!log) this.logs.set(name, (log = new LmdbLog<V>(this.env, name, () => this.writesEnded)))
    return log
  }

  private open<T extends Doc>(name: string, options: CollectionOptions = {}): LmdbCollection<T> {
    let collection = this.collections.get(name)
    if (!collection) {
      collection = new LmdbCollection<T>(name, this, !!options.json)
      this.collections.set(name, collection)
    }
    return collection
  }

  async ensureIndexes(name: string, indexes: IndexSpec[]) {
    const collection = this.open(name)
    for (const spec of indexes) await collection.addIndex(spec)
  }

  /**
   * Another thread of this process committed a write (write-thread.ts): this thread's next read
   * opens a fresh read transaction and sees it. lmdb-js renews its read transaction once per
   * macrotask on its own, which a write answered within that macrotask would not wait for.
   */
  renewReads() {
    if (!this.closed) this.env.resetReadTxn()
  }

  /** The indexes declared for a collection, as stored (by any process sharing the environment). */
  declared(collection: string): StoredIndex[] {
    return (this.meta.get(collection) as StoredIndex[] | undefined) ?? []
  }

  /** The revision number of a collection's declarations (moved by every change of them). */
  revision(collection: string): number {
    return (this.meta.get(revisionKey(collection)) as number | undefined) ?? 0
  }

  /** Resolves once background chores (index builds, old entries emptied) are done (tests, tools). */
  async settled() {
    while (this.chores.size > 0) await Promise.all(this.chores)
  }

  /** The entries of the index that serves queries now (its generation changes with each online rebuild). */
  servingIndexDb(collection: string, index: string): Database<Buffer, KeyPart[]> {
    const spec = this.declared(collection).find(s => s.name === index)
    const serving = spec?.building ? spec.previous : spec
    return this.indexDb(collection, index, serving?.generation)
  }

  /** Resolves once no collection is still moving its documents to JSON (tests, tools). */
  async moved() {
    for (const collection of this.collections.values()) await collection.moving
  }

  /** One TTL pass over every collection with a TTL index; answers how many documents expired. */
  async sweep(): Promise<number> {
    // A pass under way read an earlier clock: this one waits for it and sweeps as of now.
    while (this.sweeping) await this.sweeping.catch(() => 0)
    if (this.closed) return 0
    const pass = (async () => {
      let removed = 0
      for (const collection of this.collections.values()) removed += await collection.sweepExpired(this.clock.now(), this.ttl.slice, this.ttl.slices)
      return removed
    })()
    this.sweeping = pass
    try {
      return await pass
    } finally {
      this.sweeping = undefined
    }
  }

  private readonly indexDbs = new Map<string, Database<Buffer, KeyPart[]>>()

  /** The entries of one index (binary values: they are empty). */
  indexDb(collection: string, index: string, generation?: number): Database<Buffer, KeyPart[]> {
    const name = `i:${collection}:${index}${generation ? `@${generation}` : ''}`
    let db = this.indexDbs.get(name)
    if (!db) {
      db = this.env.openDB<Buffer, KeyPart[]>({ name, encoding: 'binary' })
      this.indexDbs.set(name, db)
    }
    return db
  }

  private readonly countDbs = new Map<string, Database<number, KeyPart[]>>()

  /** The numbers of one counted index, by key. */
  countDb(collection: string, index: string): Database<number, KeyPart[]> {
    const name = `n:${collection}:${index}`
    let db = this.countDbs.get(name)
    if (!db) {
      db = this.env.openDB<number, KeyPart[]>({ name })
      this.countDbs.set(name, db)
    }
    return db
  }

  /** A counted index's numbers when that database exists (an entry index never creates one). */
  existingCountDb(collection: string, index: string): Database<number, KeyPart[]> | undefined {
    const name = `n:${collection}:${index}`
    if (this.countDbs.has(name)) return this.countDbs.get(name)
    return (this.env.openDB<number, KeyPart[]>({ name, create: false } as { name: string }) as Database<number, KeyPart[]> | undefined) ?? undefined
  }

  private readonly rawHandles = new Map<string, Database<unknown, Buffer>>()

  /**
   * Up to `limit` keys of `db` as stored, to remove them by (a Buffer key is taken as it is).
   * A key does not always read back as what it was written from (a string that held U+0000 to
   * U+0004, as an older key encoding wrote them), and removing what it reads back then misses it.
   */
  storedKeys(db: Database<any, any>, limit?: number): Buffer[] {
    const name = (db as unknown as { name: string }).name
    let raw = this.rawHandles.get(name)
    if (!raw) this.rawHandles.set(name, (raw = this.env.openDB<unknown, Buffer>({ name, encoding: 'binary', keyEncoding: 'binary' })))
    // Copied: lmdb-js may hand out views of a buffer it reuses.
    return [...raw.getKeys({ limit })].map(key => Buffer.from(key))
  }

  /** A named database of its own in the same environment (the durable work queues). */
  database<V>(name: string): Database<V, KeyPart | KeyPart[]> {
    return this.env.openDB<V, KeyPart | KeyPart[]>({ name })
  }

  /** Tracks a background chore so that close() waits for it (it stops at its next slice). */
  background(chore: Promise<unknown>) {
    this.chores.add(chore)
    void chore.finally(() => this.chores.delete(chore))
  }

  async close() {
    if (this.closed) return
    this.closed = true
    clearInterval(this.sweeper)
    await this.sweeping?.catch(() => undefined)
    await this.moved()
    await Promise.all(this.chores)
    // From here a write would reach lmdb-js after its environment closed, where it throws on a
    // timer no caller can catch: it is refused instead (StoreUnavailableError).
    this.writesEnded = true
    await this.env.close()
  }
}
