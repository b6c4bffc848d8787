// Compiles a report definition into database work whose partial results merge exactly:
//
// - the main `$group` keys on the bucket plus every field a `where` tests (status, say), and
//   accumulates only plain sums, counts, min and max per numeric field. `where` conditions are
//   then applied to those few grouped rows here (buckets x statuses), so the database evaluates no
//   condition per record, and one accumulator serves every metric on the same field;
// - count / sum / avg / min / max merge from those rows (avg = a sum and a count of non-null
//   values), so groups (statuses, days of a month) add up without error;
// - a percentile cannot be merged from partial percentiles, so each (field, where) pair gets a
//   histogram: the database groups the matching records by (bucket key, bin) with
//   bin = floor(ln(value + 1) * 100), keeping each bin's count and largest value. The bins merge
//   exactly; the nearest-rank percentile then falls in one bin and we report that bin's largest
//   value: a real observed value, never below the exact percentile and at most ~1% above it
//   (bins are e^0.01 wide; values below ~100 ms get a bin each, so they are exact).
import type { MetricDefinition, ReportDefinition } from './definitions.js'
import { BIN_SCALE, cellWhere, type SlotCell } from './slots.js'

type Expression = unknown

export interface HistogramSpec {
  id: string
  field: string
  /** Query-language filter (for `$match`). */
  filter: Record<string, unknown>
  where: MetricDefinition['where']
}

type Bins = Map<number, { n: number; max: number }>

export interface BucketState {
  /** Per metric: a number (count, sum, min, max) or [sum, count] (avg). */
  values: Record<string, number | null | [number, number]>
  histograms: Record<string, Bins>
}

/** A main-group row: `_id` holds the bucket key `k` and the where-fields `w0..`. */
export interface GroupRow {
  _id: Record<string, unknown> | null
  [accumulator: string]: unknown
}

const round = (value: number, digits: number) => {
  const f = 10 ** digits
  return Math.round(value * f) / f
}

function whereFilter(where: MetricDefinition['where']): Record<string, unknown> {
  if (!where) return {}
  return Object.fromEntries(Object.entries(where).map(([field, value]) => [field, Array.isArray(value) ? { $in: value } : value]))
}

const isPresent = (field: string) => ({ $cond: [{ $eq: [{ $ifNull: [`$${field}`, null] }, null] }, 0, 1] })

const num = (v: unknown) => (typeof v === 'number' ? v : null)

export class CompiledReport {
  readonly histograms: HistogramSpec[] = []
  /** Fields some `where` tests; the main group keys on them as w0, w1, ... */
  private readonly whereFields: string[] = []
  /** `$group` accumulators of the main group (without `_id`). */
  readonly accumulators: Record<string, Expression> = { n: { $sum: 1 } }
  private readonly metrics: [string, MetricDefinition][]
  private readonly cellPlans = new Map<string, { values: [string, MetricDefinition['op'], string, string][]; histograms: (readonly [string, string])[] }>()

  constructor(readonly definition: ReportDefinition) {
    this.metrics = Object.entries(definition.metrics)
    for (const [, metric] of this.metrics) {
      for (const field of Object.keys(metric.where ?? {})) {
        if (metric.op !== 'percentile' && !this.whereFields.includes(field)) this.whereFields.push(field)
      }
      const f = metric.field
      switch (metric.op) {
        case 'sum':
          this.accumulators[`s_${f}`] = { $sum: `$${f}` }
          break
        case 'avg':
          this.accumulators[`s_${f}`] = { $sum: `$${f}` }
          this.accumulators[`c_${f}`] = { $sum: isPresent(f!) }
          break
        case 'min':
        case 'max':
          this.accumulators[`${metric.op}_${f}`] = { [`$${metric.op}`]: `$${f}` }
          break
        case 'percentile': {
          const id = JSON.stringify([f, metric.where ?? null])
          if (!this.histograms.some(h => h.id === id)) this.histograms.push({ id, field: f!, filter: whereFilter(metric.where), where: metric.where })
          break
        }
        case 'count':
        case 'ratio':
          break
      }
    }
  }

  /** `_id` of the main `$group`: the bucket key (null: one group) and the where-fields. */
  groupId(key: Expression | null): Record<string, Expression> {
    const id: Record<string, Expression> = { k: key }
    this.whereFields.forEach((field, i) => (id[`w${i}`] = `$${field}`))
    return id
  }

  /** `$group` stage of the histogram of `spec`, grouped by `key` (null: one group). */
  histogramGroup(spec: HistogramSpec, key: Expression | null) {
    const value = `$${spec.field}`
    return {
      $group: {
        _id: { k: key, b: { $floor: { $multiply: [{ $ln: { $add: [value, 1] } }, BIN_SCALE] } } },
        n: { $sum: 1 },
        mx: { $max: value },
      },
    }
  }

  emptyState(): BucketState {
    const values: BucketState['values'] = {}
    for (const [name, metric] of this.metrics) {
      values[name] = metric.op === 'count' || metric.op === 'sum' ? 0 : metric.op === 'avg' ? [0, 0] : null
    }
    const histograms: Record<string, Bins> = {}
    for (const h of this.histograms) histograms[h.id] = new Map()
    return { values, histograms }
  }

  private matches(where: MetricDefinition['where'], id: Record<string, unknown>): boolean {
    if (!where) return true
    return Object.entries(where).every(([field, wanted]) => {
      const value = id[`w${this.whereFields.indexOf(field)}`] ?? null
      return Array.isArray(wanted) ? wanted.includes(value as string) : wanted === value
    })
  }

  /** Adds one main-group row into a bucket. */
  mergeValues(state: BucketState, row: GroupRow) {
    const id = row._id ?? {}
    for (const [name, metric] of this.metrics) {
      if (metric.op === 'percentile' || metric.op === 'ratio' || !this.matches(metric.where, id)) continue
      const f = metric.field
      const current = state.values[name]
      switch (metric.op) {
        case 'count':
          state.values[name] = (current as number) + (num(row.n) ?? 0)
          break
        case 'sum':
          state.values[name] = (current as number) + (num(row[`s_${f}`]) ?? 0)
          break
        case 'avg': {
          const [s, n] = current as [number, number]
          state.values[name] = [s + (num(row[`s_${f}`]) ?? 0), n + (num(row[`c_${f}`]) ?? 0)]
          break
        }
        case 'min':
        case 'max': {
          const value = num(row[`${metric.op}_${f}`])
          if (value === null) break
          const c = current as number | null
          state.values[name] = c === null ? value : metric.op === 'min' ? Math.min(c, value) : Math.max(c, value)
          break
        }
      }
    }
  }

  /**
   * Adds one cell of a stats block (slots.ts; `key` holds its where-values) into a bucket: the
   * same sums, counts, min, max and bins the record pipelines produce for its sessions.
   */
  mergeCell(state: BucketState, key: string, cell: SlotCell) {
    const plan = this.cellPlan(key)
    for (const [name, op, sum, count] of plan.values) {
      const current = state.values[name]
      switch (op) {
        case 'count':
          state.values[name] = (current as number) + (cell.n ?? 0)
          break
        case 'sum':
          state.values[name] = (current as number) + (cell[sum] ?? 0)
          break
        case 'avg': {
          const [s, n] = current as [number, number]
          state.values[name] = [s + (cell[sum] ?? 0), n + (cell[count] ?? 0)]
          break
        }
        case 'min':
        case 'max': {
          const value = cell[sum]
          if (value === undefined) break
          const c = current as number | null
          state.values[name] = c === null ? value : op === 'min' ? Math.min(c, value) : Math.max(c, value)
          break
        }
      }
    }
    for (const [id, field] of plan.histograms) {
      const prefix = `h_${field}_`
      for (const name in cell) {
        if (!name.startsWith(prefix)) continue
        const bin = name.slice(prefix.length)
        this.mergeBin(state, id, Number(bin), cell[name]!, cell[`x_${field}_${bin}`] ?? 0)
      }
    }
  }

  /** Per cell key (its where-values): the metrics and histograms it feeds, and from which fields. */
  private cellPlan(key: string) {
    let plan = this.cellPlans.get(key)
    if (plan) return plan
    const w = cellWhere(key)
    const values: [string, MetricDefinition['op'], string, string][] = []
    for (const [name, metric] of this.metrics) {
      if (metric.op === 'percentile' || metric.op === 'ratio' || !cellMatches(metric.where, w)) continue
      const f = metric.field
      const source = metric.op === 'min' ? `mn_${f}` : metric.op === 'max' ? `mx_${f}` : `s_${f}`
      values.push([name, metric.op, source, `c_${f}`])
    }
    const histograms = this.histograms.filter(spec => cellMatches(spec.where, w)).map(spec => [spec.id, spec.field] as const)
    plan = { values, histograms }
    if (this.cellPlans.size > 10_000) this.cellPlans.clear()
    this.cellPlans.set(key, plan)
    return plan
  }

  mergeBin(state: BucketState, histogram: string, bin: number, n: number, max: number) {
    const bins = state.histograms[histogram]!
    const entry = bins.get(bin)
    if (entry) {
      entry.n += n
      entry.max = Math.max(entry.max, max)
    } else bins.set(bin, { n, max })
  }

  /** The metrics object of a bucket, in definition order. */
  finish(state: BucketState): Record<string, number | null> {
    const out: Record<string, number | null> = {}
    for (const [name, metric] of this.metrics) {
      const value = state.values[name]
      if (metric.op === 'avg') {
        const [s, n] = value as [number, number]
        out[name] = n > 0 ? round(s / n, 2) : null
      } else if (metric.op === 'percentile') {
        out[name] = percentile(state.histograms[JSON.stringify([metric.field, metric.where ?? null])]!, metric.p!)
      } else out[name] = (value as number | null) ?? null
    }
    for (const [name, metric] of this.metrics) {
      if (metric.op !== 'ratio') continue
      const [num, den] = metric.of!
      const d = out[den]
      const n = out[num]
      out[name] = typeof d === 'number' && d !== 0 && typeof n === 'number' ? round(n / d, 4) : null
    }
    return out
  }
}

function cellMatches(where: MetricDefinition['where'], w: ReturnType<typeof cellWhere>): boolean {
  if (!where) return true
  return Object.entries(where).every(([field, wanted]) => {
    const value = w[field as keyof typeof w] ?? null
    return Array.isArray(wanted) ? wanted.includes(value as string) : wanted === value
  })
}

/** Nearest-rank percentile over merged bins: the largest value of the bin holding the rank. */
export function percentile(bins: Bins, p: number): number | null {
  let total = 0
  for (const { n } of bins.values()) total += n
  if (total === 0) return null
  const rank = Math.ceil((p / 100) * total)
  let seen = 0
  for (const bin of [...bins.keys()].sort((a, b) => a - b)) {
    const entry = bins.get(bin)!
    seen += entry.n
    if (seen >= rank) return entry.max
  }
  return null
}
