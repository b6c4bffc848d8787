// The account's session directory for supervisors: live and recently closed sessions, newest
// first, from the session records (reports/session-records.ts). Why that source: every engine
// node already keeps a session's record current in the shared store (its write-behind: opened,
// counts per turn, transfers, pause/resume, close), so one indexed query answers the same in one
// process and across engine nodes over NATS — no fan-out to the nodes, no second copy (a KV
// bucket) to keep in step, and a closed session stays listed after its node is gone.
import { InvalidState, sessionNotFound } from '../../platform/errors.js'
import type { Collection, Filter, Store } from '../../platform/store/index.js'
import type { Clock } from '../../platform/clock.js'
import { SESSION_RECORDS, SessionRecorder, type LastMessage, type SessionRecordDoc, type SessionStatus } from '../../reports/index.js'
import { awaitingReplySince, DEFAULT_NO_REPLY_SECONDS, flagsOf, type AttentionFlag, type AttentionReason } from './attention.js'
import type { CrewCatalog } from '../crews.js'

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

/** A position in the (updated_at, _id) order of the records: the last change read (engine/supervision/session-feed.ts). */
export interface ChangeCursor {
  at: number
  id: string
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
  /** Where the conversation stands: whose move it is. */
  phase: SessionPhase
  /** The last user or assistant message, clipped to 200 characters. */
  lastMessage: LastMessage | null
  /** Unix ms of the user message still without an assistant reply, or null. */
  awaitingReplySince: number | null
  /** Why the session needs a human now (engine/supervision/attention.ts); empty when it does not. */
  attention: AttentionFlag[]
  /** Who it is with, from the session's arguments (customerOf); null when they name nobody. */
  customer: Customer | null
}

export interface Customer {
  name?: string
  address?: string
}

// Session arguments are free-form: the first of these keys that holds text names the customer
// and their address (the dialer passes a contact's custom fields as they were imported).
const NAME_KEYS = ['name', 'customerName', 'customer_name', 'fullName', 'full_name', 'nombre']
const ADDRESS_KEYS = ['phone', 'email', 'whatsapp', 'address', 'msisdn', 'telefono', 'identifier']

/** The customer a session's arguments name, clipped to 200 characters each; undefined when none. */
export function customerOf(args: unknown): Customer | undefined {
  if (!args || typeof args !== 'object') return undefined
  const a = args as Record<string, unknown>
  const first = (keys: string[]) => {
    for (const k of keys) {
      const v = a[k]
      if ((typeof v === 'string' && v.trim()) || typeof v === 'number') return String(v).trim().slice(0, 200)
    }
    return undefined
  }
  const name = first(NAME_KEYS)
  const address = first(ADDRESS_KEYS)
  if (name === undefined && address === undefined) return undefined
  return { ...(name !== undefined ? { name } : {}), ...(address !== undefined ? { address } : {}) }
}

export type SessionPhase = 'awaiting_user' | 'awaiting_assistant' | 'awaiting_tool' | 'paused' | 'closed'

export interface ListingPage {
  data: ListedSession[]
  nextCursor?: string
}

const LIVE: SessionStatus[] = ['active', 'paused']
const CLOSED: SessionStatus[] = ['completed', 'abandoned', 'transferred_to_human', 'error']

export class SessionDirectory {
  private readonly records: Collection<SessionRecordDoc>
  private readonly recorder: SessionRecorder

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    /** The crews' attention settings (no-reply delay); absent: the defaults. */
    private readonly crews?: CrewCatalog,
  ) {
    this.records = store.collection<SessionRecordDoc>(SESSION_RECORDS)
    this.recorder = new SessionRecorder(store, clock)
  }

  /** How the listing and the feed show a record now. */
  listed(r: SessionRecordDoc, now = this.clock.now()): ListedSession {
    const noReplySeconds = this.crews?.get(r.crew_id)?.attention?.noReplySeconds ?? DEFAULT_NO_REPLY_SECONDS
    return listed(r, now, noReplySeconds * 1000)
  }

  /**
   * A supervisor acknowledges a raised flag of a live session: 404 for a session the account does
   * not have (or another account's), 409 when that flag is not raised (or already acknowledged).
   */
  async acknowledge(accountId: string, sessionId: string, reason: AttentionReason, userId: string): Promise<AttentionFlag> {
    const record = await this.records.findOne({ _id: sessionId, accountId })
    if (!record) throw sessionNotFound(sessionId)
    const now = this.clock.now()
    const flag = this.listed(record, now).attention.find(f => f.reason === reason && !f.acknowledged)
    if (!flag) throw new InvalidState('ATTENTION_NOT_RAISED', `Session ${sessionId} has no unacknowledged ${reason} flag`, { reason })
    if (!(await this.recorder.flagAcknowledged(accountId, sessionId, reason, { userId, at: now }))) {
      throw new InvalidState('ATTENTION_NOT_RAISED', `Session ${sessionId} has ended`, { reason })
    }
    return { ...flag, acknowledged: true, acknowledgedBy: userId, acknowledgedAt: now }
  }

  /** Account-wide, newest first (the report index is per crew). */
  ensureIndexes() {
    return this.store.ensureIndexes(SESSION_RECORDS, [
      { name: 'account_start_id', key: { accountId: 1, start_time: -1, _id: -1 }, partitionFields: 1 },
      // The lifecycle feed (engine/supervision/session-feed.ts): the account's records in
      // (updated_at, _id) order from a cursor. With _id in the key MongoDB serves that sort from
      // the index and stops at the limit, instead of sorting every record changed since in memory.
      { name: 'account_updated', key: { accountId: 1, updated_at: 1, _id: 1 }, partitionFields: 1 },
    ])
  }

  /**
   * Records of the account after `after` in (updated_at, _id) order, up to `until` (Unix ms,
   * inclusive) when given: at most `limit`, oldest change first.
   */
  async changesAfter(accountId: string, after: ChangeCursor, until: number | undefined, limit: number): Promise<SessionRecordDoc[]> {
    const updated = until === undefined ? { $gte: after.at } : { $gte: after.at, $lte: until }
    return this.records.find(
      { accountId, updated_at: updated, $or: [{ updated_at: { $gt: after.at } }, { _id: { $gt: after.id } }] },
      { sort: { updated_at: 1, _id: 1 }, limit },
    )
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
      data: page.map(r => this.listed(r, now)),
      ...(rows.length > q.limit && last ? { nextCursor: encodeCursor({ startTime: last.start_time, sessionId: last._id }) } : {}),
    }
  }
}

function listed(r: SessionRecordDoc, now: number, noReplyMs: number): ListedSession {
  const live = r.end_time === null
  const times = { live, paused: r.status === 'paused', lastUserAt: r.last_user_at, lastAssistantAt: r.last_assistant_at }
  const attention = flagsOf(r.attention, times, noReplyMs, now)
  const waiting = live ? awaitingReplySince(times) : null
  return {
    sessionId: r.session_id,
    crewId: r.crew_id,
    agentId: r.agent_id,
    agents: r.agents,
    state: r.status,
    live,
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
    phase: !live ? 'closed' : r.status === 'paused' ? 'paused' : r.attention?.tool_result_awaited?.since !== undefined ? 'awaiting_tool' : waiting !== null ? 'awaiting_assistant' : 'awaiting_user',
    lastMessage: r.last_message ?? null,
    awaitingReplySince: waiting,
    attention,
    customer: r.customer ?? null,
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
