// The LMDB store's query planner: picks the declared index that reads the fewest entries for a
// filter and a sort. An index serves
//   - an equality prefix (plain values, $eq, or a short $in: one key range per combination),
//   - then a range ($gt/$gte/$lt/$lte of one type) on the next field,
//   - and the sort, when the sort's fields (less those the filter pins to one value) are the
//     index fields that follow the equality prefix, in order, all one direction (then _id),
//     so a query with a limit stops reading after its limit;
// the other indexed fields with a condition are checked on the key before the document is read.
// Everything is checked again on the document (mingo decides), so the plan only has to yield a
// superset of the matches, in the right order when it says `ordered`.
import type { Filter, Sort } from './types.js'
import { comparePayload, encodeValue, KEY_ENCODING, KEY_MAX, mayBeCut, RANK, sameInEveryEncoding, type Encoded, type KeyPart } from './index-keys.js'

export interface PlannableIndex {
  name: string
  fields: string[]
  /** Some document held an array on an indexed path: entries repeat, sorts are not served. */
  multikey: boolean
  /** A partial index: entries only for documents with these values (see implies()). */
  partial?: Record<string, string | number | boolean>
  /** The key encoding of its entries (index-keys.ts), when not KEY_ENCODING. */
  encoding?: number
}

type Bound = { payload: KeyPart; inclusive: boolean }
/** `anyEncoding`: its values have the same keys in every key encoding. */
export type Condition =
  | { kind: 'eq'; values: Encoded[]; exact: boolean; anyEncoding: boolean }
  | { kind: 'range'; rank: number; lo?: Bound; hi?: Bound; exact: boolean; anyEncoding: boolean }

export interface KeyRange {
  start?: KeyPart[]
  end?: KeyPart[]
}

export interface IndexPlan {
  index: PlannableIndex
  /** Key ranges to read, in order ([start, end) forwards; lmdb-js takes them swapped in reverse). */
  ranges: KeyRange[]
  reverse: boolean
  /** Entries come in the requested sort order (or no order was asked for). */
  ordered: boolean
  /** Tests on key parts (position of the rank in the key) before the document is read. */
  checks: { position: number; test: (rank: number, payload: KeyPart) => boolean }[]
  /** The ranges and checks decide the whole filter: a count needs no document. */
  exact: boolean
}

const MAX_COMBINATIONS = 4096
const RANGE_OPS: Record<string, 'lo' | 'hi'> = { $gt: 'lo', $gte: 'lo', $lt: 'hi', $lte: 'hi' }

const isScalar = (v: unknown) => v === null || typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean' || v instanceof Date
const anyEncoding = (values: unknown[]) => values.every(v => typeof v !== 'string' || sameInEveryEncoding(v))

/** What an index can do with one field's condition, or undefined (mingo alone decides it). */
export function classify(condition: unknown): Condition | undefined {
  if (isScalar(condition)) return eq([condition])
  if (condition === null || typeof condition !== 'object' || Array.isArray(condition)) return undefined
  const ops = Object.entries(condition as Record<string, unknown>)
  if (ops.length === 0 || ops.some(([op]) => !op.startsWith('$'))) return undefined // an embedded document
  if (ops.length === 1 && ops[0]![0] === '$eq') return isScalar(ops[0]![1]) ? eq([ops[0]![1]]) : undefined
  if (ops.length === 1 && ops[0]![0] === '$in') {
    const values = ops[0]![1]
    return Array.isArray(values) && values.length > 0 && values.every(isScalar) ? eq(values) : undefined
  }
  if (!ops.every(([op]) => op in RANGE_OPS)) return undefined
  let rank: number | undefined
  const range: { lo?: Bound; hi?: Bound } = {}
  for (const [op, operand] of ops) {
    if (!(typeof operand === 'number' || typeof operand === 'string' || operand instanceof Date) || Number.isNaN(operand)) return undefined
    const [r, payload] = encodeValue(operand)
    if (rank !== undefined && r !== rank) return undefined // mongod brackets types: nothing matches both
    rank = r
    const side = RANGE_OPS[op]!
    const bound = { payload, inclusive: op === '$gte' || op === '$lte' }
    const current = range[side]
    // Two bounds on one side: the tighter one.
    if (!current || (side === 'lo' ? comparePayload(payload, current.payload) > 0 : comparePayload(payload, current.payload) < 0)) range[side] = bound
    else if (comparePayload(payload, current.payload) === 0 && !bound.inclusive) range[side] = bound
  }
  return { kind: 'range', rank: rank!, ...range, exact: rank !== RANK.string, anyEncoding: anyEncoding(ops.map(([, operand]) => operand)) }
}

function eq(values: unknown[]): Condition {
  const encoded = new Map<string, Encoded>()
  let exact = true
  for (const value of values) {
    const e = encodeValue(value)
    if (e[0] === RANK.null || mayBeCut(e)) exact = false
    encoded.set(`${e[0]}:${typeof e[1]}:${String(e[1])}`, e)
  }
  return { kind: 'eq', values: [...encoded.values()], exact, anyEncoding: anyEncoding(values) }
}

function keyTest(condition: Condition): (rank: number, payload: KeyPart) => boolean {
  if (condition.kind === 'eq') {
    const values = condition.values
    return (rank, payload) => values.some(([r, p]) => r === rank && p === payload)
  }
  const { rank: want, lo, hi } = condition
  // Cut strings compare inclusively: the key holds only a prefix of the value.
  const strings = want === RANK.string
  return (rank, payload) => {
    if (rank !== want) return false
    if (lo) {
      const c = comparePayload(payload, lo.payload)
      if (c < 0 || (c === 0 && !lo.inclusive && !strings)) return false
    }
    if (hi) {
      const c = comparePayload(payload, hi.payload)
      if (c > 0 || (c === 0 && !hi.inclusive && !strings)) return false
    }
    return true
  }
}

export interface FilterShape {
  conditions: Map<string, Condition>
  /** Filter parts no index can use ($or, $and, regexes, ...): only the document check decides them. */
  residual: boolean
  /** Fields the filter pins to one value: constant, so a sort on them changes nothing. */
  pinned: Set<string>
  /** Every condition's values have the same keys in every key encoding. */
  anyEncoding: boolean
}

export function shapeOf(filter: Filter): FilterShape {
  const conditions = new Map<string, Condition>()
  const pinned = new Set<string>()
  let residual = false
  let sameKeys = true
  for (const [field, value] of Object.entries(filter)) {
    if (field.startsWith('$')) {
      residual = true
      continue
    }
    const condition = classify(value)
    if (!condition) {
      residual = true
      continue
    }
    conditions.set(field, condition)
    sameKeys &&= condition.anyEncoding
    if (condition.kind === 'eq' && condition.values.length === 1) pinned.add(field)
  }
  return { conditions, residual, pinned, anyEncoding: sameKeys }
}

/** The sort fields left once pinned ones are dropped. */
export function effectiveSort(sort: Sort | undefined, pinned: Set<string>): [string, 1 | -1][] {
  return Object.entries(sort ?? {}).filter(([field]) => !pinned.has(field)) as [string, 1 | -1][]
}

/**
 * Whether every document the filter matches has an entry in a partial index: the filter pins each
 * of its fields to its very value (mongod's rule, kept to equalities).
 */
export function implies(shape: FilterShape, partial: Record<string, unknown>): boolean {
  return Object.entries(partial).every(([field, value]) => {
    const condition = shape.conditions.get(field)
    if (condition?.kind !== 'eq' || condition.values.length !== 1 || !condition.exact) return false
    const [rank, payload] = encodeValue(value)
    return condition.values[0]![0] === rank && condition.values[0]![1] === payload
  })
}

/** The best index plan for a filter and sort, or undefined when no index helps (read by _id). */
export function plan(shape: FilterShape, sort: Sort | undefined, limited: boolean, indexes: PlannableIndex[]): IndexPlan | undefined {
  const sortFields = effectiveSort(sort, shape.pinned)
  let best: { plan: IndexPlan; score: number } | undefined
  for (const index of indexes) {
    if (index.partial && !implies(shape, index.partial)) continue
    // An index of an older key encoding (being rebuilt): only for values whose keys it writes
    // alike, and with everything checked on the documents (its keys of other values may not
    // read back as they were written).
    const older = index.encoding !== undefined && index.encoding !== KEY_ENCODING
    if (older && !shape.anyEncoding) continue
    const { fields } = index
    let combos: KeyPart[][] = [[]]
    let prefix = 0
    let exact = !shape.residual && !index.multikey && !older
    const decided = new Set<string>()
    for (const field of fields) {
      const condition = shape.conditions.get(field)
      if (condition?.kind !== 'eq' || combos.length * condition.values.length > MAX_COMBINATIONS) break
      combos = combos.flatMap(p => condition.values.map(([rank, payload]) => [...p, rank, payload]))
      prefix++
      decided.add(field)
      exact &&= condition.exact
    }
    const next = fields[prefix]
    const rangeCondition = next === undefined ? undefined : shape.conditions.get(next)
    const range = rangeCondition?.kind === 'range' ? rangeCondition : undefined
    if (range) {
      decided.add(next!)
      exact &&= range.exact
    }
    const checks: IndexPlan['checks'] = []
    if (!index.multikey && !older) {
      fields.forEach((field, position) => {
        const condition = shape.conditions.get(field)
        if (!condition || decided.has(field)) return
        checks.push({ position: position * 2, test: keyTest(condition) })
        decided.add(field)
        exact &&= condition.exact
      })
    }
    for (const field of shape.conditions.keys()) if (!decided.has(field)) exact = false

    // Sort: the fields after the equality prefix (then _id, the key's last part), one direction.
    let ordered = sortFields.length === 0
    let reverse = false
    if (!ordered && combos.length === 1 && !index.multikey) {
      const keyOrder = [...fields.slice(prefix), '_id']
      const direction = sortFields[0]![1]
      ordered = sortFields.every(([field, dir], i) => dir === direction && keyOrder[i] === field)
      reverse = ordered && direction === -1
    }
    if (prefix === 0 && !range && !(ordered && sortFields.length > 0)) continue

    const ranges: KeyRange[] = combos.map(p => {
      if (range) {
        const start = range.lo
          ? [...p, range.rank, range.lo.payload, ...(range.lo.inclusive || range.rank === RANK.string ? [] : [KEY_MAX as unknown as KeyPart])]
          : [...p, range.rank]
        const end = range.hi
          ? [...p, range.rank, range.hi.payload, ...(range.hi.inclusive || range.rank === RANK.string ? [KEY_MAX as unknown as KeyPart] : [])]
          : [...p, range.rank, KEY_MAX as unknown as KeyPart]
        return { start, end }
      }
      return p.length === 0 ? {} : { start: p, end: [...p, KEY_MAX as unknown as KeyPart] }
    })
    // Fewer entries read wins: pinned fields, then a range, then a sort that lets a limit stop early.
    const score = prefix * 4 + (range ? 3 : 0) + (ordered && sortFields.length > 0 ? (limited ? 10 : 2) : 0) + checks.length - (index.multikey ? 1 : 0)
    if (!best || score > best.score) best = { plan: { index, ranges, reverse, ordered, checks, exact }, score }
  }
  return best?.plan
}
