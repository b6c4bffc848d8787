// The floor as a list: live sessions (attention first), recently closed ones set apart with
// their end reason, a search and filters that combine and live in the URL, presence, and the
// keyboard: j/k (or arrows) move, Enter opens, / searches, a acknowledges, ? lists the keys.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks'
import { api, type Auth } from './api'
import { ADMIN, ago, matches, needingHuman, REASONS, type Floor, type Row } from './floor'
import { Numbers } from './numbers'
import { navigate, withQuery, type Route } from './router'

const PAGE = 100
export const STATES = ['live', 'active', 'paused', 'flagged', 'waiting', 'closed', 'all'] as const

export const SHORTCUTS: [string, string][] = [
  ['j / ↓', 'next session'],
  ['k / ↑', 'previous session'],
  ['Enter / o', 'open the session'],
  ['/', 'search'],
  ['a', "acknowledge the session's oldest flag"],
  ['Esc', 'back to the list (on a session)'],
  ['?', 'show or hide this list'],
]

export function Shortcuts({ onClose }: { onClose: () => void }) {
  return (
    <aside class="shortcuts" aria-label="Keyboard shortcuts">
      <h3>Keyboard shortcuts</h3>
      <dl>{SHORTCUTS.map(([k, what]) => <><dt><kbd>{k}</kbd></dt><dd>{what}</dd></>)}</dl>
      <button onClick={onClose}>Close</button>
    </aside>
  )
}

const typing = (e: KeyboardEvent) => {
  const t = e.target as HTMLElement | null
  return !!t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || t.isContentEditable)
}

export function Sessions({ auth, floor, route, now }: { auth: Auth; floor: Floor; route: Route; now: number }) {
  const p = route.params
  const q = p.get('q') ?? ''
  const crew = p.get('crew') ?? ''
  const agent = p.get('agent') ?? ''
  const state = p.get('state') ?? 'live'
  const windowKey = p.get('window') ?? '1h'
  const [page, setPage] = useState(0)
  const [selected, setSelected] = useState(0)
  const [help, setHelp] = useState(false)
  const [outcome, setOutcome] = useState('')
  const search = useRef<HTMLInputElement>(null)
  const setParam = (name: string, value: string) => {
    setPage(0)
    setSelected(0)
    navigate(withQuery('sessions', { q, crew, agent, state: state === 'live' ? '' : state, window: windowKey === '1h' ? '' : windowKey, [name]: value }), true)
  }
  const rows = [...floor.rows.values()]
  const base = rows.filter(r => matches(r, q) && (!crew || r.crewId === crew) && (!agent || r.agentId === agent))
  const keep = (r: Row) => {
    switch (state) {
      case 'all': return true
      case 'live': return r.live
      case 'closed': return !r.live
      case 'flagged': return needingHuman(r, now).length > 0
      case 'waiting': return r.live && r.state !== 'paused' && !!r.awaitingReplySince
      default: return r.state === state
    }
  }
  const second = Math.floor(now / 1000)
  const shown = useMemo(
    () =>
      base.filter(keep).sort((a, b) => {
        // Attention first (oldest flag first), then live, then newest.
        const fa = needingHuman(a, now)
        const fb = needingHuman(b, now)
        if (fa.length || fb.length) {
          if (!fa.length || !fb.length) return fb.length - fa.length
          return Math.min(...fa.map(f => f.since)) - Math.min(...fb.map(f => f.since))
        }
        return Number(b.live) - Number(a.live) || b.startTime - a.startTime
      }),
    [floor.rows, q, crew, agent, state, second],
  )
  // Closed sessions are set apart below the live ones (unless the filter asks for them).
  // The feed keeps closes coming all shift: the list shows the last hour's, as the listing does.
  const closed = state === 'live' ? base.filter(r => !r.live && (r.endTime ?? 0) >= now - 3600_000).sort((a, b) => (b.endTime ?? 0) - (a.endTime ?? 0)) : []
  const pages = Math.max(1, Math.ceil(shown.length / PAGE))
  const visible = shown.slice(page * PAGE, page * PAGE + PAGE)
  const current = visible[Math.min(selected, visible.length - 1)]
  const acknowledge = async (r: Row, reason: string) => {
    const res = await api(auth, 'PUT', `${ADMIN}/session/${r.sessionId}/attention/${reason}`)
    if (res.status === 200) floor.put({ ...r, attention: [...(r.attention ?? []).filter(f => f.reason !== reason), res.body] })
    setOutcome(`Acknowledge ${REASONS[reason] ?? reason} on ${r.sessionId.slice(0, 8)}: ${res.status === 200 ? 'done' : `refused (${res.status}) ${res.body?.message ?? ''}`}`)
  }
  const open = (r: Row) => navigate(`session/${r.sessionId}`)
  // The key handler reads what this render shows (effects run after paint: a key pressed in
  // between must not act on the rows of the render before).
  const latest = useRef({ visible, current })
  latest.current = { visible, current }
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const { visible, current } = latest.current
      if (e.ctrlKey || e.metaKey || e.altKey) return
      if (typing(e)) {
        if (e.key === 'Escape' || (e.key === 'Enter' && e.target === search.current)) (e.target as HTMLElement).blur()
        return
      }
      const n = visible.length
      if (e.key === 'j' || e.key === 'ArrowDown') setSelected(i => Math.min(n - 1, i + 1))
      else if (e.key === 'k' || e.key === 'ArrowUp') setSelected(i => Math.max(0, i - 1))
      else if ((e.key === 'Enter' || e.key === 'o') && current) open(current)
      else if (e.key === '/') search.current?.focus()
      else if (e.key === '?') setHelp(h => !h)
      else if (e.key === 'a' && current) {
        const flag = needingHuman(current, Date.now()).sort((x, y) => x.since - y.since)[0]
        if (flag) void acknowledge(current, flag.reason)
      } else return
      e.preventDefault()
    }
    addEventListener('keydown', onKey)
    return () => removeEventListener('keydown', onKey)
  }, [])
  useEffect(() => {
    document.querySelector('tr.selected')?.scrollIntoView({ block: 'nearest' })
  }, [selected])
  const crews = [...new Set(rows.map(r => r.crewId))].sort()
  const agents = [...new Set(rows.map(r => r.agentId))].sort()
  const liveCount = rows.filter(r => r.live).length
  return (
    <section aria-labelledby="sessions-h">
      <h2 id="sessions-h">Live sessions</h2>
      <Numbers auth={auth} rows={floor.rows} now={now} windowKey={windowKey} setWindow={w => setParam('window', w === '1h' ? '' : w)} />
      <div class="filters" role="search">
        <label class="grow">
          Search
          <input ref={search} type="search" value={q} placeholder="id prefix, customer name or address, agent" onInput={e => setParam('q', (e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Crew
          <select value={crew} onChange={e => setParam('crew', (e.target as HTMLSelectElement).value)}>
            <option value="">all</option>
            {crews.map(c => <option value={c}>{c}</option>)}
          </select>
        </label>
        <label>
          State
          <select value={state} onChange={e => setParam('state', (e.target as HTMLSelectElement).value)}>
            {STATES.map(s => <option value={s}>{s}</option>)}
          </select>
        </label>
        <label>
          Agent
          <select value={agent} onChange={e => setParam('agent', (e.target as HTMLSelectElement).value)}>
            <option value="">all</option>
            {agents.map(a => <option value={a}>{a}</option>)}
          </select>
        </label>
        <span class="status" aria-live="polite">{floor.status} · {liveCount} live sessions · {shown.length} shown</span>
        <button class="keys" onClick={() => setHelp(h => !h)} aria-expanded={help}>Shortcuts (?)</button>
      </div>
      {help && <Shortcuts onClose={() => setHelp(false)} />}
      {outcome && <p class="outcome" role="status">{outcome}</p>}
      <SessionTable rows={visible} now={now} selected={current?.sessionId} acknowledge={acknowledge} open={open} />
      {pages > 1 && (
        <nav class="pager" aria-label="Pages">
          <button disabled={page === 0} onClick={() => setPage(page - 1)}>Previous</button>
          <span>Page {page + 1} of {pages}</span>
          <button disabled={page + 1 >= pages} onClick={() => setPage(page + 1)}>Next</button>
        </nav>
      )}
      {closed.length > 0 && (
        <details class="closed-list" open>
          <summary>Recently closed ({closed.length}, last hour)</summary>
          <table class="sessions closed" aria-label="Recently closed sessions">
            <thead><tr><th>Session</th><th>State</th><th>End reason</th><th>Ended</th><th class="opt">Crew</th><th class="opt">Agent</th><th class="opt">Duration</th><th class="opt">Messages</th></tr></thead>
            <tbody>
              {closed.slice(0, 50).map(r => (
                <tr key={r.sessionId} data-session={r.sessionId}>
                  <td><a class="link" href={`/console/session/${r.sessionId}`} onClick={e => (e.preventDefault(), open(r))}>{r.sessionId.slice(0, 8)}</a>{r.customer?.name && <span class="customer"> {r.customer.name}</span>}</td>
                  <td><span class={`state ${r.state}`}>{r.state}</span></td>
                  <td class="end-reason">{r.endReason ?? ''}</td>
                  <td>{ago(now - (r.endTime ?? now))} ago</td>
                  <td class="opt">{r.crewId}</td>
                  <td class="opt">{r.agentId}</td>
                  <td class="opt">{ago(r.age)}</td>
                  <td class="opt">{r.messages}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </details>
      )}
    </section>
  )
}

function SessionTable({ rows, now, selected, acknowledge, open }: { rows: Row[]; now: number; selected?: string; acknowledge: (r: Row, reason: string) => void; open: (r: Row) => void }) {
  return (
    <table class="sessions" aria-label="Sessions">
      <thead>
        <tr><th>Session</th><th>State</th><th>Attention</th><th>Last activity</th><th class="opt">Crew</th><th class="opt">Agent</th><th class="opt">Waiting</th><th class="opt">Last message</th><th class="opt">Messages</th><th class="opt">Watching</th></tr>
      </thead>
      <tbody>
        {rows.map(r => {
          const flags = needingHuman(r, now)
          return (
            <tr key={r.sessionId} data-session={r.sessionId} aria-selected={selected === r.sessionId} class={`${r.live ? '' : 'closed'} ${flags.length ? 'attention' : ''} ${selected === r.sessionId ? 'selected' : ''}`}>
              <td>
                <a class="link" href={`/console/session/${r.sessionId}`} onClick={e => (e.preventDefault(), open(r))} aria-label={`Open session ${r.sessionId}`}>{r.sessionId.slice(0, 8)}</a>
                {r.customer?.name && <span class="customer"> {r.customer.name}</span>}
              </td>
              <td><span class={`state ${r.state}`}>{r.state}</span>{!r.live && r.endReason ? <span class="end-reason"> ({r.endReason})</span> : null}</td>
              <td class="flags">
                {flags.map(f => (
                  <span class="flag" data-reason={f.reason}>
                    {REASONS[f.reason] ?? f.reason}
                    {f.detail ? ` (${f.detail})` : ''} · {ago(now - f.since)}{' '}
                    <button onClick={() => void acknowledge(r, f.reason)} aria-label={`Acknowledge ${REASONS[f.reason] ?? f.reason} on session ${r.sessionId}`}>Acknowledge</button>
                  </span>
                ))}
              </td>
              <td>{ago(now - r.lastActivity)} ago</td>
              <td class="opt">{r.crewId}</td>
              <td class="opt">{r.agentId}</td>
              <td class="opt">{r.live && r.state !== 'paused' && r.awaitingReplySince ? ago(now - r.awaitingReplySince) : ''}</td>
              <td class="opt last">{r.lastMessage ? `${r.lastMessage.author}: ${r.lastMessage.text}` : ''}</td>
              <td class="opt">{r.messages}</td>
              <td class="opt watchers">{(r.watchers ?? []).join(', ')}</td>
            </tr>
          )
        })}
      </tbody>
    </table>
  )
}
