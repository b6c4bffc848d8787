// The stores a contract suite holds to the same answers: MemoryStore, LmdbStore (in a temporary
// directory), LmdbStore seen through OffLoopStore (writes in the store's write thread), and
// MongoStore against the MongoDB wire-protocol test server (a fresh database per store).
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Test } from 'tap'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import { MemoryStore } from '../../platform/store/memory-store.js'
import { MongoStore } from '../../platform/store/mongo-store.js'
import type { Store } from '../../platform/store/types.js'
import { OffLoopStore } from '../../platform/store/write-thread.js'
import { startMongoTestServer, type MongoTestServer } from './mongo-server.js'

export type StoreKind = 'memory' | 'lmdb' | 'lmdb-thread' | 'mongo'
export const STORE_KINDS: readonly StoreKind[] = ['memory', 'lmdb', 'lmdb-thread', 'mongo']

/** Opens stores of every kind for one test file; the Mongo test server is started once, on first use. */
export class ContractStores {
  private server: Promise<MongoTestServer> | undefined

  constructor(private readonly t: Test) {
    t.teardown(async () => (await this.server)?.stop())
  }

  async open(kind: StoreKind): Promise<Store> {
    if (kind === 'memory') return new MemoryStore()
    if (kind === 'lmdb' || kind === 'lmdb-thread') {
      const dir = mkdtempSync(join(tmpdir(), 'sb-contract-'))
      this.t.teardown(() => rmSync(dir, { recursive: true, force: true }))
      const store = new LmdbStore({ path: dir })
      if (kind === 'lmdb') return store
      const offLoop = new OffLoopStore(store)
      // Closing it releases the thread's handle; the store is closed after.
      const release = offLoop.close.bind(offLoop)
      return Object.assign(offLoop, { close: () => release().then(() => store.close()) })
    }
    this.server ??= startMongoTestServer()
    const url = new URL((await this.server).url)
    url.pathname = `/contract_${randomUUID().replace(/-/g, '')}`
    return MongoStore.connect(url.toString())
  }
}
