// The stores apply $set, $unset, $inc, $min and $max on plain paths themselves (query.ts,
// applySimpleUpdate: mingo rebuilds its operator context on every call) and leave every other
// update to mingo. The shortcut must change a document exactly as mingo would, and say whether
// it changed it as mingo does; the document as read must stay as it was (it is the "before").
import t from 'tap'
import fc from 'fast-check'
import { update as mingoUpdate } from 'mingo'
import { clone, updatedCopy } from '../../platform/store/query.js'

// Documents as the stores hold them: plain objects (fast-check's dictionaries have no prototype).
const plain = (o: Record<string, unknown>) => Object.assign({}, o)
const leaf = fc.oneof(fc.constant(null), fc.integer({ min: -3, max: 3 }), fc.constantFrom(0.5, -0), fc.constantFrom('', 'x'), fc.constantFrom(new Date(0), new Date(5)), fc.boolean())
const value = fc.letrec(tie => ({
  v: fc.oneof({ depthSize: 'small' }, leaf, fc.array(tie('v'), { maxLength: 2 }), fc.dictionary(fc.constantFrom('a', 'b', 'c'), tie('v'), { maxKeys: 2 }).map(plain)),
})).v
const path = fc.constantFrom('a', 'b', 'a.b', 'a.c', 'b.a', 'a.b.c', 'c', '100', 'a.100')
const update = fc.oneof(
  fc.record({ $set: fc.dictionary(path, value, { minKeys: 1, maxKeys: 2 }) }),
  fc.record({ $unset: fc.dictionary(path, fc.constant(''), { minKeys: 1, maxKeys: 2 }) }),
  fc.record({ $inc: fc.dictionary(path, fc.integer({ min: -2, max: 2 }), { minKeys: 1, maxKeys: 2 }) }),
  fc.record({ $min: fc.dictionary(path, fc.integer({ min: -2, max: 2 }), { minKeys: 1, maxKeys: 1 }) }),
  fc.record({ $max: fc.dictionary(path, fc.integer({ min: -2, max: 2 }), { minKeys: 1, maxKeys: 1 }) }),
  fc.record({ $set: fc.dictionary(path, value, { minKeys: 1, maxKeys: 1 }), $inc: fc.dictionary(path, fc.integer({ min: -2, max: 2 }), { minKeys: 1, maxKeys: 1 }) }),
)
// Two operators on one path (or a path and its parent) is a conflict mongod refuses: not generated.
const conflictFree = (u: Record<string, Record<string, unknown>>) => {
  const paths = Object.values(u).flatMap(fields => Object.keys(fields))
  return paths.every((p, i) => paths.every((q, j) => i === j || (p !== q && !p.startsWith(`${q}.`) && !q.startsWith(`${p}.`))))
}

/**
 * Updates mongod accepts on this document: each path goes through embedded documents or missing
 * fields only, and $inc meets a number or nothing. Where mongod refuses (a field created inside a
 * value, $inc of null or text), mingo and the stores quietly do something else (see below).
 */
function mongodAccepts(doc: Record<string, unknown>, u: Record<string, Record<string, unknown>>): boolean {
  for (const [op, fields] of Object.entries(u)) {
    for (const path of Object.keys(fields)) {
      let node: unknown = doc
      const parts = path.split('.')
      for (const [i, part] of parts.entries()) {
        if (node === undefined) break
        if (node === null || typeof node !== 'object' || Array.isArray(node) || node instanceof Date) return false
        node = (node as Record<string, unknown>)[part]
        if (i === parts.length - 1 && op === '$inc' && node !== undefined && typeof node !== 'number') return false
      }
    }
  }
  return true
}

t.test('the stores\' own update path changes a document exactly as mingo does', async t => {
  let compared = 0
  fc.assert(
    fc.property(fc.dictionary(fc.constantFrom('a', 'b', 'c'), value, { maxKeys: 3 }).map(plain), update.filter(conflictFree), (fields, u) => {
      const doc = { _id: 'd', ...fields }
      if (!mongodAccepts(doc, u as any)) return
      const asRead = clone(doc)
      let want: Record<string, unknown> | undefined
      let wantChanged = false
      try {
        want = clone(doc)
        wantChanged = mingoUpdate(want, u as any).length > 0
      } catch {
        want = undefined // mingo refuses it (a path through a value): the store must refuse it too
      }
      let got: [Record<string, unknown>, boolean] | undefined
      try {
        got = updatedCopy(doc, u as any)
      } catch {
        got = undefined
      }
      const show = JSON.stringify({ doc: fields, update: u })
      if (!want || !got) {
        if (want || got) throw new Error(`only one refused ${show}: mingo ${JSON.stringify(want)}, store ${JSON.stringify(got?.[0])}`)
        return
      }
      compared++
      if (!sameDocument(got[0], want)) throw new Error(`${show}: store ${JSON.stringify(got[0])} != mingo ${JSON.stringify(want)}`)
      if (got[1] !== wantChanged) throw new Error(`${show}: store says changed=${got[1]}, mingo ${wantChanged}`)
      if (!sameDocument(doc, asRead)) throw new Error(`${show}: the document as read was changed`)
    }),
    { numRuns: 5000 },
  )
  t.ok(compared > 1000, `${compared} updates applied by both and compared`)
})

/** Deep equality that compares Dates by time (and, like JSON, does not tell -0 from 0). */
function sameDocument(a: unknown, b: unknown): boolean {
  if (a instanceof Date || b instanceof Date) return a instanceof Date && b instanceof Date && Object.is(a.getTime(), b.getTime())
  if (Array.isArray(a) || Array.isArray(b)) return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => sameDocument(x, b[i]))
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    const ka = Object.keys(a).sort()
    const kb = Object.keys(b).sort()
    return JSON.stringify(ka) === JSON.stringify(kb) && ka.every(k => sameDocument((a as any)[k], (b as any)[k]))
  }
  return a === b || (Number.isNaN(a) && Number.isNaN(b))
}
