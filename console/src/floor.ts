// The floor: every live and recently closed session of the account, shared by the list, the
// wallboard numbers and the session page. Fed by the public API only: the listing
// (GET /engine/api/administration/sessions, page by page) for where it starts, then the
// lifecycle feed (GET …/sessions/feed: session.created/changed/closed rows, session.presence).
import { useEffect, useState } from 'preact/hooks'
import { api, type Auth, sse } from './api'

export const ADMIN = '/engine/api/administration'

export interface Flag {
  reason: string
  since: number
  detail?: string
  acknowledged: boolean
  acknowledgedBy?: string
}

export interface Row {
  sessionId: string
  crewId: string
  agentId: string
  state: string
  live: boolean
  startTime: number
  endTime: number | null
  age: number
  messages: number
  lastActivity: number
  endReason: string | null
  watchers?: string[]
  phase?: string
  lastMessage?: { author: string; text: string; at: number } | null
  awaitingReplySince?: number | null
  attention?: Flag[]
  customer?: { name?: string; address?: string } | null
  agents?: string[]
}

export const REASONS: Record<string, string> = {
  guardrail: 'Guardrail triggered',
  assistant_error: 'Assistant error',
  tool_result_awaited: 'Tool result awaited',
  human_requested: 'Asked for a person',
  no_reply: 'No reply',
}

export const NO_REPLY_MS = 30_000

/** Flags needing a human: those not acknowledged (the feed announces no_reply late, so it is also checked here). */
export function needingHuman(r: Row, now: number, noReplyMs = NO_REPLY_MS): Flag[] {
  if (!r.live) return []
  const flags = (r.attention ?? []).filter(f => !f.acknowledged)
  if (r.state !== 'paused' && r.awaitingReplySince && now - r.awaitingReplySince >= noReplyMs && !(r.attention ?? []).some(f => f.reason === 'no_reply')) {
    flags.push({ reason: 'no_reply', since: r.awaitingReplySince + noReplyMs, acknowledged: false })
  }
  return flags
}

export interface Floor {
  rows: Map<string, Row>
  status: string
  /** Applies one row as the API returned it (after an action), without waiting for the feed. */
  put(row: Row): void
}

let shared: { rows: Map<string, Row>; status: string; listeners: Set<() => void>; stop?: () => void; auth?: Auth } = { rows: new Map(), status: 'loading', listeners: new Set() }

const notify = () => {
  for (const l of shared.listeners) l()
}
const put = (row: Row) => {
  const prev = shared.rows.get(row.sessionId)
  // Feed rows carry no presence: keep the watchers the listing or a presence event gave.
  shared.rows = new Map(shared.rows).set(row.sessionId, { ...prev, ...row, watchers: row.watchers ?? prev?.watchers ?? [] })
  notify()
}

async function start(auth: Auth) {
  shared.stop?.()
  shared = { rows: new Map(), status: 'loading', listeners: shared.listeners, auth }
  let stopped = false
  shared.stop = () => (stopped = true)
  const all = new Map<string, Row>()
  let cursor: string | undefined
  // The whole current floor, page by page (500 a page), then live changes from the feed.
  for (let i = 0; i < 20; i++) {
    const res = await api(auth, 'GET', `${ADMIN}/sessions?limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
    if (stopped) return
    if (res.status !== 200) {
      shared.status = `Listing refused (${res.status}): ${res.body?.message ?? ''}`
      return notify()
    }
    for (const r of res.body.data as Row[]) all.set(r.sessionId, r)
    cursor = res.body.nextCursor
    if (!cursor) break
  }
  shared.rows = all
  shared.status = 'live'
  notify()
  const unfeed = sse(auth, `${ADMIN}/sessions/feed`, (event, data) => {
    if (event === 'session.presence') {
      const prev = shared.rows.get(data.sessionId)
      if (prev) put({ ...prev, watchers: data.watchers })
    } else if (event.startsWith('session.')) put(data.session)
  })
  shared.stop = () => {
    stopped = true
    unfeed()
  }
}

/** The shared floor; the first caller with a key starts it (one listing walk and one feed per page). */
export function useFloor(auth: Auth): Floor {
  const [, setVersion] = useState(0)
  useEffect(() => {
    const l = () => setVersion(v => v + 1)
    shared.listeners.add(l)
    if (shared.auth !== auth) void start(auth)
    return () => void shared.listeners.delete(l)
  }, [auth])
  return { rows: shared.rows, status: shared.status, put }
}

export function stopFloor() {
  shared.stop?.()
  shared = { rows: new Map(), status: 'loading', listeners: shared.listeners }
}

/** A clock that re-renders every second (ages, waits and no_reply flags move with time). */
export function useNow(ms = 1000) {
  const [now, setNow] = useState(Date.now())
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms)
    return () => clearInterval(t)
  }, [ms])
  return now
}

export const ago = (ms: number) => {
  const s = Math.max(0, Math.round(ms / 1000))
  if (s < 60) return `${s} s`
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60 ? `${s % 60} s` : ''}`.trim()
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`
}

/** Search over id prefix, customer name or address, agent and crew: every word must match. */
export function matches(r: Row, q: string) {
  const words = q.toLowerCase().split(/\s+/).filter(Boolean)
  if (!words.length) return true
  const hay = [r.sessionId, r.customer?.name ?? '', r.customer?.address ?? '', r.agentId, r.crewId].map(s => s.toLowerCase())
  return words.every(w => hay[0]!.startsWith(w) || hay.slice(1).some(h => h.includes(w)))
}
