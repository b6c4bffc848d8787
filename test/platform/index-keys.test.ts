// The embedded store's index keys (platform/store/index-keys.ts) against their definition: a
// document puts in an index one key per combination of the values pathValues() gives for each
// field (mongod's multikey rule), each value encoded as [rank, payload], without duplicates.
// documentKeys() takes shortcuts for plain values; these must give exactly the same keys.
import t from 'tap'
import fc from 'fast-check'
import { documentKeys, encodeValue, partId, pathValues, type KeyPart } from '../../platform/store/index-keys.js'

/** The definition, written out: the product of each field's encoded values, deduplicated per field. */
function keysByDefinition(doc: Record<string, unknown>, fields: string[]): { keys: KeyPart[][]; multi: boolean } {
  let keys: KeyPart[][] = [[]]
  let multi = false
  for (const field of fields) {
    const found = pathValues(doc, field)
    multi ||= found.multi
    const encoded = [...new Map(found.values.map(v => encodeValue(v)).map(e => [partId(e), e])).values()]
    keys = keys.flatMap(prefix => encoded.map(e => [...prefix, ...e]))
  }
  return { keys, multi }
}

const leaf = fc.oneof(fc.constant(null), fc.constant(undefined), fc.constantFrom(0, -0, 1, NaN, -2.5), fc.constantFrom('', 'x', 'y'.repeat(120)), fc.constantFrom(new Date(0), new Date(Number.NaN)), fc.boolean())
const tree = fc.letrec(tie => ({
  value: fc.oneof({ depthSize: 'small' }, leaf, fc.array(tie('value'), { maxLength: 3 }), fc.dictionary(fc.constantFrom('x', 'y', 'z'), tie('value'), { maxKeys: 3 })),
})).value
const fieldSets = fc.array(fc.constantFrom('a', 'b', 'a.x', 'a.y', 'a.x.y', 'b.z', 'c'), { minLength: 1, maxLength: 3 }).map(fields => [...new Set(fields)])

t.test('documentKeys gives exactly the keys of the definition, for any document and fields', async t => {
  fc.assert(
    fc.property(fc.dictionary(fc.constantFrom('a', 'b', 'c'), tree, { maxKeys: 3 }), fieldSets, (doc, fields) => {
      const got = documentKeys(doc, fields)
      const want = keysByDefinition(doc, fields)
      const ids = (keys: KeyPart[][]) => keys.map(partId).sort()
      if (JSON.stringify(ids(got.keys)) !== JSON.stringify(ids(want.keys))) throw new Error(`keys ${JSON.stringify(got.keys)} != ${JSON.stringify(want.keys)} for ${JSON.stringify({ doc, fields })}`)
      if (got.multi !== want.multi) throw new Error(`multi ${got.multi} != ${want.multi} for ${JSON.stringify({ doc, fields })}`)
      // -0 is 0 in a key (lmdb-js cannot encode -0), whatever path it came by.
      for (const key of got.keys) for (const part of key) if (Object.is(part, -0)) throw new Error(`-0 in a key of ${JSON.stringify({ doc, fields })}`)
    }),
    { numRuns: 2000 },
  )
  t.pass('2,000 documents: the same keys and the same multikey mark')
})
