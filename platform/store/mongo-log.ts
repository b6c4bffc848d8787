// OrderedLog on MongoDB: one document per record, `_id` "<stream>:<position>", with an index on
// (stream, position). The value is kept as JSON text: values may carry client-chosen keys
// ("$x", "a.b") that are not valid field names everywhere. A write is one unordered bulk write
// of replacing upserts (one round trip).
import type { Collection as DriverCollection } from 'mongodb'
import { assertLogPosition, assertLogStream, type LogRecord, type OrderedLog } from './types.js'

interface LogDocument {
  _id: string
  stream: string
  position: number
  value: string
}

export class MongoLog<V> implements OrderedLog<V> {
  private indexed: Promise<unknown> | null = null

  constructor(
    private readonly collection: DriverCollection<LogDocument>,
    /** Runs a driver call, translating its errors as every other store call does. */
    private readonly run: <R>(work: () => Promise<R>) => Promise<R>,
  ) {}

  get name() {
    return this.collection.collectionName
  }

  private ensureIndex() {
    this.indexed ??= this.run(() => this.collection.createIndex({ stream: 1, position: 1 }, { name: 'stream_position' })).catch(error => {
      this.indexed = null // tried again by the next call
      throw error
    })
    return this.indexed
  }

  async write(records: LogRecord<V>[]) {
    if (records.length === 0) return
    const ops = records.map(r => {
      assertLogStream(r.stream)
      assertLogPosition(r.position)
      const replacement: LogDocument = { _id: `${r.stream}:${r.position}`, stream: r.stream, position: r.position, value: JSON.stringify(r.value) }
      return { replaceOne: { filter: { _id: replacement._id }, replacement, upsert: true } }
    })
    await this.ensureIndex()
    await this.run(() => this.collection.bulkWrite(ops, { ordered: false }))
  }

  async read(stream: string, after: number, limit?: number): Promise<LogRecord<V>[]> {
    await this.ensureIndex()
    const docs = await this.run(() => {
      const cursor = this.collection.find({ stream, position: { $gt: after } }).sort({ position: 1 })
      return (limit === undefined ? cursor : cursor.limit(limit)).toArray()
    })
    return docs.map(d => ({ stream, position: d.position, value: JSON.parse(d.value) as V }))
  }

  async get(stream: string, position: number): Promise<V | undefined> {
    const doc = await this.run(() => this.collection.findOne({ _id: `${stream}:${position}` }))
    return doc ? (JSON.parse(doc.value) as V) : undefined
  }

  async drop(stream: string) {
    await this.run(() => this.collection.deleteMany({ stream }))
  }
}
