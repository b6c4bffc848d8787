// Pre-aggregated session records, so report queries read a bounded number of small documents
// instead of every record of a range.
//
// Time is cut into 15-minute UTC quarters. Every IANA zone offset in use since 2001 (the
// reports' 13-digit timestamps start there) is a multiple of 15 minutes, and so is every offset
// change, so each calendar bucket of any zone (hour, day, week, month, DST days included) is a
// whole number of quarters; the pieces of a range that are not (its two ends, or a bucket edge
// off the grid) are read from the records themselves (reports/execute-report.ts).
//
// Quarters are grouped into aligned blocks of 4^k quarters (k = 0..4: 15 min, 1 h, 4 h, 16 h,
// 64 h), and every session adds itself to the five blocks that hold its start, so any range is
// covered by a few blocks (a 90-day range by ~40, a local day by at most 8) instead of one
// document per quarter. Two collections, one document per (account, crew, level, block):
//
//   report_slot_counts  { sessions }   every session that started in the block, live ones
//                                      included: counted once, when its record is created.
//                                      sessions-detail sums them for `total` and to find where a
//                                      page starts.
//   report_slot_stats   { e: cells }   every ENDED session's values, added once, on the close
//                                      that ends its record. A cell per (status, agent_id,
//                                      end_reason), the fields a metric's `where` may test, each
//                                      with count, and per metric field: sum, count of values,
//                                      min, max and the log histogram of metrics.ts (bin -> count
//                                      and largest value). Every one of these merges exactly
//                                      across blocks, so reports equal what the records give.
//
// Updates are `$inc` / `$min` / `$max` / `$set` upserts on plain paths: the same documents run
// on MongoDB and in the embedded stores. Live sessions are never in the stats (their values
// still change); reports read them from the records (few: only sessions still running).
import type { BulkOp, IndexSpec, Update } from '../platform/store/index.js'
import { METRIC_FIELDS, WHERE_FIELDS } from '../schemas/reports.js'
import type { SessionRecordDoc } from './record-types.js'

export const SLOT_COUNTS = 'report_slot_counts'
export const SLOT_STATS = 'report_slot_stats'
/** Every opener of SLOT_STATS passes these: its documents hold numbers and strings only, and the top-level Date slot_at. */
export const SLOT_STATS_OPTIONS = { json: true }

export const QUARTER = 15 * 60_000
/** Block levels 0..TOP_LEVEL; a level-k block spans 4^k quarters. */
export const TOP_LEVEL = 4
export const blockSpan = (level: number) => QUARTER * 4 ** level

const mod = (a: number, m: number) => ((a % m) + m) % m
export const quarterOf = (t: number) => t - mod(t, QUARTER)
export const ceilQuarter = (t: number) => (mod(t, QUARTER) === 0 ? t : quarterOf(t) + QUARTER)

export interface Block {
  level: number
  /** UTC ms the block starts. */
  slot: number
}

/** The aligned blocks covering [from, to) exactly, in time order; both ends quarter-aligned. */
export function blocksOf(from: number, to: number): Block[] {
  const out: Block[] = []
  let x = from
  while (x < to) {
    let level = TOP_LEVEL
    while (level > 0 && (mod(x, blockSpan(level)) !== 0 || x + blockSpan(level) > to)) level--
    out.push({ level, slot: x })
    x += blockSpan(level)
  }
  return out
}

/** The four blocks one level down that make up `block`. */
export const childrenOf = (block: Block): Block[] =>
  [0, 1, 2, 3].map(i => ({ level: block.level - 1, slot: block.slot + i * blockSpan(block.level - 1) }))

export interface SlotCountDoc {
  _id: string
  accountId: string
  crew_id: string
  level: number
  slot: number
  /** slot as a Date (its retention's TTL field; absent on blocks older than it until they are dated). */
  slot_at?: Date
  sessions: number
}

export type WhereValues = Record<(typeof WHERE_FIELDS)[number], string | null>

/**
 * One cell of a stats block, flat (few objects to read): n sessions, and per metric field f:
 * s_f sum, c_f values counted, mn_f / mx_f, h_f_<bin> count and x_f_<bin> largest value of a
 * histogram bin (metrics.ts). The where-values are in the cell's key (cellKey / cellWhere).
 */
export type SlotCell = Record<string, number>

export interface SlotStatsDoc {
  _id: string
  accountId: string
  crew_id: string
  level: number
  slot: number
  slot_at?: Date
  e: Record<string, SlotCell>
}

export const blockId = (accountId: string, crewId: string, b: Block) => JSON.stringify([accountId, crewId, b.level, b.slot])

/** Equality on account, crew and level, then the block start: one index serves every read. */
export const SLOT_INDEXES: IndexSpec[] = [
  { name: 'account_crew_level_slot', key: { accountId: 1, crew_id: 1, level: 1, slot: 1 }, partitionFields: 4 },
]

/** Width of the log histograms' bins (metrics.ts): bins are e^(1/BIN_SCALE) wide. */
export const BIN_SCALE = 100

export const histogramBin = (value: number) => Math.floor(Math.log(value + 1) * BIN_SCALE)

/** A cell's field name: values escaped so no '.', '$' or '|' remains; null is '~'. */
export function cellKey(w: WhereValues): string {
  return WHERE_FIELDS.map(f => {
    const v = w[f]
    return v === null ? '~' : '_' + encodeURIComponent(v).replace(/\./g, '%2E')
  }).join('|')
}

/** The where-values a cell key stands for. */
export function cellWhere(key: string): WhereValues {
  const parts = key.split('|')
  const out = {} as WhereValues
  WHERE_FIELDS.forEach((f, i) => {
    const part = parts[i] ?? '~'
    out[f] = part === '~' ? null : decodeURIComponent(part.slice(1))
  })
  return out
}

/** One record as a cell of its own (key and fields), to merge exactly like a block's cells. */
export function recordCell(r: SessionRecordDoc): [string, SlotCell] {
  const cell: SlotCell = { n: 1 }
  for (const f of METRIC_FIELDS) {
    const v = r[f]
    if (typeof v !== 'number' || !Number.isFinite(v)) continue
    cell[`s_${f}`] = v
    cell[`c_${f}`] = 1
    cell[`mn_${f}`] = v
    cell[`mx_${f}`] = v
    if (v >= 0) {
      const bin = histogramBin(v)
      cell[`h_${f}_${bin}`] = 1
      cell[`x_${f}_${bin}`] = v
    }
  }
  return [cellKey(whereValues(r)), cell]
}

const whereValues = (r: SessionRecordDoc): WhereValues => ({
  status: r.status ?? null,
  agent_id: r.agent_id ?? null,
  end_reason: r.end_reason ?? null,
})

interface PendingUpdate {
  collection: typeof SLOT_COUNTS | typeof SLOT_STATS
  key: { accountId: string; crew_id: string; level: number; slot: number }
  // Maps: a bulk import adds thousands of distinct paths (objects would go dictionary-slow).
  inc: Map<string, number>
  min: Map<string, number>
  max: Map<string, number>
}

/**
 * Collects the block updates of any number of sessions, merged per block document, as one
 * upsert per document: a session's close is five upserts, a bulk import a few per block.
 */
export class SlotUpdates {
  private readonly pending = new Map<string, PendingUpdate>()

  private doc(collection: PendingUpdate['collection'], accountId: string, crewId: string, block: Block) {
    const id = `${collection}\n${blockId(accountId, crewId, block)}`
    let u = this.pending.get(id)
    if (!u) {
      u = { collection, key: { accountId, crew_id: crewId, level: block.level, slot: block.slot }, inc: new Map(), min: new Map(), max: new Map() }
      this.pending.set(id, u)
    }
    return u
  }

  private *blocks(startTime: number): Generator<Block> {
    for (let level = 0; level <= TOP_LEVEL; level++) yield { level, slot: startTime - mod(startTime, blockSpan(level)) }
  }

  /** A session that started (its record was just created). */
  started(r: Pick<SessionRecordDoc, 'accountId' | 'crew_id' | 'start_time'>) {
    for (const block of this.blocks(r.start_time)) {
      const u = this.doc(SLOT_COUNTS, r.accountId, r.crew_id, block)
      add(u.inc, 'sessions', 1)
    }
  }

  /** A session that ended (its record was just closed): its final values. */
  ended(r: SessionRecordDoc) {
    const w = whereValues(r)
    const cell = `e.${cellKey(w)}`
    for (const block of this.blocks(r.start_time)) {
      const u = this.doc(SLOT_STATS, r.accountId, r.crew_id, block)
      add(u.inc, `${cell}.n`, 1)
      for (const f of METRIC_FIELDS) {
        const v = r[f]
        if (typeof v !== 'number' || !Number.isFinite(v)) continue
        add(u.inc, `${cell}.s_${f}`, v)
        add(u.inc, `${cell}.c_${f}`, 1)
        keep(u.min, `${cell}.mn_${f}`, v, Math.min)
        keep(u.max, `${cell}.mx_${f}`, v, Math.max)
        if (v >= 0) {
          const bin = histogramBin(v)
          add(u.inc, `${cell}.h_${f}_${bin}`, 1)
          keep(u.max, `${cell}.x_${f}_${bin}`, v, Math.max)
        }
      }
    }
  }

  get size() {
    return this.pending.size
  }

  /** Adds another collection's updates to these (increments add up, minima and maxima keep the extreme). */
  merge(other: SlotUpdates) {
    for (const [id, theirs] of other.pending) {
      const ours = this.pending.get(id)
      if (!ours) {
        this.pending.set(id, { ...theirs, inc: new Map(theirs.inc), min: new Map(theirs.min), max: new Map(theirs.max) })
        continue
      }
      for (const [path, by] of theirs.inc) add(ours.inc, path, by)
      for (const [path, v] of theirs.min) keep(ours.min, path, v, Math.min)
      for (const [path, v] of theirs.max) keep(ours.max, path, v, Math.max)
    }
  }

  /** Upserts per collection, in a stable order. */
  ops(): Record<typeof SLOT_COUNTS | typeof SLOT_STATS, BulkOp[]> {
    const out: Record<string, BulkOp[]> = { [SLOT_COUNTS]: [], [SLOT_STATS]: [] }
    for (const u of this.pending.values()) {
      // slot_at: the block's start as a Date, what its retention's TTL index reads (reports/retention.ts).
      const update: Update = { $setOnInsert: { ...u.key, slot_at: new Date(u.key.slot) }, $inc: Object.fromEntries(u.inc) }
      if (u.min.size) update.$min = Object.fromEntries(u.min)
      if (u.max.size) update.$max = Object.fromEntries(u.max)
      const _id = blockId(u.key.accountId, u.key.crew_id, u.key)
      out[u.collection]!.push({ updateOne: { filter: { _id }, update, upsert: true } })
    }
    return out as Record<typeof SLOT_COUNTS | typeof SLOT_STATS, BulkOp[]>
  }
}

function add(target: Map<string, number>, path: string, by: number) {
  target.set(path, (target.get(path) ?? 0) + by)
}

function keep(target: Map<string, number>, path: string, v: number, pick: (a: number, b: number) => number) {
  const current = target.get(path)
  target.set(path, current === undefined ? v : pick(current, v))
}
