// OrderedLog in this process (MemoryStore): a sorted array of positions per stream. Values are
// copied in and out, as a database would, so a caller cannot change what was written.
import { assertLogPosition, assertLogStream, type LogRecord, type OrderedLog } from './types.js'

interface Stream {
  positions: number[]
  values: Map<number, string>
}

export class MemoryLog<V> implements OrderedLog<V> {
  private readonly streams = new Map<string, Stream>()

  constructor(readonly name: string) {}

  async write(records: LogRecord<V>[]) {
    // Checked and encoded first: a write that cannot be kept changes nothing.
    const encoded = records.map(r => {
      assertLogStream(r.stream)
      assertLogPosition(r.position)
      return { stream: r.stream, position: r.position, json: JSON.stringify(r.value) }
    })
    for (const { stream: id, position, json } of encoded) {
      let stream = this.streams.get(id)
      if (!stream) this.streams.set(id, (stream = { positions: [], values: new Map() }))
      if (!stream.values.has(position)) stream.positions.splice(insertionPoint(stream.positions, position), 0, position)
      stream.values.set(position, json)
    }
  }

  async read(stream: string, after: number, limit = Number.MAX_SAFE_INTEGER): Promise<LogRecord<V>[]> {
    const kept = this.streams.get(stream)
    if (!kept) return []
    const out: LogRecord<V>[] = []
    for (let i = insertionPoint(kept.positions, after + 1); i < kept.positions.length && out.length < limit; i++) {
      const position = kept.positions[i]!
      out.push({ stream, position, value: JSON.parse(kept.values.get(position)!) as V })
    }
    return out
  }

  async get(stream: string, position: number): Promise<V | undefined> {
    const json = this.streams.get(stream)?.values.get(position)
    return json === undefined ? undefined : (JSON.parse(json) as V)
  }

  async drop(stream: string) {
    this.streams.delete(stream)
  }
}

/** The index of the first position >= `position` in a sorted array. */
function insertionPoint(positions: number[], position: number): number {
  let low = 0
  let high = positions.length
  while (low < high) {
    const mid = (low + high) >>> 1
    if (positions[mid]! < position) low = mid + 1
    else high = mid
  }
  return low
}
