// The embedded store's index keys (platform/store/index-keys.ts) against their definition: a
// document puts in an index one key per combination of the values pathValues() gives for each
// field (mongod's multikey rule), each value encoded as [rank, payload], without duplicates.
// documentKeys() takes shortcuts for plain values; these must give exactly the same keys.
import t from 'tap'
import fc from 'fast-check'
import { open } from 'lmdb'
import { documentKeys, encodeValue, entryId, entryKey, mayBeCut, partId, pathValues, sameKey, unescapeString, type KeyPart } from '../../platform/store/index-keys.js'
import { tempDir } from '../support/temp-dir.js'

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

// Strings for key tests: long runs that share prefixes around the lengths where lmdb-js changes
// how it writes a string (64) and where keys cut them (MAX_KEY_STRING), then a few characters
// lmdb-js treats apart (U+0000 to U+0005, the escape byte 27, U+FFFD, astral ones) or any.
const tailUnit = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('\0', '\u0001', '\u0004', '\u0005', '\u0006', '\u000b', '\u001b', '\u001c', 'a', 'p', '\u00e9', '\u4e00', '\ufffd', '\u{1f600}', '\u{10ffff}') },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
)
const keyStrings = fc.tuple(fc.constantFrom(0, 1, 62, 63, 64, 98, 99, 100, 101, 150), fc.array(tailUnit, { maxLength: 6 })).map(([n, tail]) => 'p'.repeat(n) + tail.join(''))
const byCodePoint = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b))

t.test('the key of any string reads back as written, and keys sort as their strings do by code point', async t => {
  const env = open({ path: tempDir(t), maxDbs: 4 })
  t.teardown(() => env.close())
  const db = env.openDB<Buffer, KeyPart[]>({ name: 'keys', encoding: 'binary' })
  await fc.assert(
    fc.asyncProperty(fc.uniqueArray(keyStrings, { maxLength: 12 }), async strings => {
      const written = strings.map((s, i) => entryKey(encodeValue(s), `${s.slice(-3)}#${i}`))
      await env.transaction(() => {
        db.clearSync()
        for (const key of written) db.putSync(key, Buffer.alloc(0))
      })
      const read = [...db.getKeys({})]
      if (read.length !== strings.length) throw new Error(`${read.length} keys for ${strings.length} strings`)
      const byKey = new Map(written.map((key, i) => [entryId(key), strings[i]!]))
      for (const key of read) {
        const s = byKey.get(entryId(key))
        if (s === undefined || !written.some(w => sameKey(w, key))) throw new Error(`${JSON.stringify(key)} was not written`)
        if (!mayBeCut([key[0] as number, key[1]!]) && unescapeString(key[1] as string) !== s) throw new Error(`${JSON.stringify(key)} reads back as another string than ${JSON.stringify(s)}`)
      }
      // In key order the strings never go down (cut ones may tie, then come in _id order).
      for (let i = 1; i < read.length; i++) {
        const [a, b] = [byKey.get(entryId(read[i - 1]!))!, byKey.get(entryId(read[i]!))!]
        if (byCodePoint(a, b) > 0 && read[i - 1]![1] !== read[i]![1]) throw new Error(`${JSON.stringify(a)} sorts after ${JSON.stringify(b)}`)
      }
    }),
    { numRuns: 500 },
  )
  t.pass('500 sets of strings: every key read back, in code-point order')
})
