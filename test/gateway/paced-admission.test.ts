// Past OVERLOAD_LOOP_BUSY_PERCENT, user messages are let in at the pace the loop can serve
// (gateway/paced-admission.ts) instead of all refused and then all taken again. What an operator
// relies on: a loop under its target refuses nothing, even through one busy window (a collection);
// a loop that stays past it takes about what it served at the target and refuses the rest; when
// the loop is quiet again the pace is lifted. The clock is the test's, so the arithmetic is exact.
import t from 'tap'
import { PACE_WINDOW_MS, PacedAdmission } from '../../gateway/paced-admission.js'

function admission(target = 0.8) {
  let now = 0
  const paced = new PacedAdmission(target, () => now)
  /** `perSecond` messages spread over one window; answers how many were taken. */
  const offer = (perSecond: number) => {
    const n = (perSecond * PACE_WINDOW_MS) / 1000
    let taken = 0
    for (let i = 0; i < n; i++) {
      now += PACE_WINDOW_MS / n
      if (paced.take()) taken++
    }
    return taken
  }
  return { paced, offer }
}

t.test('under the target nothing is refused, and one busy window alone does not pace', async t => {
  const { paced, offer } = admission()
  for (let w = 0; w < 20; w++) {
    t.equal(offer(1000), 100, `window ${w}: all 100 taken`)
    paced.window(w === 10 ? 1 : 0.5)
  }
  t.equal(paced.pace, null)
})

t.test('a loop that stays past the target takes about what it can serve and refuses the rest', async t => {
  const { paced, offer } = admission(0.8)
  // 2,000 msg/s offered and the loop fully busy at that rate: it could serve 1,600 at 80 %.
  let windows = 0
  while (paced.pace === null && windows < 5) {
    offer(2000)
    paced.window(1)
    windows++
  }
  t.ok(windows <= 3, `paced after ${windows} windows past the target (the busy share is smoothed)`)
  t.ok(paced.pace! < 2000, `pace ${paced.pace!.toFixed(0)}/s: less than offered`)
  offer(2000)
  paced.window(1)
  t.ok(paced.pace! <= 1600, `pace ${paced.pace!.toFixed(0)}/s once the loop stays busy: at most what it serves at the target`)
  // The loop a little under its target: the pace is held, about the pace is taken, the rest refused.
  for (let w = 0; w < 3; w++) {
    offer(2000)
    paced.window(0.75)
  }
  const pace = paced.pace!
  let taken = 0
  for (let w = 0; w < 10; w++) {
    taken += offer(2000)
    paced.window(0.75)
  }
  t.equal(paced.pace, pace, 'held')
  t.ok(Math.abs(taken - pace) <= pace * 0.1 + 2, `took ${taken} in 1 s at a pace of ${pace.toFixed(0)}/s (offered 2,000)`)
})

t.test('work that is not messages can pace them down to none; a quiet loop lifts the pace', async t => {
  const { paced, offer } = admission(0.6)
  for (let w = 0; w < 4; w++) paced.window(0.95) // a loop saturated by something else, no messages
  t.equal(paced.pace, 0)
  t.equal(offer(100), 0, 'every message refused')
  paced.window(0.95)
  // Quiet again: the pace grows window by window, then is lifted once nothing is refused.
  const paces: number[] = []
  for (let w = 0; w < 30 && paced.pace !== null; w++) {
    offer(5)
    paced.window(0.05)
    paces.push(paced.pace ?? Infinity)
  }
  t.equal(paced.pace, null, `lifted after ${paces.length} quiet windows`)
  t.ok(paces.slice(0, -1).every((p, i) => i === 0 || p > paces[i - 1]!), 'growing until then')
  t.equal(offer(1000), 100, 'nothing refused once lifted')
})
