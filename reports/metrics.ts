// Compiles a report definition into database work whose partial results merge exactly:
//
// - count / sum / avg / min / max become `$group` accumulators (avg = a sum and a count of
//   non-null values), so groups (days of a month, say) add up without error;
// - a percentile cannot be merged from partial percentiles, so each (field, where) pair gets a
//   histogram: the database groups the matching records by (bucket key, bin) with
//   bin = floor(ln(value + 1) * 100), keeping each bin's count and largest value. The bins merge
//   exactly; the nearest-rank percentile then falls in one bin and we report that bin's largest
//   value: a real observed value, never below the exact percentile and at most ~1% above it
//   (bins are e^0.01 wide; values below ~100 ms get a bin each, so they are exact).
import type { MetricDefinition, ReportDefinition } from './definitions.js'

export const BIN_SCALE = 100

type Expression = unknown

export interface HistogramSpec {
  id: string
  field: string
  /** Query-language filter (for `$match`). */
  filter: Record<string, unknown>
}

type Bins = Map<number, { n: number; max: number }>

export interface BucketState {
  values: Record<string, number | null>
  histograms: Record<string, Bins>
}

const round = (value: number, digits: number) => {
  const f = 10 ** digits
  return Math.round(value * f) / f
}

function whereExpression(where: MetricDefinition['where']): Expression | null {
  if (!where) return null
  const terms = Object.entries(where).map(([field, value]) => {
    const values = Array.isArray(value) ? value : [value]
    const eqs = values.map(v => ({ $eq: [`$${field}`, v] }))
    return eqs.length === 1 ? eqs[0] : { $or: eqs }
  })
  return terms.length === 1 ? terms[0]! : { $and: terms }
}

function whereFilter(where: MetricDefinition['where']): Record<string, unknown> {
  if (!where) return {}
  return Object.fromEntries(Object.entries(where).map(([field, value]) => [field, Array.isArray(value) ? { $in: value } : value]))
}

const when = (cond: Expression | null, then: Expression, otherwise: Expression) =>
  cond === null ? then : { $cond: [cond, then, otherwise] }

const isPresent = (field: string) => ({ $cond: [{ $eq: [{ $ifNull: [`$${field}`, null] }, null] }, 0, 1] })

type Merge = 'sum' | 'min' | 'max'

export class CompiledReport {
  /** `$group` accumulators (without `_id`). */
  readonly accumulators: Record<string, Expression> = {}
  readonly histograms: HistogramSpec[] = []
  private readonly merges: Record<string, Merge> = {}

  constructor(readonly definition: ReportDefinition) {
    for (const [index, [name, metric]] of Object.entries(definition.metrics).entries()) {
      const a = `m${index}`
      const cond = whereExpression(metric.where)
      const field = metric.field ? `$${metric.field}` : null
      switch (metric.op) {
        case 'count':
          this.add(a, { $sum: when(cond, 1, 0) }, 'sum')
          break
        case 'sum':
          this.add(a, { $sum: when(cond, field, 0) }, 'sum')
          break
        case 'avg':
          this.add(`${a}s`, { $sum: when(cond, field, 0) }, 'sum')
          this.add(`${a}n`, { $sum: when(cond, isPresent(metric.field!), 0) }, 'sum')
          break
        case 'min':
        case 'max':
          this.add(a, { [`$${metric.op}`]: when(cond, field, null) }, metric.op)
          break
        case 'percentile': {
          const id = JSON.stringify([metric.field, metric.where ?? null])
          if (!this.histograms.some(h => h.id === id)) {
            this.histograms.push({ id, field: metric.field!, filter: whereFilter(metric.where) })
          }
          break
        }
        case 'ratio':
          break
      }
      void name
    }
  }

  private add(name: string, accumulator: Expression, merge: Merge) {
    this.accumulators[name] = accumulator
    this.merges[name] = merge
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
    const values: Record<string, number | null> = {}
    for (const [name, merge] of Object.entries(this.merges)) values[name] = merge === 'sum' ? 0 : null
    const histograms: Record<string, Bins> = {}
    for (const h of this.histograms) histograms[h.id] = new Map()
    return { values, histograms }
  }

  /** Adds one database group (main accumulators) into a bucket. */
  mergeValues(state: BucketState, row: Record<string, unknown>) {
    for (const [name, merge] of Object.entries(this.merges)) {
      const value = typeof row[name] === 'number' ? (row[name] as number) : null
      const current = state.values[name] ?? null
      if (merge === 'sum') state.values[name] = (current ?? 0) + (value ?? 0)
      else if (value !== null) {
        state.values[name] = current === null ? value : merge === 'min' ? Math.min(current, value) : Math.max(current, value)
      }
    }
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
    const metrics = Object.entries(this.definition.metrics)
    for (const [index, [name, metric]] of metrics.entries()) {
      const a = `m${index}`
      switch (metric.op) {
        case 'count':
        case 'sum':
        case 'min':
        case 'max':
          out[name] = state.values[a] ?? null
          break
        case 'avg': {
          const n = state.values[`${a}n`] ?? 0
          out[name] = n > 0 ? round((state.values[`${a}s`] ?? 0) / n, 2) : null
          break
        }
        case 'percentile':
          out[name] = percentile(state.histograms[JSON.stringify([metric.field, metric.where ?? null])]!, metric.p!)
          break
        case 'ratio':
          break
      }
    }
    for (const [name, metric] of metrics) {
      if (metric.op !== 'ratio') continue
      const [num, den] = metric.of!
      const d = out[den]
      const n = out[num]
      out[name] = typeof d === 'number' && d !== 0 && typeof n === 'number' ? round(n / d, 4) : null
    }
    return out
  }
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
