// Calendar buckets of a time zone, computed without date operators in the database.
//
// A zone's UTC offset is constant between its transitions (DST changes, rule changes), and in a
// report range there are only a few of them. So, for the range, we list the constant-offset
// segments (luxon + the platform's IANA data) and give the database one `$switch` that yields the
// offset of a session's start time. With `local = start_time + offset`, every calendar bucket key
// is plain integer arithmetic (`$add`, `$subtract`, `$mod`) that mongod, the mongomock test
// server and mingo all evaluate alike:
//
//   hour   key = t - (local mod 1h)                    the UTC instant the local hour starts
//   day    key = local - (local mod 1d)                local midnight, as "local epoch" ms
//   week   key = local - ((local + 3d) mod 7d)         local Monday midnight (1970-01-01 was a Thursday)
//   month  grouped by day in the database, days rolled up into months here (<= 31 rows a month)
//
// The same functions run here to enumerate every bucket of the range (empty ones included), so a
// database group key always names one of our buckets. Offsets of any size (+05:30, +05:45, DST
// shifts of 30 minutes) are exact: nothing assumes 15-minute or hour alignment.
import { DateTime, FixedOffsetZone, IANAZone } from 'luxon'

export type Grouping = 'hour' | 'day' | 'week' | 'month'

export const HOUR = 3_600_000
export const DAY = 86_400_000
export const WEEK = 7 * DAY

export interface OffsetSegment {
  /** [from, to) in Unix ms. */
  from: number
  to: number
  offsetMs: number
}

/**
 * The name if it is an IANA zone the runtime knows (tzdb names and their links, any letter case,
 * as Intl accepts them), else null. Kept as given: ICU would "canonicalise" to older spellings
 * (Asia/Kathmandu -> Asia/Katmandu).
 */
export function canonicalZone(name: string): string | null {
  // IANA names only: no "+05:00", "UTC+5" or POSIX TZ strings, even where Intl would take them.
  if (name.length > 64 || !/^[A-Za-z][A-Za-z0-9_+\-]*(\/[A-Za-z0-9_+\-]+)*$/.test(name)) return null
  return IANAZone.isValidZone(name) ? name : null
}

const offsetMs = (zone: IANAZone, t: number) => zone.offset(t) * 60_000

// Transitions per zone and UTC year, computed once: sampling every 7 days and bisecting each
// change to the millisecond. This assumes no zone changes its offset twice within a week, true
// of tzdb since 2001 (13-digit timestamps start there); Ramadan DST breaks are weeks long.
const transitionCache = new Map<string, number[]>()
const TRANSITION_CACHE_MAX = 50_000
const SAMPLE_STEP = 7 * 86_400_000

function transitionsOfYear(zone: IANAZone, year: number): number[] {
  const cacheKey = `${zone.name}|${year}`
  const cached = transitionCache.get(cacheKey)
  if (cached) return cached
  const from = Date.UTC(year, 0, 1)
  const to = Date.UTC(year + 1, 0, 1)
  const found: number[] = []
  let previous = from
  let previousOffset = offsetMs(zone, from)
  for (let t = Math.min(from + SAMPLE_STEP, to); ; t = Math.min(t + SAMPLE_STEP, to)) {
    const offset = offsetMs(zone, t)
    if (offset !== previousOffset) {
      // First instant in (previous, t] with the new offset.
      let lo = previous
      let hi = t
      while (hi - lo > 1) {
        const mid = lo + Math.floor((hi - lo) / 2)
        if (offsetMs(zone, mid) === previousOffset) lo = mid
        else hi = mid
      }
      found.push(hi)
      previousOffset = offset
    }
    previous = t
    if (t >= to) break
  }
  // A change exactly at the year's first instant belongs to this year too.
  if (offsetMs(zone, from - 1) !== offsetMs(zone, from)) found.unshift(from)
  if (transitionCache.size >= TRANSITION_CACHE_MAX) transitionCache.clear()
  transitionCache.set(cacheKey, found)
  return found
}

/** The constant-offset pieces of [from, to) in a zone (at least one). */
export function offsetSegments(zoneName: string, from: number, to: number): OffsetSegment[] {
  const zone = IANAZone.create(zoneName)
  const firstYear = new Date(from).getUTCFullYear()
  const lastYear = new Date(Math.max(from, to - 1)).getUTCFullYear()
  const cuts: number[] = []
  for (let year = firstYear; year <= lastYear; year++) {
    for (const t of transitionsOfYear(zone, year)) if (t > from && t < to) cuts.push(t)
  }
  const segments: OffsetSegment[] = []
  let start = from
  for (const cut of [...cuts, to]) {
    if (cut <= start) continue
    segments.push({ from: start, to: cut, offsetMs: offsetMs(zone, start) })
    start = cut
  }
  return segments
}

const mod = (a: number, m: number) => ((a % m) + m) % m

/** The same arithmetic the database runs (see bucketKeyExpression). */
export function bucketKey(grouping: Exclude<Grouping, 'month'> | 'month', t: number, offset: number): number {
  const local = t + offset
  switch (grouping) {
    case 'hour':
      return t - mod(local, HOUR)
    case 'day':
    case 'month': // the database groups months by day
      return local - mod(local, DAY)
    case 'week':
      return local - mod(local + 3 * DAY, WEEK)
  }
}

/** Local-epoch ms of a day key -> local-epoch ms of the first day of its month. */
export function monthOfDayKey(dayKey: number): number {
  const d = new Date(dayKey)
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1)
}

/**
 * MongoDB expression of the offset (ms) of `$<field>`: a `$switch` over the segments of the
 * range, or a constant.
 */
export function offsetExpression(segments: OffsetSegment[], field: string): unknown {
  if (segments.length === 1) return segments[0]!.offsetMs
  return {
    $switch: {
      branches: segments.slice(0, -1).map(s => ({ case: { $lt: [`$${field}`, s.to] }, then: s.offsetMs })),
      default: segments[segments.length - 1]!.offsetMs,
    },
  }
}

/** MongoDB expression of a record's bucket key; mirrors bucketKey(). */
export function bucketKeyExpression(grouping: Grouping, segments: OffsetSegment[], field: string): unknown {
  const t = `$${field}`
  const local = { $add: [t, offsetExpression(segments, field)] }
  switch (grouping) {
    case 'hour':
      return { $subtract: [t, { $mod: [local, HOUR] }] }
    case 'day':
    case 'month':
      return { $subtract: [local, { $mod: [local, DAY] }] }
    case 'week':
      return { $subtract: [local, { $mod: [{ $add: [local, 3 * DAY] }, WEEK] }] }
  }
}

export interface Bucket {
  /** The key records of this bucket carry (month buckets: the key of their first day). */
  key: number
  /** Bucket start in the zone, ISO 8601 with offset. */
  date: string
  /** UTC instant the bucket starts (for narrowing the database range). */
  startsAt: number
}

/**
 * The calendar buckets that [from, to) touches, in order, without building them all: `count`
 * is arithmetic and `slice(first, n)` materialises only a page of them.
 */
export interface BucketSeries {
  count: number
  slice(first: number, n: number): Bucket[]
  /** UTC instant the bucket after the `index`-th one starts (end of a page's range). */
  endOf(index: number): number
}

const iso = (dt: DateTime) => dt.toISO({ suppressMilliseconds: true })!

/** Start of a local calendar day (local-epoch ms) in the zone; a skipped midnight moves forward. */
function localDayStart(zone: string, localKey: number): DateTime {
  const d = new Date(localKey)
  return DateTime.fromObject(
    { year: d.getUTCFullYear(), month: d.getUTCMonth() + 1, day: d.getUTCDate() },
    { zone },
  ).startOf('day')
}

export function bucketSeries(zone: string, grouping: Grouping, from: number, to: number): BucketSeries {
  if (grouping === 'hour') return hourSeries(zone, from, to)
  const iana = IANAZone.create(zone)
  const firstLocal = from + offsetMs(iana, from)
  const lastLocal = to - 1 + offsetMs(iana, to - 1)
  if (grouping === 'month') {
    const index = (local: number) => {
      const d = new Date(local)
      return d.getUTCFullYear() * 12 + d.getUTCMonth()
    }
    const first = index(firstLocal)
    const keyAt = (i: number) => Date.UTC(Math.floor((first + i) / 12), (first + i) % 12, 1)
    return calendarSeries(zone, index(lastLocal) - first + 1, keyAt)
  }
  const step = grouping === 'day' ? DAY : WEEK
  const first = bucketKey(grouping, from, offsetMs(iana, from))
  const last = bucketKey(grouping, to - 1, offsetMs(iana, to - 1))
  return calendarSeries(zone, (last - first) / step + 1, i => first + i * step)
}

function calendarSeries(zone: string, count: number, keyAt: (i: number) => number): BucketSeries {
  return {
    count,
    slice(first, n) {
      const out: Bucket[] = []
      for (let i = first; i < Math.min(count, first + n); i++) {
        const key = keyAt(i)
        const start = localDayStart(zone, key)
        out.push({ key, date: iso(start), startsAt: start.toMillis() })
      }
      return out
    },
    endOf: index => localDayStart(zone, keyAt(index + 1)).toMillis(),
  }
}

/** Hours are real elapsed hours: the repeated local hour of a fall-back change is two buckets. */
function hourSeries(zone: string, from: number, to: number): BucketSeries {
  const segments = offsetSegments(zone, from, to)
  // Per segment: its first key and how many hour keys it adds (a key shared with the previous
  // segment's last one is counted once).
  const parts: { firstKey: number; n: number; offsetMs: number; before: number }[] = []
  let total = 0
  let lastKey = Number.NEGATIVE_INFINITY
  for (const s of segments) {
    let firstKey = bucketKey('hour', s.from, s.offsetMs)
    const endKey = bucketKey('hour', s.to - 1, s.offsetMs)
    if (firstKey === lastKey) firstKey += HOUR
    const n = firstKey > endKey ? 0 : (endKey - firstKey) / HOUR + 1
    parts.push({ firstKey, n, offsetMs: s.offsetMs, before: total })
    total += n
    if (n > 0) lastKey = endKey
  }
  const at = (i: number) => {
    const part = parts.find(p => i < p.before + p.n) ?? parts[parts.length - 1]!
    return { key: part.firstKey + (i - part.before) * HOUR, offsetMs: part.offsetMs }
  }
  return {
    count: total,
    slice(first, n) {
      const out: Bucket[] = []
      for (let i = first; i < Math.min(total, first + n); i++) {
        const { key, offsetMs } = at(i)
        const date = DateTime.fromMillis(key, { zone: FixedOffsetZone.instance(offsetMs / 60_000) })
        out.push({ key, date: iso(date), startsAt: key })
      }
      return out
    },
    endOf: index => (index + 1 < total ? at(index + 1).key : at(index).key + HOUR),
  }
}
