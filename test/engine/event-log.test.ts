// The in-process event log: a ring per session bounded by count, bytes and age; what it keeps of
// an event is its serialised SSE lines (the same bytes every stream was sent).
import t from 'tap'
import fc from 'fast-check'
import { bodyOf, MemoryEventLog, type StreamEvent } from '../../engine/streams/event-log.js'
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

t.test('property: after any appends, reads, waits and settles, a read gives exactly the newest events the bounds allow now, after the reader\'s position', async t => {
  // The ring trims when touched, with the time of that touch. Count and bytes only grow with more
  // events and age only with time, so what it keeps is always the longest run of newest events
  // within all three bounds at the time of the read (the newest event always).
  const step = fc.oneof(
    fc.record({ append: fc.integer({ min: 0, max: 400 }) }),
    fc.record({ wait: fc.integer({ min: 0, max: 40_000 }) }),
    fc.record({ read: fc.integer({ min: 0, max: 60 }) }),
    // The session hibernates: the ring is shrunk to its live entries and goes on from there.
    fc.record({ settle: fc.constant(true) }),
  )
  // Awaited: an async property's runs happen after fc.assert returns, and its failure is the
  // promise's rejection, which must fail this test rather than arrive after it passed.
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 200, max: 3000 }), fc.integer({ min: 1000, max: 60_000 }), fc.array(step, { maxLength: 60 }), async (events, bytes, maxAgeMs, steps) => {
      let now = 5_000_000
      const log = new MemoryEventLog({ events, bytes, maxAgeMs }, () => now)
      const appended: { seq: number; at: number; size: number }[] = []
      const check = async (after: number) => {
        const got = (await log.read('s', after)).map(e => e.seq)
        // The model: from the newest back, while count, bytes and age allow.
        const kept: number[] = []
        let used = 0
        for (let i = appended.length - 1; i >= 0; i--) {
          const e = appended[i]!
          const first = kept.length === 0
          if (!first && (kept.length + 1 > events || used + e.size > bytes || e.at < now - maxAgeMs)) break
          kept.unshift(e.seq)
          used += e.size
        }
        const want = kept.filter(seq => seq > after)
        if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`read after ${after}: ${JSON.stringify(got)} != ${JSON.stringify(want)} (${JSON.stringify({ events, bytes, maxAgeMs, steps })})`)
      }
      for (const s of steps) {
        if ('append' in s) {
          const e = event(appended.length + 1, 'y'.repeat(s.append))
          log.append('s', e)
          appended.push({ seq: appended.length + 1, at: now, size: bodyOf(e as any).length + 64 })
        } else if ('wait' in s) now += s.wait
        else if ('settle' in s) log.settle('s')
        else await check(s.read)
      }
      await check(0)
    }),
    { numRuns: 500 },
  )
  t.pass('every read matched the model')
})
