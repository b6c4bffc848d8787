// GET execute-report/{REPORT_ID}: a report's metrics per calendar bucket of a time zone.
//
// Rows are every bucket the range touches (empty ones too, so a chart has no holes), in time
// order; page/pageSize page over buckets and `total` is the number of buckets. Without
// groupByTime there is one row for the whole range, dated at start_ts in the zone.
//
// Where the numbers come from (see slots.ts): the page's span is cut into runs of one bucket and
// one UTC offset; the whole 15-minute quarters of each run are read as a few pre-aggregated
// blocks (ended sessions), the bits of quarters at a run's ends (the range's own ends, normally)
// from the records of those quarters, and live sessions from the records too (an index on
// `slotted: false` holds only those). Until records written before the blocks existed have been
// added (migration at start), everything is read from the records, as below.
//
// The record path: one `$group` per report (plus one per percentile histogram) over the span,
// keyed by the bucket arithmetic of time-buckets.ts; what comes back is a few rows per bucket,
// never the session records themselves.
import { DateTime } from 'luxon'
import type { Collection } from '../platform/store/index.js'
import type { SessionRecordDoc } from './session-records.js'
import type { ExecuteReportQuery } from './params.js'
import type { BucketState, CompiledReport, GroupRow } from './metrics.js'
import { type Bucket, bucketKey, bucketKeyExpression, bucketSeries, DAY, type Grouping, HOUR, monthOfDayKey, offsetSegments, WEEK } from './time-buckets.js'
import { type Block, blockSpan, blocksOf, ceilQuarter, quarterOf, recordCell, type SlotStatsDoc } from './slots.js'

export interface ReportSources {
  records: Collection<SessionRecordDoc>
  stats: Collection<SlotStatsDoc>
  /** False while older records are still being added to the blocks: read records only. */
  slotsReady(): boolean
}

export async function executeReport(sources: ReportSources, report: CompiledReport, accountId: string, q: ExecuteReportQuery) {
  const grouping = q.groupByTime
  let buckets: Bucket[]
  let total: number
  let from = q.startTs
  let to = q.endTs
  if (grouping === null) {
    total = 1
    const date = DateTime.fromMillis(q.startTs, { zone: q.timeZone }).toISO({ suppressMilliseconds: true })!
    buckets = q.page === 0 ? [{ key: 0, date, startsAt: q.startTs }] : []
  } else {
    const series = bucketSeries(q.timeZone, grouping, q.startTs, q.endTs)
    total = series.count
    const first = q.page * q.pageSize
    buckets = first < total ? series.slice(first, q.pageSize) : []
    if (buckets.length) {
      // Only the page's buckets are read.
      from = Math.max(from, buckets[0]!.startsAt)
      to = Math.min(to, series.endOf(first + buckets.length - 1))
    }
  }
  const states = new Map<number, BucketState>()
  for (const b of buckets) states.set(b.key, report.emptyState())
  const toBucket = (k: unknown): BucketState | undefined => {
    if (grouping === null) return states.get(0)
    if (typeof k !== 'number') return undefined
    return states.get(grouping === 'month' ? monthOfDayKey(k) : k)
  }

  if (buckets.length && to > from) {
    const span: Span = { accountId, crewId: q.crewId, zone: q.timeZone, grouping, from, to }
    if (sources.slotsReady()) await fromBlocks(sources, report, span, toBucket)
    else await fromRecords(sources.records, report, span, {}, toBucket)
  }

  return {
    reportId: report.definition.id,
    timeZone: q.timeZone,
    groupByTime: grouping,
    data: buckets.map(b => ({ date: b.date, metrics: report.finish(states.get(b.key)!) })),
    pagination: { page: q.page, pageSize: q.pageSize, total, hasMore: (q.page + 1) * q.pageSize < total },
  }
}

interface Span {
  accountId: string
  crewId: string
  zone: string
  grouping: Grouping | null
  from: number
  to: number
}

type ToBucket = (key: unknown) => BucketState | undefined

/** The records of [span.from, span.to) that match `extra`, grouped by bucket, merged into states. */
export async function fromRecords(records: Collection<SessionRecordDoc>, report: CompiledReport, span: Span, extra: Record<string, unknown>, toBucket: ToBucket) {
  const { grouping, from, to } = span
  const match = { accountId: span.accountId, crew_id: span.crewId, ...extra, start_time: { $gte: from, $lt: to } }
  const key = grouping === null ? null : bucketKeyExpression(grouping, offsetSegments(span.zone, from, to), 'start_time')
  const main = records.aggregate<GroupRow>([{ $match: match }, { $group: { _id: report.groupId(key), ...report.accumulators } }])
  const histograms = report.histograms.map(spec =>
    records.aggregate<{ _id: { k: unknown; b: number }; n: number; mx: number }>([
      { $match: { ...match, ...spec.filter, [spec.field]: { $gte: 0 } } },
      report.histogramGroup(spec, key),
    ]),
  )
  const [rows, ...binRows] = await Promise.all([main, ...histograms])
  for (const row of rows!) {
    const state = toBucket(row._id?.k ?? null)
    if (state) report.mergeValues(state, row)
  }
  binRows.forEach((rows, index) => {
    const id = report.histograms[index]!.id
    for (const row of rows as { _id: { k: unknown; b: number }; n: number; mx: number }[]) {
      const state = toBucket(row._id.k)
      if (state) report.mergeBin(state, id, Number(row._id.b), row.n, row.mx)
    }
  })
}

/** [from, to) with one bucket key throughout (the records' own key arithmetic). */
interface Run {
  from: number
  to: number
  key: number
}

/**
 * The span cut where the bucket key or the zone offset changes, computed exactly as the record
 * pipeline keys records (time-buckets.ts), so every run lands in the bucket its records would.
 */
export function bucketRuns(zone: string, grouping: Grouping | null, from: number, to: number): Run[] {
  if (grouping === null) return [{ from, to, key: 0 }]
  const runs: Run[] = []
  for (const segment of offsetSegments(zone, from, to)) {
    const offset = segment.offsetMs
    for (let t = segment.from; t < segment.to; ) {
      const local = t + offset
      const mod = (a: number, m: number) => ((a % m) + m) % m
      let next: number
      switch (grouping) {
        case 'hour':
          next = t - mod(local, HOUR) + HOUR
          break
        case 'day':
          next = t - mod(local, DAY) + DAY
          break
        case 'week':
          next = t - mod(local + 3 * DAY, WEEK) + WEEK
          break
        case 'month': {
          const d = new Date(local)
          next = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) - offset
          break
        }
      }
      const end = Math.min(segment.to, next)
      const dayOrHourKey = bucketKey(grouping, t, offset)
      runs.push({ from: t, to: end, key: grouping === 'month' ? monthOfDayKey(dayOrHourKey) : dayOrHourKey })
      t = end
    }
  }
  return runs
}

async function fromBlocks(sources: ReportSources, report: CompiledReport, span: Span, toBucket: ToBucket) {
  const blockState = new Map<string, BucketState>()
  const byLevel = new Map<number, number[]>()
  const partial: { from: number; to: number; state: BucketState }[] = []
  for (const run of bucketRuns(span.zone, span.grouping, span.from, span.to)) {
    // (A month key is the day key of the 1st, which toBucket maps to itself.)
    const state = toBucket(span.grouping === null ? null : run.key)
    if (!state) continue
    const a = ceilQuarter(run.from)
    const b = quarterOf(run.to)
    if (a >= b) {
      // Less than a whole quarter: at most two pieces of quarters.
      if (a < run.to) partial.push({ from: run.from, to: a, state }, { from: a, to: run.to, state })
      else partial.push({ from: run.from, to: run.to, state })
      continue
    }
    if (run.from < a) partial.push({ from: run.from, to: a, state })
    if (b < run.to) partial.push({ from: b, to: run.to, state })
    for (const block of blocksOf(a, b)) {
      blockState.set(blockKey(block), state)
      let slots = byLevel.get(block.level)
      if (!slots) byLevel.set(block.level, (slots = []))
      slots.push(block.slot)
    }
  }
  const blocks = [...byLevel].map(([level, slots]) =>
    sources.stats.find({ accountId: span.accountId, crew_id: span.crewId, level, slot: slotCondition(level, slots) }),
  )
  // Live sessions are never in the blocks, and ended ones off the quarter grid are not read from
  // them: both come from the records (few), each merged as a cell of its own.
  const base = { accountId: span.accountId, crew_id: span.crewId }
  const live = sources.records.find({ ...base, slotted: false, start_time: { $gte: span.from, $lt: span.to } })
  const pieces = partial
    .filter(p => p.from < p.to)
    .map(async p => ({ state: p.state, records: await sources.records.find({ ...base, slot: quarterOf(p.from), slotted: true, start_time: { $gte: p.from, $lt: p.to } }) }))
  const [docs, liveRecords, pieceRecords] = await Promise.all([Promise.all(blocks), live, Promise.all(pieces)])
  for (const doc of docs.flat()) {
    const state = blockState.get(blockKey(doc))
    if (!state) continue
    for (const key in doc.e) report.mergeCell(state, key, doc.e[key]!)
  }
  const segments = offsetSegments(span.zone, span.from, span.to)
  for (const r of liveRecords) {
    const segment = segments.find(s => r.start_time < s.to) ?? segments[segments.length - 1]!
    const state = toBucket(span.grouping === null ? null : bucketKey(span.grouping, r.start_time, segment.offsetMs))
    if (state) report.mergeCell(state, ...recordCell(r))
  }
  for (const piece of pieceRecords) for (const r of piece.records) report.mergeCell(piece.state, ...recordCell(r))
}

const blockKey = (b: Block) => `${b.level}:${b.slot}`

/**
 * The blocks of one level a report reads: a range when they follow one another without a gap
 * (an hour report reads every hour block of its page, or every quarter in a +05:45 zone): one
 * index scan instead of a seek per block. Else the list.
 */
function slotCondition(level: number, slots: number[]) {
  const sorted = [...slots].sort((a, b) => a - b)
  const first = sorted[0]!
  const last = sorted[sorted.length - 1]!
  const contiguous = sorted.length > 1 && last - first === (sorted.length - 1) * blockSpan(level) && new Set(sorted).size === sorted.length
  return contiguous ? { $gte: first, $lte: last } : { $in: slots }
}
