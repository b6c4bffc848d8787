// GET execute-report/{REPORT_ID}: a report's metrics per calendar bucket of a time zone.
//
// Rows are every bucket the range touches (empty ones too, so a chart has no holes), in time
// order; page/pageSize page over buckets and `total` is the number of buckets. Without
// groupByTime there is one row for the whole range, dated at start_ts in the zone.
//
// The database does the heavy work: one `$group` per report (plus one per percentile histogram)
// over the page's time span, keyed by the bucket arithmetic of time-buckets.ts. What comes back
// is a few rows per bucket (per status and bucket, say; per day for months; per bucket and
// histogram bin for percentiles), never the session records themselves.
import { DateTime } from 'luxon'
import type { Collection } from '../platform/store/index.js'
import type { SessionRecordDoc } from './session-records.js'
import type { ExecuteReportQuery } from './params.js'
import type { BucketState, CompiledReport, GroupRow } from './metrics.js'
import { type Bucket, bucketKeyExpression, bucketSeries, monthOfDayKey, offsetSegments } from './time-buckets.js'

export async function executeReport(
  records: Collection<SessionRecordDoc>,
  report: CompiledReport,
  accountId: string,
  q: ExecuteReportQuery,
) {
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

  if (buckets.length && to > from) {
    const match = { $match: { accountId, crew_id: q.crewId, start_time: { $gte: from, $lt: to } } }
    const key = grouping === null ? null : bucketKeyExpression(grouping, offsetSegments(q.timeZone, from, to), 'start_time')
    const toBucket = (k: unknown): BucketState | undefined => {
      if (grouping === null) return states.get(0)
      if (typeof k !== 'number') return undefined
      return states.get(grouping === 'month' ? monthOfDayKey(k) : k)
    }
    const main = records.aggregate<GroupRow>([match, { $group: { _id: report.groupId(key), ...report.accumulators } }])
    const histograms = report.histograms.map(spec =>
      records.aggregate<{ _id: { k: unknown; b: number }; n: number; mx: number }>([
        { $match: { ...match.$match, ...spec.filter, [spec.field]: { $gte: 0 } } },
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

  return {
    reportId: report.definition.id,
    timeZone: q.timeZone,
    groupByTime: grouping,
    data: buckets.map(b => ({ date: b.date, metrics: report.finish(states.get(b.key)!) })),
    pagination: { page: q.page, pageSize: q.pageSize, total, hasMore: (q.page + 1) * q.pageSize < total },
  }
}
