// When may a contact be called: nextAllowedTime() (dialer/rules.ts) against a plain reading of
// the rules, instant by instant: at a local time inside one of the day's windows (or inside
// yesterday's window that runs past midnight), on a date that is not blocked, in the contact's
// zone. For any windows, blocked dates, zone and starting instant, the answer must be allowed,
// not before the start, and the first allowed instant (no allowed minute before it); null only
// when nothing is allowed within the year it looks ahead.
import t from 'tap'
import fc from 'fast-check'
import { DateTime } from 'luxon'
import { nextAllowedTime, WEEKDAYS, type BatchRules, type CallingWindow } from '../../dialer/rules.js'

const minutes = (hhmm: string) => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3))
const hhmm = fc.tuple(fc.integer({ min: 0, max: 23 }), fc.constantFrom(0, 15, 30, 45)).map(([h, m]) => `${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}`)
const callingWindow: fc.Arbitrary<CallingWindow> = fc.record({ days: fc.subarray([...WEEKDAYS], { minLength: 1 }), start: hhmm, end: hhmm })

/** The rules read literally at one instant. */
function allowedAt(rules: BatchRules, zone: string, instant: number): boolean {
  const local = DateTime.fromMillis(instant, { zone })
  if (rules.blockedDates?.includes(local.toISODate()!)) return false
  const windows = rules.callingWindows ?? []
  if (windows.length === 0) return true
  const now = local.hour * 60 + local.minute
  const today = WEEKDAYS[local.weekday - 1]!
  const yesterday = WEEKDAYS[(local.weekday + 5) % 7]!
  return windows.some(w => {
    const [start, end] = [minutes(w.start), minutes(w.end)]
    if (end > start) return w.days.includes(today) && now >= start && now < end
    // At or before its start, a window runs past midnight into the next day.
    return (w.days.includes(today) && now >= start) || (w.days.includes(yesterday) && now < end)
  })
}

// Whole hours, a half hour, three quarters: zones without daylight saving, where every local
// minute happens exactly once (the daylight-saving days have tests of their own in rules.test.ts).
const zone = fc.constantFrom('UTC', 'Asia/Kolkata', 'Asia/Kathmandu', 'Pacific/Kiritimati', 'America/Argentina/Buenos_Aires', 'Asia/Tokyo')
const start = fc.integer({ min: Date.parse('2026-01-01T00:00:00Z'), max: Date.parse('2027-12-31T00:00:00Z') }).map(n => n - (n % 60_000))

t.test('the first allowed instant, for any windows, blocked dates, zone and start', async t => {
  let found = 0
  fc.assert(
    fc.property(
      fc.array(callingWindow, { maxLength: 3 }),
      fc.array(fc.integer({ min: 0, max: 20 }), { maxLength: 6 }),
      zone,
      start,
      (windows, blockedOffsets, zone, from) => {
        // Blocked dates near the start, where they matter.
        const blockedDates = blockedOffsets.map(d => DateTime.fromMillis(from, { zone }).plus({ days: d }).toISODate()!)
        const rules: BatchRules = { callingWindows: windows, blockedDates }
        const got = nextAllowedTime(rules, zone, from)
        const show = JSON.stringify({ rules, zone, from: new Date(from).toISOString(), got: got === null ? null : new Date(got).toISOString() })
        // Every minute up to the answer (at most 30 days of them), or 30 days when there is none.
        const horizon = got === null ? from + 30 * 86_400_000 : Math.min(got, from + 30 * 86_400_000)
        for (let at = from; at < horizon; at += 60_000) if (allowedAt(rules, zone, at)) throw new Error(`allowed at ${new Date(at).toISOString()}, before the answer: ${show}`)
        if (got === null) return
        found++
        if (got < from) throw new Error(`before the start: ${show}`)
        if (!allowedAt(rules, zone, got)) throw new Error(`not allowed at the answer: ${show}`)
      },
    ),
    { numRuns: 400 },
  )
  t.ok(found > 200, `${found} answers checked minute by minute back to their start`)
})

/**
 * In the stretch that repeats after the clocks go back, the wall clock reads times it already
 * read; a window that opened at their first occurrence is still open (the rules' windows are
 * stretches of real time). There, the instant is also read on the clock before the change.
 */
function allowedOnTheEarlierClock(rules: BatchRules, zone: string, instant: number): boolean {
  const offset = (at: number) => DateTime.fromMillis(at, { zone }).offset
  const before = offset(instant - 3 * 3_600_000)
  const back = before - offset(instant)
  if (back <= 0) return false
  // The local time reads `back` minutes behind the earlier clock: is it a time already read?
  let change = instant
  while (offset(change - 60_000) !== before) change -= 60_000
  if (instant >= change + back * 60_000) return false
  return allowedAt(rules, `UTC${before >= 0 ? '+' : '-'}${Math.floor(Math.abs(before) / 60)}:${String(Math.abs(before) % 60).padStart(2, '0')}`, instant)
}

// Zones with daylight saving (a half-hour one among them), starts in the weeks around their changes.
const dstZone = fc.constantFrom('Europe/Madrid', 'America/New_York', 'Australia/Lord_Howe', 'Pacific/Chatham', 'America/Santiago', 'Europe/London')
const aroundChanges = fc
  .tuple(fc.constantFrom('2026-03-08', '2026-03-29', '2026-04-05', '2026-09-27', '2026-10-04', '2026-10-25', '2026-11-01'), fc.integer({ min: -3 * 1440, max: 3 * 1440 }))
  .map(([day, offset]) => Date.parse(`${day}T00:00:00Z`) + offset * 60_000)

t.test('across daylight-saving changes: the answer is allowed on the wall clock, and no allowed minute comes before it where no change lies between', async t => {
  fc.assert(
    fc.property(fc.array(callingWindow, { minLength: 1, maxLength: 2 }), dstZone, aroundChanges, (windows, zone, from) => {
      const rules: BatchRules = { callingWindows: windows }
      const got = nextAllowedTime(rules, zone, from)
      const show = JSON.stringify({ rules, zone, from: new Date(from).toISOString(), got: got === null ? null : new Date(got).toISOString() })
      // Where the clocks go back, the local times of the repeated stretch happen twice: a window
      // ending inside it ends at its first occurrence (the rules call no later, not at the second).
      // Minute by minute only where no change lies between the start and the answer.
      const offset = (at: number) => DateTime.fromMillis(at, { zone }).offset
      const horizon = got === null ? from + 10 * 86_400_000 : Math.min(got, from + 10 * 86_400_000)
      if (offset(from) === offset(horizon)) {
        for (let at = from; at < horizon; at += 60_000) if (allowedAt(rules, zone, at)) throw new Error(`allowed at ${new Date(at).toISOString()}, before the answer: ${show}`)
      }
      if (got === null) return
      if (got < from) throw new Error(`before the start: ${show}`)
      if (!allowedAt(rules, zone, got) && !allowedOnTheEarlierClock(rules, zone, got)) throw new Error(`not allowed at the answer: ${show}`)
    }),
    { numRuns: 1000 },
  )
  t.pass('every answer checked minute by minute')
})

t.test('when the clocks go back, a window that opened in the hour before stays open through its repetition', async t => {
  // New York, Sunday 1 November 2026: 01:30 EDT is 05:30Z; at 06:00Z the clocks go back to 01:00 EST.
  const rules: BatchRules = { callingWindows: [{ days: ['sun'], start: '01:30', end: '00:00' }] }
  const zone = 'America/New_York'
  t.equal(nextAllowedTime(rules, zone, Date.parse('2026-11-01T05:00:00Z')), Date.parse('2026-11-01T05:30:00Z'), 'it opens at the first 01:30')
  t.equal(nextAllowedTime(rules, zone, Date.parse('2026-11-01T06:00:00Z')), Date.parse('2026-11-01T06:00:00Z'), 'at 01:00 EST it has been open for half an hour')
  const closing: BatchRules = { callingWindows: [{ days: ['sun'], start: '00:00', end: '01:30' }] }
  t.equal(nextAllowedTime(closing, zone, Date.parse('2026-11-01T06:00:00Z')), Date.parse('2026-11-08T05:00:00Z'), 'one that closed at the first 01:30 stays closed (next: the Sunday after)')
})
