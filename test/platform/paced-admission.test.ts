// Past OVERLOAD_LOOP_BUSY_PERCENT, user messages are let in at the pace the loop can serve
// (platform/paced-admission.ts) instead of all refused and then all taken again. What an operator
// relies on: a loop under its target refuses nothing, even through one busy window (a collection);
// a loop that stays past it takes about what it serves at the target and refuses the rest; a pace
// set while other work filled the loop does not go on refusing what the loop can serve; when the
// loop is quiet again the pace is lifted. The clock is the test's, so the arithmetic is exact.
import t from 'tap'
import { PACE_WINDOW_MS, PacedAdmission } from '../../platform/paced-admission.js'
import { OverloadGuard } from '../../platform/overload.js'

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
  // A loop whose busy share follows what it takes (0.5 ms of work per message: it serves 1,600/s at
  // 80 %): the pace settles about there, and the rest of the 2,000/s is refused.
  let taken = 0
  for (let w = 0; w < 40; w++) {
    const n = offer(2000)
    if (w >= 30) taken += n
    paced.window(Math.min(1, (n * 10 * 0.5) / 1000))
  }
  t.ok(taken >= 1600 * 0.85 && taken <= 1600 * 1.1, `took ${taken} in the last second at 2,000/s offered (the loop serves 1,600 at its target)`)
})

t.test('a pace set while other work filled the loop grows back as soon as messages leave room, refusing next to none', async t => {
  const { paced, offer } = admission(0.85)
  for (let w = 0; w < 6; w++) paced.window(0.98) // an opening burst: the loop full, no messages
  t.equal(paced.pace, 0)
  // Then 500 msg/s that keep the loop 78 % busy (1.56 ms each): under the target, so they are
  // all served. The pace used to be held at this busy share (between the target and 10 points
  // under it) and went on refusing a third of them.
  let refusedLate = 0
  let windows = 0
  for (; windows < 50 && paced.pace !== null; windows++) {
    const n = offer(500)
    if (windows >= 12) refusedLate += 50 - n
    paced.window((n * 10 * 1.56) / 1000)
  }
  t.equal(paced.pace, null, `lifted after ${windows} windows`)
  t.ok(windows <= 25, 'within 2.5 s')
  t.equal(refusedLate, 0, 'nothing refused after the first 1.2 s (the pace grows by up to half each window)')
  t.equal(offer(500), 50, 'all taken once lifted')
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

t.test('where turns run in the same process, a message past the pace is refused at the edge; a gateway alone leaves that to the engine', async t => {
  const guard = new OverloadGuard({ loopDelayMs: 0, loopBusyPercent: 80, maxStreams: 0, maxTurnsInFlight: 0, retryAfterSeconds: 1 })
  for (let w = 0; w < 4; w++) guard.pacing!.window(0.95) // saturated, no messages: pace 0
  t.equal(guard.pacing!.pace, 0)
  // A gateway-only process: its loop's pace is not its engines'; the engine's `turn` check decides.
  t.doesNotThrow(() => guard.admit('message'))
  guard.hostsTurns()
  t.throws(() => guard.admit('message'), { kind: 'unavailable', code: 'OVERLOADED', extra: { reason: 'loop_busy' }, retryAfterSeconds: 1 })
  t.throws(() => guard.admit('turn'), { kind: 'unavailable', code: 'OVERLOADED' })
  t.doesNotThrow(() => guard.admit('session'), 'sessions are not paced (the switch refuses those)')
})
