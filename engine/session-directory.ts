// The account's session directory for supervisors: live and recently closed sessions, newest
// first, from the session records (reports/session-records.ts). Why that source: every engine
// node already keeps a session's record current in the shared store (its write-behind: opened,
// counts per turn, transfers, pause/resume, close), so one indexed query answers the same in one
// process and across engine nodes over NATS — no fan-out to the nodes, no second copy (a KV
// bucket) to keep in step, and a closed session stays listed after its node is gone.
import type { Collection, Filter, Store } from '../platform/store/index.js'
import type { Clock } from '../platform/clock.js'
import { SESSION_RECORDS, type SessionRecordDoc, type SessionStatus } from '../reports/index.js'

/** How long a closed session stays in the default listing. */
export const RECENTLY_CLOSED_MS = 60 * 60_000

export const LISTING_STATES = ['live', 'active', 'paused', 'closed', 'completed', 'abandoned', 'transferred_to_human', 'error'] as const
export type ListingState = (typeof LISTING_STATES)[number]

export interface ListingQuery {
  accountId: string
  crewId?: string
  agentId?: string
  /** live: active or paused; closed: any ended state; absent: live plus recently closed. */
  state?: ListingState
  limit: number
  cursor?: ListingCursor
}

/** A position in the (start_time desc, id desc) order: the last row of the previous page. */
export interface ListingCursor {
  startTime: number
  sessionId: string
}

export interface ListedSession {
  sessionId: string
  crewId: string
  agentId: string
  agents: string[]
  state: SessionStatus
  live: boolean
  startTime: number
  endTime: number | null
  /** Milliseconds since the start (to the end for a closed session). */
  age: number
  messages: number
  userMessages: number
  assistantMessages: number
  toolCalls: number
  transfers: number
  endReason: string | null
  /** Unix ms of the session's last recorded activity (a turn, a transfer, a pause, the close). */
  lastActivity: number
}

export interface ListingPage {
  data: ListedSession[]
  nextCursor?: string
}

const LIVE: SessionStatus[] = ['active', 'paused']
const CLOSED: SessionStatus[] = ['completed', 'abandoned', 'transferred_to_human', 'error']

export class SessionDirectory {
  private readonly records: Collection<SessionRecordDoc>

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {
    this.records = store.collection<SessionRecordDoc>(SESSION_RECORDS)
  }

  /** Account-wide, newest first (the report index is per crew). */
  ensureIndexes() {
    return this.store.ensureIndexes(SESSION_RECORDS, [
      { name: 'account_start_id', key: { accountId: 1, start_time: -1, _id: -1 }, partitionFields: 1 },
      // The lifecycle feed (engine/session-feed.ts): the account's records changed since a time.
      { name: 'account_updated', key: { accountId: 1, updated_at: 1 }, partitionFields: 1 },
    ])
  }

  /** Records of the account written after `since` (Unix ms), oldest change first. */
  async changedSince(accountId: string, since: number, limit: number): Promise<SessionRecordDoc[]> {
    return this.records.find({ accountId, updated_at: { $gt: since } }, { sort: { updated_at: 1 }, limit })
  }

  async list(q: ListingQuery): Promise<ListingPage> {
    const now = this.clock.now()
    const filter: Filter = { accountId: q.accountId }
    if (q.crewId !== undefined) filter.crew_id = q.crewId
    if (q.agentId !== undefined) filter.agent_id = q.agentId
    if (q.state === 'live') filter.status = { $in: LIVE }
    else if (q.state === 'closed') filter.status = { $in: CLOSED }
    else if (q.state !== undefined) filter.status = q.state
    const and: Filter[] = []
    // Without a state, closed sessions older than the window are history (reports), not the floor.
    if (q.state === undefined) and.push({ $or: [{ end_time: null }, { end_time: { $gte: now - RECENTLY_CLOSED_MS } }] })
    if (q.cursor) {
      const { startTime, sessionId } = q.cursor
      and.push({ $or: [{ start_time: { $lt: startTime } }, { start_time: startTime, _id: { $lt: sessionId } }] })
    }
    if (and.length) filter.$and = and
    const rows = await this.records.find(filter, { sort: { start_time: -1, _id: -1 }, limit: q.limit + 1 })
    const page = rows.slice(0, q.limit)
    const last = page[page.length - 1]
    return {
      data: page.map(r => listed(r, now)),
      ...(rows.length > q.limit && last ? { nextCursor: encodeCursor({ startTime: last.start_time, sessionId: last._id }) } : {}),
    }
  }
}

export function listed(r: SessionRecordDoc, now: number): ListedSession {
  return {
    sessionId: r.session_id,
    crewId: r.crew_id,
    agentId: r.agent_id,
    agents: r.agents,
    state: r.status,
    live: r.end_time === null,
    startTime: r.start_time,
    endTime: r.end_time,
    age: Math.max(0, (r.end_time ?? now) - r.start_time),
    messages: r.messages,
    userMessages: r.user_messages,
    assistantMessages: r.assistant_messages,
    toolCalls: r.tool_calls,
    transfers: r.transfers,
    endReason: r.end_reason,
    lastActivity: r.updated_at ?? r.start_time,
  }
}

export function encodeCursor(c: ListingCursor): string {
  return Buffer.from(JSON.stringify([c.startTime, c.sessionId])).toString('base64url')
}

/** undefined for anything that is not a cursor this module made. */
export function decodeCursor(raw: string): ListingCursor | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'))
    if (!Array.isArray(value) || value.length !== 2) return undefined
    const [startTime, sessionId] = value
    if (!Number.isSafeInteger(startTime) || typeof sessionId !== 'string' || sessionId.length > 64) return undefined
    return { startTime, sessionId }
  } catch {
    return undefined
  }
}
