// Calendar buckets per time zone: the arithmetic keys (what the database computes) against luxon.
import t from 'tap'
import { DateTime } from 'luxon'
import {
  bucketKey,
  bucketSeries,
  canonicalZone,
  monthOfDayKey,
  offsetSegments,
  type Grouping,
} from '../../reports/time-buckets.js'

const ms = (iso: string) => Date.parse(iso)
const dates = (zone: string, g: Grouping, from: string, to: string) => {
  const s = bucketSeries(zone, g, ms(from), ms(to))
  return s.slice(0, s.count).map(b => b.date)
}

t.test('IANA names only', async t => {
  t.equal(canonicalZone('Europe/Madrid'), 'Europe/Madrid')
  t.equal(canonicalZone('europe/madrid'), 'europe/madrid')
  t.equal(canonicalZone('US/Eastern'), 'US/Eastern')
  t.equal(canonicalZone('Asia/Kathmandu'), 'Asia/Kathmandu')
  t.equal(canonicalZone('UTC'), 'UTC')
  t.equal(canonicalZone('America/Argentina/Buenos_Aires'), 'America/Argentina/Buenos_Aires')
  t.equal(canonicalZone('Etc/GMT+5'), 'Etc/GMT+5')
  for (const bad of ['Mars/Olympus', '+05:00', 'UTC+5', 'GMT+05:30', '', 'Europe/', '../etc/passwd', 'Europe Madrid']) {
    t.equal(canonicalZone(bad), null, bad)
  }
})

t.test('offset segments split a range at DST changes', async t => {
  const segs = offsetSegments('Europe/Madrid', ms('2026-10-24T00:00:00Z'), ms('2026-10-26T00:00:00Z'))
  t.same(segs.map(s => [new Date(s.from).toISOString(), s.offsetMs / 3_600_000]), [
    ['2026-10-24T00:00:00.000Z', 2],
    ['2026-10-25T01:00:00.000Z', 1],
  ])
  t.equal(offsetSegments('Asia/Kolkata', ms('2026-01-01T00:00:00Z'), ms('2027-01-01T00:00:00Z')).length, 1)
  const ny = offsetSegments('America/New_York', ms('2026-01-01T00:00:00Z'), ms('2027-01-01T00:00:00Z'))
  t.same(ny.map(s => new Date(s.from).toISOString()), ['2026-01-01T00:00:00.000Z', '2026-03-08T07:00:00.000Z', '2026-11-01T06:00:00.000Z'])
  // A transition exactly at a year boundary is still found (Pacific/Apia and co. aside, test UTC).
  t.equal(offsetSegments('UTC', ms('2001-01-01T00:00:00Z'), ms('2030-01-01T00:00:00Z')).length, 1)
})

t.test('day buckets across the Madrid fall-back (2026-10-25 has 25 hours)', async t => {
  t.same(dates('Europe/Madrid', 'day', '2026-10-23T22:00:00Z', '2026-10-26T23:00:00Z'), [
    '2026-10-24T00:00:00+02:00',
    '2026-10-25T00:00:00+02:00',
    '2026-10-26T00:00:00+01:00',
  ])
  const s = bucketSeries('Europe/Madrid', 'day', ms('2026-10-24T22:00:00Z'), ms('2026-10-25T23:00:00Z'))
  t.equal(s.count, 1)
  t.equal(s.endOf(0) - s.slice(0, 1)[0]!.startsAt, 25 * 3_600_000)
})

t.test('hour buckets: the repeated local hour of a fall-back is two buckets, a skipped one none', async t => {
  t.same(dates('Europe/Madrid', 'hour', '2026-10-24T23:00:00Z', '2026-10-25T03:00:00Z'), [
    '2026-10-25T01:00:00+02:00',
    '2026-10-25T02:00:00+02:00',
    '2026-10-25T02:00:00+01:00',
    '2026-10-25T03:00:00+01:00',
  ])
  t.same(dates('America/New_York', 'hour', '2026-03-08T05:00:00Z', '2026-03-08T09:00:00Z'), [
    '2026-03-08T00:00:00-05:00',
    '2026-03-08T01:00:00-05:00',
    '2026-03-08T03:00:00-04:00',
    '2026-03-08T04:00:00-04:00',
  ])
})

t.test('half- and quarter-hour zones', async t => {
  t.same(dates('Asia/Kolkata', 'hour', '2026-03-07T12:00:00Z', '2026-03-07T14:00:00Z'), [
    '2026-03-07T17:00:00+05:30',
    '2026-03-07T18:00:00+05:30',
    '2026-03-07T19:00:00+05:30',
  ])
  t.same(dates('Asia/Kathmandu', 'day', '2026-03-06T18:15:00Z', '2026-03-08T18:15:00Z'), [
    '2026-03-07T00:00:00+05:45',
    '2026-03-08T00:00:00+05:45',
  ])
  t.same(dates('Asia/Kathmandu', 'day', '2026-03-06T18:14:59Z', '2026-03-07T18:15:01Z'), [
    '2026-03-06T00:00:00+05:45',
    '2026-03-07T00:00:00+05:45',
    '2026-03-08T00:00:00+05:45',
  ])
  // Lord Howe moves its clocks by 30 minutes.
  t.same(dates('Australia/Lord_Howe', 'hour', '2026-04-04T13:00:00Z', '2026-04-04T16:00:00Z'), [
    '2026-04-05T00:00:00+11:00',
    '2026-04-05T01:00:00+11:00',
    '2026-04-05T01:00:00+10:30', // 01:30-02:00 local, the repeated half hour
    '2026-04-05T02:00:00+10:30',
  ])
})

t.test('weeks start on Monday (ISO), months follow the calendar', async t => {
  t.same(dates('Europe/Madrid', 'week', '2026-10-20T00:00:00Z', '2026-11-03T00:00:00Z'), [
    '2026-10-19T00:00:00+02:00',
    '2026-10-26T00:00:00+01:00',
    '2026-11-02T00:00:00+01:00',
  ])
  t.same(dates('America/New_York', 'month', '2026-01-15T00:00:00Z', '2026-04-01T04:00:00Z'), [
    '2026-01-01T00:00:00-05:00',
    '2026-02-01T00:00:00-05:00',
    '2026-03-01T00:00:00-05:00',
  ])
  t.same(dates('America/New_York', 'month', '2026-01-15T00:00:00Z', '2026-04-01T04:00:01Z').length, 4)
  t.equal(bucketSeries('Europe/Madrid', 'month', ms('2001-01-01T00:00:00Z'), ms('2100-01-01T00:00:00Z')).count, 1189)
})

t.test('paging: a slice of a long series is built without the rest', async t => {
  const s = bucketSeries('Europe/Madrid', 'hour', ms('2025-01-01T00:00:00Z'), ms('2027-01-01T00:00:00Z'))
  t.equal(s.count, 730 * 24) // real hours: the DST changes cancel out over whole years
  const all = s.slice(0, s.count)
  const page = s.slice(7000, 100)
  t.same(page, all.slice(7000, 7100))
  t.equal(s.endOf(7099), all[7100]!.startsAt)
})

// Property check: for random instants in many zones the arithmetic key names the bucket luxon's
// startOf() gives (days/weeks/months by local date; hours by the instant the hour starts).
t.test('arithmetic keys agree with luxon startOf in many zones', async t => {
  const zones = ['Europe/Madrid', 'America/New_York', 'Asia/Kolkata', 'Asia/Kathmandu', 'Australia/Adelaide', 'America/St_Johns', 'Pacific/Chatham', 'America/Santiago', 'Africa/Casablanca', 'UTC']
  let seed = 42
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
  let checked = 0
  const mismatches: string[] = []
  for (const zone of zones) {
    const from = ms('2024-01-01T00:00:00Z')
    const to = ms('2028-01-01T00:00:00Z')
    const segs = offsetSegments(zone, from, to)
    for (let i = 0; i < 400; i++) {
      const time = from + Math.floor(random() * (to - from))
      const offset = segs.find(s => time < s.to)!.offsetMs
      const dt = DateTime.fromMillis(time, { zone })
      const local = (d: DateTime) => Date.UTC(d.year, d.month - 1, d.day)
      const pairs: [string, number, number][] = [
        ['offset', offset, dt.offset * 60_000],
        ['hour', bucketKey('hour', time, offset), dt.startOf('hour').toMillis()],
        ['day', bucketKey('day', time, offset), local(dt.startOf('day'))],
        ['week', bucketKey('week', time, offset), local(dt.startOf('week'))],
        ['month', monthOfDayKey(bucketKey('month', time, offset)), local(dt.startOf('month'))],
      ]
      for (const [what, ours, luxon] of pairs) if (ours !== luxon) mismatches.push(`${zone} ${what} ${dt.toISO()}: ${ours} != ${luxon}`)
      checked++
    }
  }
  t.equal(checked, zones.length * 400)
  t.same(mismatches, [])
})
