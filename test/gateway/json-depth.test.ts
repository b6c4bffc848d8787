// The depth scan that guards JSON.parse agrees with the real nesting depth of any JSON value,
// whatever its strings hold (brackets, quotes, backslash runs, non-ASCII): property-based.
import t from 'tap'
import fc from 'fast-check'
import { jsonDeeperThan } from '../../gateway/request.js'

const depthOf = (value: unknown): number =>
  value !== null && typeof value === 'object'
    ? 1 + Math.max(0, ...Object.values(value as Record<string, unknown>).map(depthOf))
    : 0

const nasty = fc.string({ unit: fc.constantFrom('[', ']', '{', '}', '"', '\\', 'a', 'é', '\u2028', ' ') })

t.test('the scan measures the depth JSON.parse would build', async t => {
  const value = fc.letrec(tie => ({
    node: fc.oneof({ depthSize: 'small', withCrossShrink: true }, nasty, fc.integer(), fc.constant(null), fc.array(tie('node'), { maxLength: 3 }), fc.dictionary(nasty, tie('node'), { maxKeys: 3 })),
  })).node
  fc.assert(
    fc.property(value, fc.integer({ min: 0, max: 8 }), (v, max) => jsonDeeperThan(Buffer.from(JSON.stringify(v)), max) === depthOf(v) > max),
    { numRuns: 2000 },
  )
  t.pass('2000 random values agree')
  t.equal(jsonDeeperThan(Buffer.from('['.repeat(100_000) + ']'.repeat(100_000)), 64), true, '100,000 levels: linear, no recursion')
  t.equal(jsonDeeperThan(Buffer.from('"unterminated [[[['), 1), false, 'an unterminated string is left to JSON.parse')
})
