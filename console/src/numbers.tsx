// Live numbers at a glance (the wallboard): counters over the floor (listing + lifecycle feed,
// see floor.ts) and handle-time figures over a chosen window, per crew or per agent.
// Handle time and service level come from the sessions that ended in the window: the listing
// with state=closed (newest start first, walked back to two hours before the window so long
// sessions that ended inside it count), kept current by the feed's session.closed rows.
import { useEffect, useMemo, useState } from 'preact/hooks'
import { api, type Auth } from './api'
import { ADMIN, ago, needingHuman, type Row } from './floor'

export const WINDOWS: Record<string, number> = { '15m': 15 * 60_000, '1h': 3600_000, '8h': 8 * 3600_000, '24h': 24 * 3600_000 }
/** Sessions ending this way count as served (the service level): the rest were abandoned or failed. */
const SERVED = new Set(['completed', 'transferred_to_human'])
const MAX_PAGES = 20

export interface Figures {
  live: number
  paused: number
  flagged: number
  waiting: number
  longestWait: number
  ended: number
  avgHandle: number | null
  p90Handle: number | null
  serviceLevel: number | null
}

/** Nearest-rank percentile of sorted values. */
const percentile = (sorted: number[], p: number) => (sorted.length ? sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)]! : null)

export function figures(live: Row[], ended: Row[], now: number): Figures {
  const durations = ended.map(r => (r.endTime ?? now) - r.startTime).sort((a, b) => a - b)
  const waits = live.filter(r => r.state !== 'paused' && r.awaitingReplySince).map(r => now - r.awaitingReplySince!)
  return {
    live: live.length,
    paused: live.filter(r => r.state === 'paused').length,
    flagged: live.filter(r => needingHuman(r, now).length > 0).length,
    waiting: waits.length,
    longestWait: waits.length ? Math.max(...waits) : 0,
    ended: ended.length,
    avgHandle: durations.length ? durations.reduce((a, b) => a + b, 0) / durations.length : null,
    p90Handle: percentile(durations, 90),
    serviceLevel: ended.length ? ended.filter(r => SERVED.has(r.state)).length / ended.length : null,
  }
}

const dur = (ms: number | null) => (ms === null ? '—' : ago(ms))
const pct = (x: number | null) => (x === null ? '—' : `${Math.round(x * 100)} %`)

/** Closed sessions that ended in the window: one walk of the listing, then the floor's closes. */
export function useEnded(auth: Auth, rows: Map<string, Row>, windowMs: number, now: number) {
  const [walked, setWalked] = useState<{ windowMs: number; rows: Row[]; capped: boolean }>({ windowMs, rows: [], capped: false })
  useEffect(() => {
    let cancelled = false
    ;(async () => {
      const from = Date.now() - windowMs
      const found: Row[] = []
      let cursor: string | undefined
      let pages = 0
      for (; pages < MAX_PAGES; pages++) {
        const res = await api(auth, 'GET', `${ADMIN}/sessions?state=closed&limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
        if (res.status !== 200) break
        const data = res.body.data as Row[]
        found.push(...data)
        cursor = res.body.nextCursor
        if (!cursor || data[data.length - 1]!.startTime < from - 2 * 3600_000) break
      }
      if (!cancelled) setWalked({ windowMs, rows: found, capped: pages === MAX_PAGES })
    })()
    return () => void (cancelled = true)
  }, [auth, windowMs])
  return useMemo(() => {
    const from = now - windowMs
    const all = new Map(walked.rows.map(r => [r.sessionId, r]))
    for (const r of rows.values()) if (!r.live) all.set(r.sessionId, r)
    return { ended: [...all.values()].filter(r => !r.live && (r.endTime ?? 0) >= from), capped: walked.capped }
  }, [walked, rows, Math.floor(now / 5000), windowMs])
}

export function Numbers({ auth, rows, now, windowKey, setWindow }: { auth: Auth; rows: Map<string, Row>; now: number; windowKey: string; setWindow: (w: string) => void }) {
  const [by, setBy] = useState<'crewId' | 'agentId'>('crewId')
  const windowMs = WINDOWS[windowKey] ?? WINDOWS['1h']!
  const { ended, capped } = useEnded(auth, rows, windowMs, now)
  const live = [...rows.values()].filter(r => r.live)
  const all = figures(live, ended, now)
  const groups = [...new Set([...live.map(r => r[by]), ...ended.map(r => r[by])])].sort()
  const tile = (name: string, value: string, note?: string, kind = '') => (
    <div class={`tile ${kind}`} data-figure={name}>
      <span class="tile-value">{value}</span>
      <span class="tile-name">{name}</span>
      {note && <span class="tile-note">{note}</span>}
    </div>
  )
  return (
    <section class="numbers" aria-label="Live numbers">
      <div class="tiles">
        {tile('Live', String(all.live))}
        {tile('Paused', String(all.paused), undefined, all.paused ? 'warn' : '')}
        {tile('Flagged', String(all.flagged), undefined, all.flagged ? 'alert' : '')}
        {tile('Waiting for a reply', String(all.waiting), all.waiting ? `longest ${ago(all.longestWait)}` : undefined, all.longestWait >= 30_000 ? 'alert' : '')}
        {tile('Avg handle time', dur(all.avgHandle), `${all.ended} ended${capped ? ' (at least)' : ''}`)}
        {tile('p90 handle time', dur(all.p90Handle))}
        {tile('Service level', pct(all.serviceLevel), 'ended served, not abandoned or failed')}
      </div>
      <div class="filters">
        <label>
          Window
          <select value={windowKey} onChange={e => setWindow((e.target as HTMLSelectElement).value)} aria-label="Handle-time window">
            {Object.keys(WINDOWS).map(w => <option value={w}>last {w}</option>)}
          </select>
        </label>
        <label>
          Break down by
          <select value={by} onChange={e => setBy((e.target as HTMLSelectElement).value as 'crewId' | 'agentId')}>
            <option value="crewId">crew</option>
            <option value="agentId">agent</option>
          </select>
        </label>
      </div>
      <table class="breakdown" aria-label={`Numbers by ${by === 'crewId' ? 'crew' : 'agent'}`}>
        <thead>
          <tr><th>{by === 'crewId' ? 'Crew' : 'Agent'}</th><th>Live</th><th>Paused</th><th>Flagged</th><th>Waiting</th><th>Longest wait</th><th>Ended</th><th>Avg handle</th><th>p90 handle</th><th>Service level</th></tr>
        </thead>
        <tbody>
          {groups.map(g => {
            const f = figures(live.filter(r => r[by] === g), ended.filter(r => r[by] === g), now)
            return (
              <tr data-group={g}>
                <td>{g}</td><td>{f.live}</td><td>{f.paused}</td><td>{f.flagged}</td><td>{f.waiting}</td><td>{f.waiting ? ago(f.longestWait) : '—'}</td>
                <td>{f.ended}</td><td>{dur(f.avgHandle)}</td><td>{dur(f.p90Handle)}</td><td>{pct(f.serviceLevel)}</td>
              </tr>
            )
          })}
        </tbody>
      </table>
    </section>
  )
}
