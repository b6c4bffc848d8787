// The embedded store and its oracle side by side, for the tests that compare them operation by
// operation: an LMDB store in a fresh directory and the in-memory store (a Map and mingo, no
// ordered index), with the same indexes declared (the in-memory store keeps no counted index:
// it counts documents), both closed and the directory removed when the test ends.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import { MemoryStore } from '../../platform/store/memory-store.js'
import type { IndexSpec } from '../../platform/store/types.js'

export async function storePair(t: Tap.Test, collection: string, indexes: IndexSpec[]): Promise<{ lmdb: LmdbStore; memory: MemoryStore }> {
  const dir = mkdtempSync(join(tmpdir(), 'sb-pair-'))
  const lmdb = new LmdbStore({ path: dir, sweepIntervalMs: 0 })
  const memory = new MemoryStore(undefined, 0)
  t.teardown(async () => {
    await lmdb.close()
    await memory.close()
    rmSync(dir, { recursive: true, force: true })
  })
  await lmdb.ensureIndexes(collection, indexes)
  await memory.ensureIndexes(collection, indexes.filter(i => !i.counted))
  return { lmdb, memory }
}
