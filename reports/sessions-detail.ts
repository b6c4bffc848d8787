// GET sessions-detail: every session of one crew whose start_time is in [start_ts, end_ts).
//
// Order: start_time ascending, then session id (the record _id) ascending: a total order, served
// by the index (accountId, crew_id, start_time, _id).
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

const PROJECTION = {
  _id: 1, agent_id: 1, agents: 1, crew_id: 1, start_time: 1, end_time: 1, duration: 1, status: 1,
  messages: 1, user_messages: 1, assistant_messages: 1, tool_calls: 1, transfers: 1, end_reason: 1,
} as const

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

export async function sessionsDetail(records: Collection<SessionRecordDoc>, clock: Clock, accountId: string, q: SessionsDetailQuery) {
  const now = clock.now()
  const cursor = q.cursor === undefined ? null : decodeCursor(q.cursor, q)
  const asOf = cursor?.a ?? q.asOf ?? now
  // start_time in [start_ts, end_ts) and <= asOf.
  const upper = Math.min(q.endTs, asOf + 1)
  const filter = { accountId, crew_id: q.crewId, start_time: { $gte: q.startTs, $lt: upper } }
  const sort = { start_time: 1, _id: 1 } as const

  let docs: SessionRecordDoc[]
  let total: number
  let hasMore: boolean
  if (cursor) {
    const seek = { ...filter, $or: [{ start_time: { $gt: cursor.s, $lt: upper } }, { start_time: cursor.s, _id: { $gt: cursor.i } }] }
    const found = await records.find(seek, { sort, limit: q.pageSize + 1, projection: PROJECTION })
    hasMore = found.length > q.pageSize
    docs = found.slice(0, q.pageSize)
    total = Math.max(cursor.n, q.page * q.pageSize + docs.length)
  } else {
    const skip = q.page * q.pageSize
    ;[docs, total] = await Promise.all([
      upper > q.startTs ? records.find(filter, { sort, skip, limit: q.pageSize, projection: PROJECTION }) : Promise.resolve([]),
      upper > q.startTs ? records.countDocuments(filter) : Promise.resolve(0),
    ])
    hasMore = skip + docs.length < total
  }
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
