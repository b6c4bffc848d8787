// GET sessions-detail: every session of one crew whose start_time is in [start_ts, end_ts).
//
// Order: start_time ascending, then session id (the record _id) ascending: a total order, served
// by the index (accountId, crew_id, start_time, _id).
//
// Nothing here reads or counts every record of the range. `total` is the sum of the range's
// whole 15-minute quarters, read as a few pre-aggregated blocks of session counts (slots.ts),
// plus an index count of the rows in the range's two partial quarters. Page N starts at row
// N * pageSize: the blocks' counts say which quarter holds that row (descending from a block to
// its four sub-blocks) and how many rows of the quarter come before it, so the page is one index
// seek from that quarter, skipping fewer rows than one quarter holds. While older records are
// still being added to the blocks (migration at start), pages are read by count and skip.
//
// Stability while sessions arrive: a walk is pinned to a snapshot bound `asOf` (the first page's
// query time, returned in pagination.asOf): only sessions with start_time <= asOf belong to it.
// New sessions start after asOf, so with asOf sent back, page N is the same rows on every request
// and `total` does not move. Without asOf each request uses "now", and since new sessions sort
// last (they start now), earlier pages still do not shift; only total/hasMore grow. Optionally,
// pagination.nextCursor (keyset: the last row's (start_time, id) plus asOf and the snapshot
// total) reads page N+1 by seeking instead of skipping, which also keeps a session written late
// (with an older start_time) from shifting the rest of the walk.
import type { Collection } from '../platform/store/index.js'
import type { Clock } from '../platform/clock.js'
import type { SessionRecordDoc } from './session-records.js'
import { invalidParameter, type SessionsDetailQuery } from './params.js'
import { type Block, blockSpan, blocksOf, ceilQuarter, childrenOf, QUARTER, quarterOf, type SlotCountDoc } from './slots.js'

export interface DetailSources {
  records: Collection<SessionRecordDoc>
  counts: Collection<SlotCountDoc>
  /** False while older records are still being added to the blocks: count and skip records. */
  slotsReady(): boolean
}

/** A page pins the quarters it spans (the embedded store hashes records by quarter) up to this many. */
const MAX_PINNED_QUARTERS = 2000

interface Cursor {
  v: 1
  /** asOf of the walk */
  a: number
  /** page this cursor opens */
  p: number
  /** start_time and _id of the last row before it */
  s: number
  i: string
  /** snapshot total */
  n: number
  /** query fingerprint: crew, range, page size */
  q: string
}

const fingerprint = (q: SessionsDetailQuery) => JSON.stringify([q.crewId, q.startTs, q.endTs, q.pageSize])

function encodeCursor(c: Cursor): string {
  return Buffer.from(JSON.stringify(c)).toString('base64url')
}

function decodeCursor(text: string, q: SessionsDetailQuery): Cursor {
  let c: Cursor
  try {
    c = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'))
  } catch {
    throw invalidParameter('cursor', 'cursor must be the pagination.nextCursor value of the previous page')
  }
  const valid =
    c && c.v === 1 && Number.isSafeInteger(c.a) && Number.isSafeInteger(c.p) && Number.isSafeInteger(c.s) &&
    typeof c.i === 'string' && Number.isSafeInteger(c.n) && typeof c.q === 'string'
  if (!valid) throw invalidParameter('cursor', 'cursor must be the pagination.nextCursor value of the previous page')
  if (c.q !== fingerprint(q)) {
    throw invalidParameter('cursor', 'cursor belongs to another query: crew_id, start_ts, end_ts and pageSize must stay the same')
  }
  if (c.p !== q.page) throw invalidParameter('page', `page must be ${c.p} with this cursor`)
  if (q.asOf !== undefined && q.asOf !== c.a) throw invalidParameter('asOf', `asOf must be ${c.a} with this cursor (or be left out)`)
  return c
}

export interface SessionRow {
  session_id: string
  agent_id: string
  agents: string[]
  crew_id: string
  start_time: number
  end_time: number | null
  duration: number
  status: string
  messages: number
  user_messages: number
  assistant_messages: number
  tool_calls: number
  transfers: number
  end_reason: string | null
}


function toRow(r: SessionRecordDoc, now: number): SessionRow {
  return {
    session_id: r._id,
    agent_id: r.agent_id,
    agents: r.agents ?? [r.agent_id],
    crew_id: r.crew_id,
    start_time: r.start_time,
    end_time: r.end_time ?? null,
    // A live session reports the time elapsed so far.
    duration: r.end_time == null ? Math.max(0, now - r.start_time) : (r.duration ?? r.end_time - r.start_time),
    status: r.status,
    messages: r.messages ?? 0,
    user_messages: r.user_messages ?? 0,
    assistant_messages: r.assistant_messages ?? 0,
    tool_calls: r.tool_calls ?? 0,
    transfers: r.transfers ?? 0,
    end_reason: r.end_reason ?? null,
  }
}

const SORT = { start_time: 1, _id: 1 } as const

export async function sessionsDetail(sources: DetailSources, clock: Clock, accountId: string, q: SessionsDetailQuery) {
  const now = clock.now()
  const cursor = q.cursor === undefined ? null : decodeCursor(q.cursor, q)
  const asOf = cursor?.a ?? q.asOf ?? now
  // start_time in [start_ts, end_ts) and <= asOf.
  const upper = Math.min(q.endTs, asOf + 1)
  const { docs, total, hasMore } = sources.slotsReady()
    ? await pageFromBlocks(sources, accountId, q, upper, cursor)
    : await pageFromRecords(sources.records, accountId, q, upper, cursor)
  const last = docs[docs.length - 1]
  const nextCursor =
    hasMore && last
      ? encodeCursor({ v: 1, a: asOf, p: q.page + 1, s: last.start_time, i: last._id, n: total, q: fingerprint(q) })
      : undefined
  return {
    data: docs.map(d => toRow(d, now)),
    pagination: { page: q.page, pageSize: q.pageSize, total, hasMore, asOf, ...(nextCursor ? { nextCursor } : {}) },
  }
}

interface Page {
  docs: SessionRecordDoc[]
  total: number
  hasMore: boolean
}

/** Count and skip over the records: before the blocks are complete, and the benches' baseline. */
export async function pageFromRecords(
  records: Collection<SessionRecordDoc>,
  accountId: string,
  q: SessionsDetailQuery,
  upper: number,
  cursor: Cursor | null,
): Promise<Page> {
  const filter = { accountId, crew_id: q.crewId, start_time: { $gte: q.startTs, $lt: upper } }
  if (cursor) {
    const seek = { ...filter, $or: [{ start_time: { $gt: cursor.s, $lt: upper } }, { start_time: cursor.s, _id: { $gt: cursor.i } }] }
    const found = await records.find(seek, { sort: SORT, limit: q.pageSize + 1 })
    const docs = found.slice(0, q.pageSize)
    return { docs, hasMore: found.length > q.pageSize, total: Math.max(cursor.n, q.page * q.pageSize + docs.length) }
  }
  if (upper <= q.startTs) return { docs: [], total: 0, hasMore: false }
  const skip = q.page * q.pageSize
  const [docs, total] = await Promise.all([records.find(filter, { sort: SORT, skip, limit: q.pageSize }), records.countDocuments(filter)])
  return { docs, total, hasMore: skip + docs.length < total }
}

/** A stretch of the range with its row count: a whole block, or (no block) part of one quarter. */
interface Piece {
  from: number
  to: number
  count: number
  block?: Block
}

/** Row r is in [from, to) (a quarter, part of one, or a block), after `offset` of its rows. */
interface Position {
  from: number
  to: number
  offset: number
}

/** Row counts of one crew's range: blocks of session counts plus the records of partial quarters. */
class RangeCounts {
  constructor(
    private readonly sources: DetailSources,
    private readonly accountId: string,
    private readonly crewId: string,
  ) {}

  private recordCount(from: number, to: number) {
    return this.sources.records.countDocuments({ accountId: this.accountId, crew_id: this.crewId, slot: quarterOf(from), start_time: { $gte: from, $lt: to } })
  }

  private async blockPieces(blocks: Block[]): Promise<Piece[]> {
    const byLevel = new Map<number, number[]>()
    for (const b of blocks) {
      let slots = byLevel.get(b.level)
      if (!slots) byLevel.set(b.level, (slots = []))
      slots.push(b.slot)
    }
    const found = await Promise.all(
      [...byLevel].map(([level, slots]) => this.sources.counts.find({ accountId: this.accountId, crew_id: this.crewId, level, slot: { $in: slots } })),
    )
    const counts = new Map(found.flat().map(d => [`${d.level}:${d.slot}`, d.sessions]))
    return blocks.map(block => ({ from: block.slot, to: block.slot + blockSpan(block.level), count: counts.get(`${block.level}:${block.slot}`) ?? 0, block }))
  }

  /** [from, to) as partial quarters (counted on the records) and whole blocks, in order, empty ones left out. */
  async pieces(from: number, to: number): Promise<Piece[]> {
    const a = ceilQuarter(from)
    const b = quarterOf(to)
    let head: [number, number][]
    let tail: [number, number][] = []
    if (a < b) {
      head = [[from, a]]
      tail = [[b, to]]
    } else {
      head = a < to ? [[from, a], [a, to]] : [[from, to]]
    }
    const edge = (pairs: [number, number][]) =>
      Promise.all(pairs.filter(([lo, hi]) => lo < hi).map(async ([lo, hi]): Promise<Piece> => ({ from: lo, to: hi, count: await this.recordCount(lo, hi) })))
    const [before, blocks, after] = await Promise.all([edge(head), a < b ? this.blockPieces(blocksOf(a, b)) : [], edge(tail)])
    return [...before, ...blocks, ...after].filter(p => p.count > 0)
  }

  /** Where row r (0-based, below the pieces' total) is, descending into blocks down to a quarter. */
  async locate(pieces: Piece[], r: number): Promise<Position> {
    let list = pieces
    let found: Position = { from: pieces[0]?.from ?? 0, to: pieces[pieces.length - 1]?.to ?? 0, offset: r }
    for (;;) {
      let rest = found.offset
      const piece = list.find(p => {
        if (rest < p.count) return true
        rest -= p.count
        return false
      })
      // Sub-blocks that do not add up to their block (an update lost to a crash): seek from the
      // block's start instead; the page is still served, off by at most the lost updates.
      if (!piece) return found
      found = { from: piece.from, to: piece.to, offset: rest }
      if (!piece.block || piece.block.level === 0) return found
      list = (await this.blockPieces(childrenOf(piece.block))).filter(p => p.count > 0)
    }
  }
}

async function pageFromBlocks(sources: DetailSources, accountId: string, q: SessionsDetailQuery, upper: number, cursor: Cursor | null): Promise<Page> {
  if (upper <= q.startTs) return { docs: [], total: cursor ? cursor.n : 0, hasMore: false }
  const counts = new RangeCounts(sources, accountId, q.crewId)
  const pieces = await counts.pieces(q.startTs, upper)
  const total = pieces.reduce((n, p) => n + p.count, 0)
  const base = { accountId, crew_id: q.crewId }

  /**
   * `limit` rows from `from` on (after skipping `skip`), read as one seek over the quarters up to
   * the end of the one holding row `lastRow`. Should that window fall short (the counts moved
   * since: a row written late before it), the seek runs again without it, so the rows are right
   * either way.
   */
  const read = async (from: number, skip: number, limit: number, lastRow: number) => {
    const end = lastRow >= 0 && lastRow < total ? await counts.locate(pieces, lastRow) : null
    const windowEnd = end ? Math.min(upper, Math.max(end.to, ceilQuarter(from + 1))) : upper
    const first = quarterOf(from)
    const quarters = Math.ceil((windowEnd - first) / QUARTER)
    const pin = quarters <= MAX_PINNED_QUARTERS ? { slot: { $in: Array.from({ length: quarters }, (_, i) => first + i * QUARTER) } } : {}
    const docs = await sources.records.find({ ...base, ...pin, start_time: { $gte: from, $lt: windowEnd } }, { sort: SORT, skip, limit })
    if (docs.length < limit && windowEnd < upper) {
      return sources.records.find({ ...base, start_time: { $gte: from, $lt: upper } }, { sort: SORT, skip, limit })
    }
    return docs
  }

  if (cursor) {
    // Keyset: the rows after (s, i); rows at s itself with an id up to i come first, so skip them.
    const ties = await sources.records.countDocuments({ ...base, slot: quarterOf(cursor.s), start_time: cursor.s, _id: { $lte: cursor.i } })
    // This page is near row page * pageSize (exactly there unless rows came in late before it);
    // the window reaches a page further, and read() goes on past it if that is not enough.
    const found = await read(cursor.s, ties, q.pageSize + 1, Math.min(total - 1, (q.page + 2) * q.pageSize))
    const docs = found.slice(0, q.pageSize)
    return { docs, hasMore: found.length > q.pageSize, total: Math.max(cursor.n, q.page * q.pageSize + docs.length) }
  }
  const first = q.page * q.pageSize
  if (first >= total) return { docs: [], total, hasMore: false }
  const last = Math.min(total, first + q.pageSize) - 1
  const start = await counts.locate(pieces, first)
  const docs = await read(start.from, start.offset, last - first + 1, last)
  return { docs, total, hasMore: first + docs.length < total }
}

