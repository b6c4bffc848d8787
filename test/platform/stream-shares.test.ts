// Account shares of a process's stream places are work-conserving (platform/stream-shares.ts):
// any account is admitted while places are plentiful, so one account alone uses the process far
// past its share; once they are short, an account at or past its share is refused (429) while one
// below it still gets the places left; at the limit, 503. The arithmetic, without HTTP (the
// gateway's side: test/channel/stream-limits.test.ts).
import t from 'tap'
import { LimitReached } from '../../platform/errors.js'
import { StreamShares, type StreamShareLimits, type StreamPlace } from '../../platform/stream-shares.js'

class Full extends Error {}
const full = (): never => {
  throw new Full('full')
}

/** What `take` answers: a place, 429 (the account's share) or 503 (the process's limit). */
function take(shares: StreamShares, account: string): StreamPlace | 429 | 503 {
  try {
    return shares.take(account, 2, full)
  } catch (err) {
    if (err instanceof LimitReached) return 429
    if (err instanceof Full) return 503
    throw err
  }
}

function fill(shares: StreamShares, account: string, held: StreamPlace[]) {
  for (;;) {
    const answer = take(shares, account)
    if (typeof answer === 'number') return answer
    held.push(answer)
  }
}

const LIMITS: StreamShareLimits = { max: 12, accountPercent: 25, accountFloor: 1, shortPercent: 75 }

t.test('one account alone fills the process up to where places are short, far past its share', async t => {
  const shares = new StreamShares('channel', LIMITS)
  t.equal(shares.accountLimit, 3)
  t.equal(shares.shortAt, 9)
  const a: StreamPlace[] = []
  t.equal(fill(shares, 'a', a), 429)
  t.equal(a.length, 9, 'nine places: 75 % of 12, three times its share')
})

t.test('an account that comes later gets its share in the places left; the first is refused until places are plentiful again', async t => {
  const shares = new StreamShares('channel', LIMITS)
  const a: StreamPlace[] = []
  const b: StreamPlace[] = []
  fill(shares, 'a', a)
  t.equal(fill(shares, 'b', b), 429, 'b is refused past its share too')
  t.equal(b.length, 3, 'b opens its share')
  t.equal(shares.held, 12)
  t.equal(shares.heldBy('a'), 9, 'nothing a holds was taken away')

  // A place a lets go is not its own again while places are short...
  a.pop()!.release()
  t.equal(take(shares, 'a'), 429)
  // ...but an account below its share gets it.
  const c = take(shares, 'c')
  t.type(c, 'object', 'c (below its share) takes the place a left')
  t.equal(take(shares, 'c'), 503, 'then the process is full: 503 for an account below its share')
  t.equal(take(shares, 'a'), 429, 'and 429 still for one past it (told it is its own doing)')

  // Below `shortAt`, any account is admitted again.
  for (const p of [...b.splice(0), c as StreamPlace, a.pop()!]) p.release()
  t.equal(shares.held, 7)
  t.type(take(shares, 'a'), 'object', 'places are plentiful again: a is admitted past its share')
})

t.test('shortPercent 0 keeps the share a hard cap; 100 makes it bite only when the process is full', async t => {
  const hard = new StreamShares('channel', { ...LIMITS, shortPercent: 0 })
  const held: StreamPlace[] = []
  t.equal(fill(hard, 'a', held), 429)
  t.equal(held.length, 3, 'a hard cap: the share and no more')

  const late = new StreamShares('channel', { ...LIMITS, shortPercent: 100 })
  const a: StreamPlace[] = []
  t.equal(fill(late, 'a', a), 429)
  t.equal(a.length, 12, 'one account fills the process')
  t.equal(take(late, 'b'), 503, 'and another finds no place: nothing was kept')
})

t.test('a share that is the whole process, or no limit, is no share', async t => {
  const whole = new StreamShares('channel', { max: 12, accountPercent: 100, accountFloor: 1 })
  const a: StreamPlace[] = []
  t.equal(fill(whole, 'a', a), 503)
  t.equal(a.length, 12)
  const floorAboveMax = new StreamShares('channel', { max: 12, accountPercent: 25, accountFloor: 100 })
  t.equal(floorAboveMax.accountLimit, 0)
  const unlimited = new StreamShares('channel', { max: 0, accountPercent: 25, accountFloor: 1 })
  const taken = Array.from({ length: 1000 }, () => take(unlimited, 'a')).filter(p => typeof p === 'object')
  t.equal(taken.length, 1000, 'no limit: every stream is admitted')
  t.equal(unlimited.held, 1000)
})

t.test('the refusal names the kind and the share, with Retry-After', async t => {
  const shares = new StreamShares('supervision', { max: 5, accountPercent: 40, accountFloor: 1, shortPercent: 80 })
  for (let i = 0; i < 4; i++) shares.take('a', 4, full)
  const err = t.throws(() => shares.take('a', 4, full)) as LimitReached
  t.equal(err.code, 'ACCOUNT_STREAM_LIMIT')
  t.same(err.extra, { kind: 'supervision', limit: 2 })
  t.equal(err.retryAfterSeconds, 4)
})
