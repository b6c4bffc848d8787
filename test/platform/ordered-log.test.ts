// The ordered log contract (OrderedLog, platform/store/types.ts): every store keeps records in
// (stream, position) order, reads them back by position, replaces a position written again,
// keeps one write together, and drops a stream whole. The session history's hot path rests on it.
import t from 'tap'
import fc from 'fast-check'
import { ContractStores, STORE_KINDS } from '../support/contract-stores.js'

const stores = new ContractStores(t)

for (const kind of STORE_KINDS) {
  t.test(`${kind} store`, async t => {
    const store = await stores.open(kind)
    t.teardown(() => store.close())
    let serial = 0
    const fresh = <V>() => store.orderedLog<V>(`log_${++serial}`)

    t.test('records come back in position order, after a position, at most a limit', async t => {
      const log = fresh<{ text: string }>()
      // Written out of order, in two writes.
      await log.write([3, 1, 10].map(position => ({ stream: 's1', position, value: { text: `m${position}` } })))
      await log.write([2, 11].map(position => ({ stream: 's1', position, value: { text: `m${position}` } })))
      await log.write([{ stream: 's2', position: 1, value: { text: 'other' } }])
      t.same((await log.read('s1', 0)).map(r => r.position), [1, 2, 3, 10, 11], 'every record of the stream, in order')
      t.same((await log.read('s1', 2)).map(r => r.value.text), ['m3', 'm10', 'm11'], 'after position 2')
      t.same((await log.read('s1', 2, 2)).map(r => r.position), [3, 10], 'at most two')
      t.same(await log.read('s1', 11), [], 'nothing after the last')
      t.same(await log.read('none', 0), [], 'an unknown stream is empty')
      t.same(await log.read('s2', 0), [{ stream: 's2', position: 1, value: { text: 'other' } }], 'streams are apart')
    })

    t.test('position 0 is a record like any other (read after -1)', async t => {
      const log = fresh<number>()
      await log.write([{ stream: 's', position: 0, value: 7 }, { stream: 's', position: 1, value: 8 }])
      t.same((await log.read('s', -1)).map(r => r.value), [7, 8])
      t.same((await log.read('s', 0)).map(r => r.value), [8])
      t.equal(await log.get('s', 0), 7)
      t.equal(await log.get('s', 5), undefined)
    })

    t.test('a position written again holds the newer value', async t => {
      const log = fresh<{ v: number }>()
      await log.write([{ stream: 's', position: 0, value: { v: 1 } }])
      await log.write([{ stream: 's', position: 0, value: { v: 2 } }, { stream: 's', position: 1, value: { v: 3 } }])
      t.same(await log.read('s', -1), [
        { stream: 's', position: 0, value: { v: 2 } },
        { stream: 's', position: 1, value: { v: 3 } },
      ])
    })

    t.test('values round-trip: nesting, client keys, unicode, numbers', async t => {
      const log = fresh<Record<string, unknown>>()
      const value = { $where: 'x', 'a.b': { c: [1, 'two', null, true, { d: -0.5 }] }, text: 'olá \u0000 👋', big: 2 ** 53 - 1, empty: {}, list: [] }
      await log.write([{ stream: 's', position: 1, value }])
      t.same(await log.get('s', 1), value)
      // What came back is a copy: changing it changes nothing stored.
      const [back] = await log.read('s', 0)
      ;(back!.value as any).text = 'changed'
      t.same(await log.get('s', 1), value)
    })

    t.test('drop removes the stream, and only it', async t => {
      const log = fresh<number>()
      await log.write([0, 1, 2].map(position => ({ stream: 'gone', position, value: position })))
      await log.write([{ stream: 'kept', position: 1, value: 1 }])
      await log.drop('gone')
      t.same(await log.read('gone', -1), [])
      t.same((await log.read('kept', 0)).length, 1)
      await log.drop('never-written') // nothing to drop is not an error
    })

    t.test('a stream or position no store can keep is refused, and nothing of that write is kept', async t => {
      const log = fresh<number>()
      for (const [stream, position] of [
        ['', 1],
        ['a\u0000b', 1],
        ['s', -1],
        ['s', 1.5],
        ['s', Number.NaN],
      ] as const) {
        await t.rejects(log.write([{ stream: 's', position: 2, value: 2 }, { stream, position, value: 1 }]), TypeError, `${JSON.stringify(stream)} at ${position}`)
      }
      t.same(await log.read('s', -1), [], 'the valid record of each refused write was not kept')
    })

    t.test('a value that cannot be encoded fails its write, and nothing of that write is kept', async t => {
      const log = fresh<unknown>()
      let deep: unknown = 'bottom'
      for (let i = 0; i < 200_000; i++) deep = { v: deep }
      await t.rejects(log.write([{ stream: 's', position: 1, value: 'fine' }, { stream: 's', position: 2, value: deep }]))
      t.same(await log.read('s', -1), [], 'the encodable record of that write was not kept either')
      await log.write([{ stream: 's', position: 3, value: 'later' }])
      t.same((await log.read('s', -1)).map(r => r.value), ['later'], 'the log goes on')
    })

    t.test('reads agree with a model over random writes (positions, streams, rewrites)', async t => {
      const write = fc.array(fc.record({ stream: fc.constantFrom('a', 'b', 'c-long-' + 'x'.repeat(60)), position: fc.nat(40), value: fc.integer() }), { minLength: 1, maxLength: 12 })
      await fc.assert(
        fc.asyncProperty(fc.array(write, { minLength: 1, maxLength: 6 }), fc.nat(41), async (writes, after) => {
          const log = fresh<number>()
          const model = new Map<string, Map<number, number>>()
          for (const records of writes) {
            await log.write(records)
            for (const r of records) {
              if (!model.has(r.stream)) model.set(r.stream, new Map())
              model.get(r.stream)!.set(r.position, r.value)
            }
          }
          for (const [stream, kept] of model) {
            const expected = [...kept.entries()].filter(([p]) => p > after).sort((x, y) => x[0] - y[0]).map(([position, value]) => ({ stream, position, value }))
            const actual = await log.read(stream, after)
            if (JSON.stringify(actual) !== JSON.stringify(expected)) throw new Error(`${stream} after ${after}: ${JSON.stringify(actual)} != ${JSON.stringify(expected)}`)
          }
        }),
        { numRuns: kind === 'mongo' ? 15 : 60 },
      )
    })
  })
}
