// The in-process event log: a ring per session bounded by count, bytes and age; what it keeps of
// an event is its serialised SSE lines (the same bytes every stream was sent).
import t from 'tap'
import { bodyOf, MemoryEventLog, type StreamEvent } from '../../engine/event-log.js'
import { eventBody } from '../../gateway/sse.js'

const event = (seq: number, text = 'x'): StreamEvent => ({ kind: 'event', seq, epoch: 0, name: 'assistant.message', data: { sessionId: 's', text } })

t.test('bounded by count, keeping the newest', async t => {
  const log = new MemoryEventLog({ events: 5, bytes: 1 << 30, maxAgeMs: 1 << 30 })
  for (let seq = 1; seq <= 300; seq++) log.append('s', event(seq))
  t.same((await log.read('s', 0)).map(e => e.seq), [296, 297, 298, 299, 300])
  t.same((await log.read('s', 298)).map(e => e.seq), [299, 300])
  t.equal(await log.takeOver('s', 0), 300)
})

t.test('bounded by bytes: whatever the count allows, the ring holds at most its bytes (the newest event always)', async t => {
  const log = new MemoryEventLog({ events: 1000, bytes: 4096, maxAgeMs: 1 << 30 })
  for (let seq = 1; seq <= 100; seq++) log.append('s', event(seq, 'z'.repeat(1000)))
  const kept = await log.read('s', 0)
  t.ok(kept.length >= 2 && kept.length <= 4, `${kept.length} events of ~1 KB kept`)
  t.equal(kept.at(-1)!.seq, 100)
  t.ok(log.bytesOf('s') <= 4096)
  log.append('s', event(101, 'w'.repeat(10_000)))
  t.same((await log.read('s', 0)).map(e => e.seq), [101], 'an event larger than the bound is still kept alone')
})

t.test('bounded by age', async t => {
  let now = 1_000_000
  const log = new MemoryEventLog({ events: 1000, bytes: 1 << 30, maxAgeMs: 60_000 }, () => now)
  for (let seq = 1; seq <= 10; seq++) log.append('s', event(seq))
  now += 30_000
  for (let seq = 11; seq <= 20; seq++) log.append('s', event(seq))
  now += 40_000 // the first ten are 70 s old
  t.same((await log.read('s', 0)).map(e => e.seq), [11, 12, 13, 14, 15, 16, 17, 18, 19, 20])
})

t.test('an event is serialised once: the ring keeps the bytes the streams were sent', async t => {
  const log = new MemoryEventLog(10)
  const e = event(1, 'hello')
  const body = bodyOf(e)
  t.equal(body, eventBody('assistant.message', { sessionId: 's', text: 'hello' }))
  log.append('s', e)
  const [kept] = await log.read('s', 0)
  t.equal(kept!.kind === 'event' && kept!.body, body)
  t.equal(bodyOf(kept as any), body, 'read back, it is not serialised again')
  log.forget('s')
  t.same(await log.read('s', 0), [])
})
