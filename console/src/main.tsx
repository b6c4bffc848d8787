// The operator console: sign-in, live sessions (attention and presence come with the APIs that
// carry them), one session with every administration operation, dialer batches, reports.
// Everything user-supplied is rendered as text (Preact escapes it); nothing is set as HTML.
import { render } from 'preact'
import { useEffect, useMemo, useRef, useState } from 'preact/hooks'
import uPlot from 'uplot'
import 'uplot/dist/uPlot.min.css'
import './style.css'
import { api, type Auth, clearAuth, loadAuth, saveAuth, sse } from './api'
import { Dialer } from './dialer'
import { SessionsDetail } from './sessions-detail'

const ADMIN = '/engine/api/administration'
const PAGE = 100

function SignIn({ onAuth }: { onAuth: (a: Auth) => void }) {
  const [key, setKey] = useState('')
  const [userId, setUserId] = useState('')
  const [error, setError] = useState('')
  const submit = async (e: Event) => {
    e.preventDefault()
    const auth = { key: key.trim(), userId: userId.trim() }
    const res = await api(auth, 'GET', `${ADMIN}/sessions?limit=1`)
    if (res.status === 401) return setError('Unknown API key')
    if (res.status === 400) return setError(res.body?.message ?? 'Invalid supervisor id')
    saveAuth(auth)
    onAuth(auth)
  }
  return (
    <form class="signin" onSubmit={submit}>
      <h1>Switchboard console</h1>
      <label>
        API key <input type="password" name="apikey" autocomplete="off" required value={key} onInput={e => setKey((e.target as HTMLInputElement).value)} />
      </label>
      <label>
        Supervisor id (UserId) <input name="userid" required maxLength={128} value={userId} onInput={e => setUserId((e.target as HTMLInputElement).value)} />
      </label>
      <button type="submit">Sign in</button>
      {error && <p role="alert" class="error">{error}</p>}
    </form>
  )
}

interface Row {
  sessionId: string
  crewId: string
  agentId: string
  state: string
  live: boolean
  startTime: number
  age: number
  messages: number
  lastActivity: number
  watchers?: string[]
  phase?: string
  lastMessage?: { author: string; text: string; at: number } | null
  awaitingReplySince?: number | null
  attention?: Flag[]
}

interface Flag {
  reason: string
  since: number
  detail?: string
  acknowledged: boolean
  acknowledgedBy?: string
}

const REASONS: Record<string, string> = {
  guardrail: 'Guardrail triggered',
  assistant_error: 'Assistant error',
  tool_result_awaited: 'Tool result awaited',
  human_requested: 'Asked for a person',
  no_reply: 'No reply',
}

/** Flags needing a human: those not acknowledged (the feed announces no_reply late, so it is also checked here). */
const needingHuman = (r: Row, now: number, noReplyMs = 30_000): Flag[] => {
  const flags = (r.attention ?? []).filter(f => !f.acknowledged)
  if (r.live && r.state !== 'paused' && r.awaitingReplySince && now - r.awaitingReplySince >= noReplyMs && !(r.attention ?? []).some(f => f.reason === 'no_reply')) {
    flags.push({ reason: 'no_reply', since: r.awaitingReplySince + noReplyMs, acknowledged: false })
  }
  return flags
}

const ago = (ms: number) => (ms < 60_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60_000)} min`)

function Sessions({ auth, open: openSession }: { auth: Auth; open: (id: string) => void }) {
  const [rows, setRows] = useState(new Map<string, Row>())
  const [crew, setCrew] = useState('')
  const [state, setState] = useState('')
  const [agent, setAgent] = useState('')
  const [status, setStatus] = useState('loading')
  const [page, setPage] = useState(0)
  const [, tick] = useState(0)
  useEffect(() => {
    let stop = () => {}
    let cancelled = false
    ;(async () => {
      const all = new Map<string, Row>()
      let cursor: string | undefined
      // The whole current floor, page by page (500 a page), then live changes from the feed.
      for (let i = 0; i < 20; i++) {
        const res = await api(auth, 'GET', `${ADMIN}/sessions?limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
        if (res.status !== 200) return setStatus(`Listing refused (${res.status}): ${res.body?.message ?? ''}`)
        for (const r of res.body.data as Row[]) all.set(r.sessionId, r)
        cursor = res.body.nextCursor
        if (!cursor) break
      }
      if (cancelled) return
      setRows(new Map(all))
      setStatus('live')
      stop = sse(auth, `${ADMIN}/sessions/feed`, (event, data) => {
        if (!event.startsWith('session.')) return
        // The feed's rows carry no presence: keep the watchers the listing gave.
        setRows(prev => new Map(prev).set(data.session.sessionId, { ...prev.get(data.session.sessionId), ...data.session }))
      })
    })()
    const timer = setInterval(() => tick(n => n + 1), 1000)
    return () => {
      cancelled = true
      stop()
      clearInterval(timer)
    }
  }, [auth])
  const shown = useMemo(
    () =>
      [...rows.values()]
        .filter(r => (!crew || r.crewId === crew) && (!agent || r.agentId === agent) && (!state || (state === 'live' ? r.live : r.state === state)))
        // Attention first (oldest flag first), then live, then newest.
        .sort((a, b) => {
          const fa = needingHuman(a, Date.now())
          const fb = needingHuman(b, Date.now())
          if (fa.length || fb.length) {
            if (!fa.length || !fb.length) return fb.length - fa.length
            return Math.min(...fa.map(f => f.since)) - Math.min(...fb.map(f => f.since))
          }
          return Number(b.live) - Number(a.live) || b.startTime - a.startTime
        }),
    // `tick` re-sorts every second: no_reply flags appear with time.
    [rows, crew, state, agent, Math.floor(Date.now() / 1000)],
  )
  const acknowledge = async (r: Row, reason: string) => {
    const res = await api(auth, 'PUT', `${ADMIN}/session/${r.sessionId}/attention/${reason}`)
    if (res.status === 200) setRows(prev => new Map(prev).set(r.sessionId, { ...r, attention: [...(r.attention ?? []).filter(f => f.reason !== reason), res.body] }))
    else setStatus(`Acknowledge refused (${res.status}): ${res.body?.message ?? ''}`)
  }
  const pages = Math.max(1, Math.ceil(shown.length / PAGE))
  const visible = shown.slice(page * PAGE, page * PAGE + PAGE)
  const now = Date.now()
  const crews = [...new Set([...rows.values()].map(r => r.crewId))]
  const agents = [...new Set([...rows.values()].map(r => r.agentId))]
  return (
    <section aria-labelledby="sessions-h">
      <h2 id="sessions-h">Live sessions</h2>
      <div class="filters">
        <label>
          Crew
          <select value={crew} onChange={e => (setCrew((e.target as HTMLSelectElement).value), setPage(0))}>
            <option value="">all</option>
            {crews.map(c => <option value={c}>{c}</option>)}
          </select>
        </label>
        <label>
          State
          <select value={state} onChange={e => (setState((e.target as HTMLSelectElement).value), setPage(0))}>
            <option value="">all</option>
            {['live', 'active', 'paused', 'completed', 'abandoned', 'transferred_to_human', 'error'].map(s => <option value={s}>{s}</option>)}
          </select>
        </label>
        <label>
          Agent
          <select value={agent} onChange={e => (setAgent((e.target as HTMLSelectElement).value), setPage(0))}>
            <option value="">all</option>
            {agents.map(a => <option value={a}>{a}</option>)}
          </select>
        </label>
        <span class="status" aria-live="polite">{status} · {shown.length} sessions</span>
      </div>
      <table class="sessions">
        <thead>
          <tr><th>Session</th><th>Attention</th><th>Crew</th><th>Agent</th><th>State</th><th>Age</th><th>Last activity</th><th>Last message</th><th>Messages</th><th>Watching</th></tr>
        </thead>
        <tbody>
          {visible.map(r => (
            <tr key={r.sessionId} data-session={r.sessionId} class={`${r.live ? '' : 'closed'} ${needingHuman(r, now).length ? 'attention' : ''}`}>
              <td><button class="link" onClick={() => openSession(r.sessionId)} aria-label={`Open session ${r.sessionId}`}>{r.sessionId.slice(0, 8)}</button></td>
              <td class="flags">
                {needingHuman(r, now).map(f => (
                  <span class="flag" data-reason={f.reason}>
                    {REASONS[f.reason] ?? f.reason}
                    {f.detail ? ` (${f.detail})` : ''} · {ago(now - f.since)}{' '}
                    <button onClick={() => void acknowledge(r, f.reason)} aria-label={`Acknowledge ${REASONS[f.reason] ?? f.reason} on session ${r.sessionId}`}>Acknowledge</button>
                  </span>
                ))}
              </td>
              <td>{r.crewId}</td>
              <td>{r.agentId}</td>
              <td><span class={`state ${r.state}`}>{r.state}</span></td>
              <td>{ago(r.live ? now - r.startTime : r.age)}</td>
              <td>{ago(now - r.lastActivity)} ago</td>
              <td class="last">{r.lastMessage ? `${r.lastMessage.author}: ${r.lastMessage.text}` : ''}</td>
              <td>{r.messages}</td>
              <td>{(r.watchers ?? []).join(', ')}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <nav class="pager" aria-label="Pages">
        <button disabled={page === 0} onClick={() => setPage(page - 1)}>Previous</button>
        <span>Page {page + 1} of {pages}</span>
        <button disabled={page + 1 >= pages} onClick={() => setPage(page + 1)}>Next</button>
      </nav>
    </section>
  )
}

const entryText = (e: any) => {
  const who = e.userId ? ` [${e.userId}]` : ''
  const text = e.text ?? e.message ?? (e.to ? `→ ${e.to}` : e.reason ?? '')
  return `${e.type}${who}: ${typeof text === 'string' ? text : JSON.stringify(text)}`
}

function Session({ auth, id, back }: { auth: Auth; id: string; back: () => void }) {
  const [entries, setEntries] = useState<any[]>([])
  const [snapshot, setSnapshot] = useState<any>()
  const [outcome, setOutcome] = useState('')
  const [text, setText] = useState('')
  const [target, setTarget] = useState('')
  const [tool, setTool] = useState('')
  const [toolArgs, setToolArgs] = useState('{}')
  const [correlation, setCorrelation] = useState('')
  const base = `${ADMIN}/session/${id}`
  const refresh = async () => {
    const h = await api(auth, 'GET', `${base}/history?limit=5000`)
    if (h.status === 200) setEntries(h.body.data ?? [])
    const s = await api(auth, 'GET', `${base}/snapshot`)
    if (s.status === 200) setSnapshot(s.body?.data?.snapshot)
  }
  useEffect(() => {
    void refresh()
    const timer = setInterval(() => void refresh(), 1000)
    // The watch stream: new history entries refresh at once, and it makes this supervisor's
    // presence visible to the others.
    const unwatch = sse(auth, `${base}/watch`, event => event === 'history' && void refresh())
    return () => {
      clearInterval(timer)
      unwatch()
    }
  }, [id])
  const act = async (name: string, method: string, path: string, body?: unknown) => {
    const res = await api(auth, method, path, body)
    setOutcome(`${name}: ${res.status < 300 ? 'done' : 'refused'} (${res.status})${res.status >= 300 ? ` ${res.body?.code ?? ''} ${res.body?.message ?? ''}` : res.body ? ` ${JSON.stringify(res.body)}` : ''}`)
    void refresh()
  }
  const agents: string[] = snapshot?.configuration?.agents ?? []
  const summary = snapshot?.configuration?.context?.ResumenConversacion
  const list = Array.isArray(entries) ? entries : []
  return (
    <section aria-labelledby="session-h">
      <button onClick={back}>← Sessions</button>
      <h2 id="session-h">Session {id}</h2>
      {snapshot && <p class="meta">State: <span class="session-state">{snapshot.state}</span> · agent <span class="session-agent">{snapshot.agentId}</span> · crew {snapshot.crewId}</p>}
      {summary && <p class="summary"><strong>ResumenConversacion:</strong> {String(summary)}</p>}
      <div class="session-grid">
        <ol class="transcript" aria-label="Transcript" aria-live="polite">
          {list.map(e => <li class={`entry ${String(e.type).replace(/\W/g, '-')}`}>{entryText(e)}</li>)}
        </ol>
        <div class="actions">
          <label>Text <textarea value={text} onInput={e => setText((e.target as HTMLTextAreaElement).value)} /></label>
          <div class="row">
            <button onClick={() => act('Whisper', 'PUT', `${base}/whisper`, { text })}>Whisper</button>
            <button onClick={() => act('Impersonate', 'PUT', `${base}/impersonate`, { text })}>Impersonate</button>
            <button onClick={() => act('Append', 'PUT', `${base}/append`, { context: [{ author: 'system', text }] })}>Append</button>
            <button onClick={() => act('Attend', 'PUT', `${base}/attend`)}>Attend</button>
          </div>
          <label>
            Transfer to
            {agents.length ? (
              <select value={target} onChange={e => setTarget((e.target as HTMLSelectElement).value)}>
                <option value="">choose an agent</option>
                {agents.map(a => <option value={a}>{a}</option>)}
              </select>
            ) : (
              <input value={target} onInput={e => setTarget((e.target as HTMLInputElement).value)} />
            )}
          </label>
          <button onClick={() => act('Transfer', 'PUT', `${base}/transfer`, { target })}>Transfer</button>
          <div class="row">
            <button onClick={() => act('Pause', 'PUT', `${base}/pause`)}>Pause</button>
            <button onClick={() => act('Resume', 'PUT', `${base}/resume`)}>Resume</button>
          </div>
          <label>Tool <input value={tool} onInput={e => setTool((e.target as HTMLInputElement).value)} /></label>
          <label>Arguments (JSON) <input value={toolArgs} onInput={e => setToolArgs((e.target as HTMLInputElement).value)} /></label>
          <button
            onClick={() => {
              try {
                void act('Tool inject', 'PUT', `${base}/toolinject`, { tool, args: JSON.parse(toolArgs) })
              } catch {
                setOutcome('Tool inject: the arguments are not JSON')
              }
            }}
          >
            Inject tool
          </button>
          <label>Correlation id <input value={correlation} onInput={e => setCorrelation((e.target as HTMLInputElement).value)} /></label>
          <button
            onClick={() => {
              try {
                void act('External result', 'PUT', `${base}/external/${encodeURIComponent(correlation)}`, JSON.parse(toolArgs))
              } catch {
                setOutcome('External result: the result (arguments field) is not JSON')
              }
            }}
          >
            Deliver external result
          </button>
          <button class="danger" onClick={() => confirm('Destroy this session?') && act('Destroy', 'DELETE', base)}>Destroy</button>
          <p role="status" class="outcome">{outcome}</p>
        </div>
      </div>
      <details>
        <summary>Snapshot</summary>
        <pre>{JSON.stringify(snapshot, null, 2)}</pre>
      </details>
    </section>
  )
}

function Reports({ auth }: { auth: Auth }) {
  const [crew, setCrew] = useState('demo')
  const [group, setGroup] = useState('hour')
  const [tz, setTz] = useState(Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC')
  const [report, setReport] = useState('sessions-overview')
  const [error, setError] = useState('')
  const chart = useRef<HTMLDivElement>(null)
  const plot = useRef<uPlot>()
  const run = async () => {
    const end = Date.now()
    const start = end - 24 * 3600_000
    const q = `crew_id=${encodeURIComponent(crew)}&start_ts=${start}&end_ts=${end}&page=0&pageSize=500&timeZone=${encodeURIComponent(tz)}&groupByTime=${group}`
    const res = await api(auth, 'GET', `/engine/v1/api/reports/execute-report/${encodeURIComponent(report)}?${q}`)
    if (res.status !== 200) return setError(`Report refused (${res.status}): ${res.body?.message ?? ''}`)
    const rows: any[] = res.body.data
    setError(rows.length ? '' : 'No data in the last 24 hours')
    const names = [...new Set(rows.flatMap(r => Object.keys(r.metrics ?? {})))]
    const xs = rows.map(r => Date.parse(r.date) / 1000)
    const data = [xs, ...names.map(n => rows.map(r => r.metrics[n] ?? null))] as uPlot.AlignedData
    plot.current?.destroy()
    if (chart.current) {
      const colors = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2']
      plot.current = new uPlot(
        { width: Math.min(900, chart.current.clientWidth || 600), height: 300, series: [{}, ...names.map((n, i) => ({ label: n, stroke: colors[i % colors.length] }))] },
        data,
        chart.current,
      )
    }
  }
  useEffect(() => void run(), [])
  return (
    <section aria-labelledby="reports-h">
      <h2 id="reports-h">Reports</h2>
      <div class="filters">
        <label>Report <input value={report} onInput={e => setReport((e.target as HTMLInputElement).value)} /></label>
        <label>Crew <input value={crew} onInput={e => setCrew((e.target as HTMLInputElement).value)} /></label>
        <label>
          Group by
          <select value={group} onChange={e => setGroup((e.target as HTMLSelectElement).value)}>
            {['hour', 'day', 'week', 'month'].map(g => <option value={g}>{g}</option>)}
          </select>
        </label>
        <label>Time zone <input value={tz} onInput={e => setTz((e.target as HTMLInputElement).value)} /></label>
        <button onClick={() => void run()}>Run</button>
      </div>
      {error && <p role="alert">{error}</p>}
      <div ref={chart} class="chart" aria-label="Report chart" />
      <SessionsDetail auth={auth} crew={crew} />
    </section>
  )
}

function App() {
  const [auth, setAuth] = useState(loadAuth())
  const [view, setView] = useState<'sessions' | 'dialer' | 'reports'>('sessions')
  const [session, setSession] = useState<string>()
  if (!auth) return <SignIn onAuth={setAuth} />
  return (
    <div class="app">
      <header>
        <strong>Switchboard</strong>
        <nav aria-label="Views">
          {(['sessions', 'dialer', 'reports'] as const).map(v => (
            <button aria-current={view === v && !session ? 'page' : undefined} onClick={() => (setView(v), setSession(undefined))}>{v}</button>
          ))}
        </nav>
        <span class="who">{auth.userId}</span>
        <button onClick={() => (clearAuth(), setAuth(undefined))}>Sign out</button>
      </header>
      <main>
        {session ? <Session auth={auth} id={session} back={() => setSession(undefined)} /> : view === 'sessions' ? <Sessions auth={auth} open={setSession} /> : view === 'dialer' ? <Dialer auth={auth} /> : <Reports auth={auth} />}
      </main>
    </div>
  )
}

render(<App />, document.getElementById('app')!)
