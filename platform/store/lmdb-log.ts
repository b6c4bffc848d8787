// OrderedLog on the embedded store: one LMDB database (`l:<name>`) keyed by [stream, position]
// (lmdb-js's ordered-binary keys sort arrays element by element), values in lmdb-js's own
// MessagePack encoding. A write is a batch of plain puts: lmdb-js encodes them on this thread
// and commits them on its own write thread, all in one transaction.
import type { Database, RootDatabase } from 'lmdb'
import { assertLogPosition, assertLogStream, type LogRecord, type OrderedLog } from './types.js'

type Key = [string, number]

/** Past every position of a stream (positions are safe integers). */
const END = Infinity

export class LmdbLog<V> implements OrderedLog<V> {
  private readonly db: Database<V, Key>

  constructor(env: RootDatabase, readonly name: string) {
    this.db = env.openDB<V, Key>({ name: `l:${name}` })
  }

  async write(records: LogRecord<V>[]) {
    if (records.length === 0) return
    for (const r of records) {
      assertLogStream(r.stream)
      assertLogPosition(r.position)
    }
    // One conditional-free batch: its puts are committed together or not at all.
    await this.db.batch(() => {
      for (const r of records) void this.db.put([r.stream, r.position], r.value)
    })
  }

  async read(stream: string, after: number, limit?: number): Promise<LogRecord<V>[]> {
    const out: LogRecord<V>[] = []
    const range = this.db.getRange({ start: [stream, Math.max(0, Math.floor(after) + 1)], end: [stream, END], ...(limit === undefined ? {} : { limit }) })
    for (const { key, value } of range) out.push({ stream, position: key[1], value })
    return out
  }

  async get(stream: string, position: number): Promise<V | undefined> {
    return this.db.get([stream, position])
  }

  async drop(stream: string) {
    const keys = [...this.db.getKeys({ start: [stream, 0], end: [stream, END] })]
    if (keys.length === 0) return
    await this.db.batch(() => {
      for (const key of keys) void this.db.remove(key)
    })
  }
}
