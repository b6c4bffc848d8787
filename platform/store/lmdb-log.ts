// OrderedLog on the embedded store: one LMDB database (`l:<name>`) keyed by [stream, position]
// (lmdb-js's ordered-binary keys sort arrays element by element), values as MessagePack maps.
// A write is a batch of plain puts that lmdb-js commits on its own write thread, in one
// transaction. Values are encoded here, all of them before the first put: a put that throws
// inside an lmdb-js batch does not undo the puts before it, so a value that cannot be encoded
// must fail its write before anything of it is queued.
import type { Database, RootDatabase } from 'lmdb'
import { Packr } from 'msgpackr'
import { assertLogPosition, assertLogStream, StoreUnavailableError, type LogRecord, type OrderedLog } from './types.js'

type Key = [string, number]

/** Past every position of a stream (positions are safe integers). */
const END = Infinity

/** Self-describing maps (no record structures to share between threads and processes). */
const packr = new Packr({ useRecords: false })

export class LmdbLog<V> implements OrderedLog<V> {
  private readonly db: Database<Buffer, Key>

  constructor(
    env: RootDatabase,
    readonly name: string,
    /** True once the store's environment is closing: a write then is refused, not queued. */
    private readonly ended: () => boolean = () => false,
  ) {
    this.db = env.openDB<Buffer, Key>({ name: `l:${name}`, encoding: 'binary' })
  }

  private assertOpen() {
    if (this.ended()) throw new StoreUnavailableError('the embedded store is closed')
  }

  async write(records: LogRecord<V>[]) {
    if (records.length === 0) return
    this.assertOpen()
    const encoded = records.map(r => {
      assertLogStream(r.stream)
      assertLogPosition(r.position)
      return packr.pack(r.value)
    })
    // One batch: its puts go in one transaction.
    await this.db.batch(() => {
      for (let i = 0; i < records.length; i++) void this.db.put([records[i]!.stream, records[i]!.position], encoded[i]!)
    })
  }

  async read(stream: string, after: number, limit?: number): Promise<LogRecord<V>[]> {
    const out: LogRecord<V>[] = []
    const range = this.db.getRange({ start: [stream, Math.max(0, Math.floor(after) + 1)], end: [stream, END], ...(limit === undefined ? {} : { limit }) })
    for (const { key, value } of range) out.push({ stream, position: key[1], value: packr.unpack(value) as V })
    return out
  }

  async get(stream: string, position: number): Promise<V | undefined> {
    const value = this.db.get([stream, position])
    return value === undefined ? undefined : (packr.unpack(value) as V)
  }

  async drop(stream: string) {
    this.assertOpen()
    const keys = [...this.db.getKeys({ start: [stream, 0], end: [stream, END] })]
    if (keys.length === 0) return
    await this.db.batch(() => {
      for (const key of keys) void this.db.remove(key)
    })
  }
}
