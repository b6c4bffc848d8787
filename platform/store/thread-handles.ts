// A worker thread's own handles on the embedded databases it is asked to work on (the store's
// write thread, the dialer's chunk thread): one LmdbStore per database path, opened on first use
// and closed when the service that owns the database lets it go.
import { LmdbStore } from './lmdb-store.js'

export class ThreadStoreHandles {
  private readonly stores = new Map<string, LmdbStore>()

  /** The thread's handle on the database at `path`. TTL sweeps stay with the service's own handle. */
  open(path: string): LmdbStore {
    let store = this.stores.get(path)
    if (!store) {
      store = new LmdbStore({ path, sweepIntervalMs: 0 })
      this.stores.set(path, store)
    }
    return store
  }

  /** Closes the thread's handle on `path` (before the service closes its own). */
  async release(path: string) {
    const store = this.stores.get(path)
    this.stores.delete(path)
    await store?.close()
  }
}
