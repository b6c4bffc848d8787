// The embedded stores test most filters themselves (query.ts, fastMatch: every write by id and
// every index-served query goes through it) and leave the rest to mingo. Wherever fastMatch
// answers, it must answer as mingo does; and the filters the dialer and the engine send must
// be answered by it, not left to mingo (that is what it is for).
import t from 'tap'
import fc from 'fast-check'
import { Query } from 'mingo'
import { fastMatch } from '../../platform/store/query.js'

const plain = (o: Record<string, unknown>) => Object.assign({}, o)
const scalar = fc.oneof(
  fc.constant(null),
  fc.integer({ min: -2, max: 2 }),
  fc.constantFrom(0.5, -0, Number.NaN),
  fc.constantFrom('', 'x', 'y', '1'),
  fc.constantFrom(new Date(0), new Date(5), new Date(Number.NaN)),
  fc.boolean(),
)
const value = fc.letrec(tie => ({
  v: fc.oneof({ depthSize: 'small' }, scalar, fc.array(tie('v'), { maxLength: 2 }), fc.dictionary(fc.constantFrom('a', 'b'), tie('v'), { maxKeys: 2 }).map(plain)),
})).v
const doc = fc.dictionary(fc.constantFrom('a', 'b', 'c'), value, { maxKeys: 3 }).map(plain)
const path = fc.constantFrom('a', 'b', 'c', 'a.b', 'b.a', 'a.b.a')
const range = fc.constantFrom('$lt', '$lte', '$gt', '$gte')
const condition = fc.oneof(
  scalar,
  fc.record({ $in: fc.array(scalar, { maxLength: 20 }) }),
  fc.record({ $nin: fc.array(scalar, { maxLength: 20 }) }),
  fc.record({ $ne: scalar }),
  fc.record({ $exists: fc.boolean() }),
  fc.dictionary(range, fc.oneof(fc.integer({ min: -2, max: 2 }), fc.constantFrom('x', new Date(3), Number.NaN, new Date(Number.NaN))), { minKeys: 1, maxKeys: 2 }).map(plain),
  // Left to mingo: an operator it does not take, two that do not go together, an array or an embedded document.
  fc.constantFrom({ $size: 1 }, { $ne: 1, $in: [1] }, [1], { a: 1 }, { $in: [[1]] }),
)
const filter = fc.dictionary(path, condition, { minKeys: 1, maxKeys: 3 }).map(plain)

t.test('wherever it answers, fastMatch answers as mingo does', async t => {
  const answers = { true: 0, false: 0 }
  fc.assert(
    fc.property(doc, filter, (d, f) => {
      const fast = fastMatch(d, f)
      if (fast === undefined) return true
      answers[`${fast}`]++
      return fast === new Query(f).test(d)
    }),
    { numRuns: 5000 },
  )
  // Many of the generated pairs are decided by it, both ways: the property is not vacuous.
  t.ok(answers.true > 200 && answers.false > 200, `matched ${answers.true}, not matched ${answers.false} of 5000`)
})

t.test('long $in and $nin lists (tested through a Set) answer as short ones', async t => {
  const long = Array.from({ length: 40 }, (_, i) => `v${i}`)
  t.equal(fastMatch({ a: 'v33' }, { a: { $in: long } }), true)
  t.equal(fastMatch({ a: 'w' }, { a: { $in: long } }), false)
  t.equal(fastMatch({ a: 'v33' }, { a: { $nin: long } }), false)
  t.equal(fastMatch({}, { a: { $nin: long } }), true)
  // The same array again (its Set is kept): still answered from it.
  t.equal(fastMatch({ a: 'v0' }, { a: { $in: long } }), true)
  // An embedded document in a long list: mingo's to decide.
  t.equal(fastMatch({ a: 'v1' }, { a: { $in: [...long, { x: 1 }] } }), undefined)
  // A top-level operator: the whole filter is mingo's, even where a field alone would not match.
  t.equal(fastMatch({ a: 1 }, { a: 2, $or: [{ b: 1 }] }), undefined)
})

t.test('the filters of a dialer claim and a session write are decided by it', async t => {
  const contact = { _id: 'c1', state: 'pending', nextAttemptAt: new Date(1000), claimedBy: null, addresses: [{ type: 'phone', address: '+1' }] }
  t.equal(fastMatch(contact, { _id: 'c1', state: 'pending', nextAttemptAt: { $lte: new Date(2000) }, claimedBy: null }), true)
  t.equal(fastMatch(contact, { _id: 'c1', state: 'pending', nextAttemptAt: { $lte: new Date(500) }, claimedBy: null }), false)
  t.equal(fastMatch({ _id: 's1', epoch: 3 }, { _id: 's1', epoch: { $lte: 3 } }), true)
})
