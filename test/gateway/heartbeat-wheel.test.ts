// Heartbeats from one timer: every stream beats once per interval, and no tick writes to more
// than its share of the streams (a heartbeat fan-out never holds the loop for every stream).
import t from 'tap'
import { eventBody, HeartbeatWheel, SseStream } from '../../gateway/sse.js'
import type { StreamSink } from '../../platform/http.js'

class RecordingSink implements StreamSink {
  writes: { at: number; chunk: string }[] = []
  closed = false
  private listeners: (() => void)[] = []
  write(chunk: string) {
    this.writes.push({ at: performance.now(), chunk })
    return true
  }
  end() {
    this.closed = true
    for (const l of this.listeners.splice(0)) l()
  }
  onClose(listener: () => void) {
    this.listeners.push(listener)
  }
}

t.test('each stream beats once per interval; a tick beats one slot of the streams', async t => {
  const interval = 320
  const wheel = new HeartbeatWheel(interval, eventBody('hearthbeat', { minutes: interval / 60_000 }))
  t.teardown(() => wheel.stop())
  const sinks = Array.from({ length: 160 }, () => new RecordingSink())
  let id = 7
  for (const sink of sinks) new SseStream(sink, { heartbeats: wheel, currentId: () => id, onDropped: () => {} })
  await new Promise(r => setTimeout(r, interval * 3 + 50))
  for (const sink of sinks) {
    t.ok(sink.writes.length >= 2 && sink.writes.length <= 4, `beats in 3 intervals: ${sink.writes.length}`)
  }
  t.match(sinks[0]!.writes[0]!.chunk, /^id: 7\nevent: hearthbeat\ndata: \{"minutes":/)
  // Writes of one flush (one macrotask) go to at most one slot of the streams.
  const byFlush = new Map<number, number>()
  for (const sink of sinks) for (const w of sink.writes) byFlush.set(Math.round(w.at), (byFlush.get(Math.round(w.at)) ?? 0) + 1)
  t.ok(Math.max(...byFlush.values()) <= 2 * (160 / HeartbeatWheel.SLOTS), `at most ~${160 / HeartbeatWheel.SLOTS} streams per tick`)
  // A closed stream no longer beats.
  sinks[0]!.end()
  const before = sinks[0]!.writes.length
  id = 8
  await new Promise(r => setTimeout(r, interval + 50))
  t.equal(sinks[0]!.writes.length, before)
  t.match(sinks[1]!.writes.at(-1)!.chunk, /^id: 8\n/, 'the id is the last event the stream carried')
})
