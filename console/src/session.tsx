// One session as a supervisor follows it: the transcript from the supervisor watch stream
// (GET …/session/{id}/watch: history entries as written, the assistant's reply as it streams,
// presence as it changes; no polling), its state and who watches it, and one composer per
// action. Actions that reach the customer or end something ask first, naming the consequence;
// buttons are enabled only when the session's state allows them. Once the session has ended
// (closed on the stream, or gone: 404) the page says so with the reason and stops asking.
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks'
import { api, type Auth, sse } from './api'
import { ADMIN, ago, needingHuman, REASONS, type Floor } from './floor'
import { navigate } from './router'

interface Entry {
  seq: number
  at: string
  type: string
  [k: string]: any
}

interface Pending {
  action: string
  consequence: string
  run: () => Promise<unknown>
}

const time = (iso: string | number) => new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' })
const text = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v))

/** What a system entry says, in words. */
function systemLine(e: Entry): string | null {
  const by = e.userId ? ` by ${e.userId}` : ''
  switch (e.type) {
    case 'session.created': return `Session opened with agent ${e.agentId}${e.arguments && Object.keys(e.arguments).length ? ` · ${Object.entries(e.arguments).map(([k, v]) => `${k}: ${text(v)}`).join(', ')}` : ''}`
    case 'turn.started': return null
    case 'session.paused': return `Paused${by}${e.reason ? ` (${e.reason})` : ''}`
    case 'session.resumed': return `Resumed${by}`
    case 'agent.transferred': return `Transferred from ${e.from} to ${e.to}${by}${e.reason ? ` (${e.reason})` : ''}`
    case 'admin.attend': return `Asked the assistant to reply now${by}`
    case 'guardrail.triggered': return `Guardrail ${e.guardrail} redacted the ${e.side === 'user' ? "customer's" : "assistant's"} message`
    case 'assistant.error': return `The assistant could not reply: ${text(e.error)}`
    case 'session.destroyed': return `Ended: ${e.reason ?? 'destroyed'}${by}`
    case 'session.restored': return 'Session restored on another node'
    case 'context.overridden': return `Context replaced${by} (${e.count} messages)`
    default: return `${e.type}${by}`
  }
}

function Turn({ e }: { e: Entry }) {
  const stamp = <time dateTime={e.at}>{time(e.at)}</time>
  switch (e.type) {
    case 'message.user':
      return <li class="turn customer" data-seq={e.seq}><span class="who">Customer</span> {stamp}<p>{e.text}</p></li>
    case 'message.assistant':
      return e.source === 'impersonated' ? (
        <li class="turn assistant impersonated" data-seq={e.seq}><span class="who">{e.userId} as the assistant</span> {stamp}<p>{e.text}</p></li>
      ) : (
        <li class="turn assistant" data-seq={e.seq}><span class="who">Assistant · {e.agentId}</span> {stamp}<p>{e.text}</p></li>
      )
    case 'message.whisper':
      return <li class="turn whisper" data-seq={e.seq}><span class="who">Whisper from {e.userId}</span> {stamp}<p>{e.text}</p></li>
    case 'context.appended':
      return <li class="turn appended" data-seq={e.seq}><span class="who">Context appended by {e.userId}</span> {stamp}{(e.messages ?? []).map((m: any) => <p>{m.author}: {m.text}</p>)}</li>
    case 'tool.call':
      return <li class="turn tool" data-seq={e.seq}><span class="who">Tool call · {e.tool}</span> {stamp}<p><code>{text(e.args ?? e.arguments ?? {})}</code></p></li>
    case 'tool.result':
      return <li class="turn tool" data-seq={e.seq}><span class="who">Tool result · {e.tool}{e.userId ? ` (injected by ${e.userId})` : ''}</span> {stamp}<p><code>{text(e.result)}</code></p></li>
    default: {
      const line = systemLine(e)
      return line === null ? null : <li class="system" data-seq={e.seq}>{stamp} {line}</li>
    }
  }
}

export function Session({ auth, id, floor, now }: { auth: Auth; id: string; floor: Floor; now: number }) {
  const [entries, setEntries] = useState<Entry[]>([])
  const [snapshot, setSnapshot] = useState<any>()
  const [streamState, setStreamState] = useState<string>()
  const [ended, setEnded] = useState<{ reason: string } | null>(null)
  const [writing, setWriting] = useState<{ agentId?: string; text: string; messageId?: string } | null>(null)
  const [watchers, setWatchers] = useState<string[]>([])
  const [outcome, setOutcome] = useState('')
  const [pending, setPending] = useState<Pending | null>(null)
  const [busy, setBusy] = useState(false)
  const base = `${ADMIN}/session/${id}`
  const row = floor.rows.get(id)
  const loadSnapshot = async () => {
    const s = await api(auth, 'GET', `${base}/snapshot`)
    if (s.status === 200) setSnapshot(s.body?.data?.snapshot)
    else if (s.status === 404) setEnded(prev => prev ?? { reason: 'gone' })
  }
  useEffect(() => {
    setEntries([])
    setEnded(null)
    setWriting(null)
    setStreamState(undefined)
    void loadSnapshot()
    const seen = new Set<number>()
    let stop = () => {}
    stop = sse(
      auth,
      `${base}/watch`,
      (event, data) => {
        if (event === 'watch.ready' || event === 'presence') setWatchers(data.watchers ?? [])
        else if (event === 'history') {
          if (seen.has(data.seq)) return
          seen.add(data.seq)
          setEntries(prev => [...prev, data])
          if (data.type === 'message.assistant') setWriting(w => (w && (!w.messageId || w.messageId === data.messageId) ? null : w))
          if (data.type === 'agent.transferred') void loadSnapshot()
        } else if (event === 'channel') {
          if (data.kind === 'closed') setEnded({ reason: data.reason ?? 'closed' })
          const name = data.name as string | undefined
          const d = data.data ?? {}
          if (name === 'crew.status.writing') setWriting({ agentId: d.agentId, text: '' })
          else if (name === 'assistant.response') setWriting(w => ({ agentId: w?.agentId, messageId: d.messageId, text: (w && w.messageId === d.messageId ? w.text : '') + (d.delta ?? '') }))
          else if (name === 'crew.status.waiting') setWriting(null)
          else if (name === 'session.paused') setStreamState('paused')
          else if (name === 'session.resumed') setStreamState('active')
          else if (name === 'session.closed') setEnded({ reason: d.reason ?? 'closed' })
        } else if (event === 'session.gone') {
          setEnded(prev => prev ?? { reason: 'gone' })
          setWriting(null)
          stop()
        }
      },
      {
        // 404: the session is gone (destroyed, or never this account's): stop for good.
        onRefused: status => {
          if (status === 404) setEnded(prev => prev ?? { reason: 'gone' })
          return status === 404 || status === 401 || status === 403
        },
      },
    )
    return () => stop()
  }, [id])

  // The floor knows the end reason (the listing keeps closed sessions for an hour).
  const closedRow = row && !row.live ? row : undefined
  const isEnded = !!ended || !!closedRow
  const endReason = closedRow?.endReason ?? (ended?.reason !== 'gone' ? ended?.reason : undefined)
  const state = isEnded ? closedRow?.state ?? 'ended' : streamState ?? snapshot?.state ?? row?.state ?? 'loading'
  const agentId = snapshot?.agentId ?? row?.agentId
  const agents: string[] = snapshot?.configuration?.agents ?? row?.agents ?? []
  const summary = snapshot?.configuration?.context?.ResumenConversacion
  const live = !isEnded && (state === 'active' || state === 'paused')

  const act = async (name: string, method: string, path: string, body?: unknown) => {
    setBusy(true)
    const res = await api(auth, method, path, body)
    setBusy(false)
    const ok = res.status < 300
    setOutcome(`${name}: ${ok ? 'done' : 'refused'} (${res.status})${ok ? '' : ` ${res.body?.code ?? ''} ${res.body?.message ?? ''}`}`)
    if (ok && name === 'Pause') setStreamState('paused')
    if (ok && name === 'Resume') setStreamState('active')
    if (ok && name === 'Destroy') setEnded({ reason: 'admin_destroyed' })
    if (ok && name !== 'Destroy') void loadSnapshot()
    return ok
  }
  const confirmFirst = (p: Pending) => setPending(p)

  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement
      if (e.key === 'Escape' && pending) return setPending(null)
      if (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT') return
      if (e.key === 'Escape') navigate('sessions')
    }
    addEventListener('keydown', onKey)
    return () => removeEventListener('keydown', onKey)
  })

  const flags = row ? needingHuman(row, now) : []
  const others = watchers.filter(w => w !== auth.userId)
  return (
    <section aria-labelledby="session-h" class="session-page">
      <a class="back" href="/console/sessions" onClick={e => (e.preventDefault(), history.length > 1 ? history.back() : navigate('sessions'))}>← Sessions</a>
      <h2 id="session-h">Session {id}</h2>
      <p class="meta">
        State: <span class={`session-state state ${state}`}>{state}</span>
        {agentId && <> · agent <span class="session-agent">{agentId}</span></>}
        {(snapshot?.crewId ?? row?.crewId) && <> · crew {snapshot?.crewId ?? row?.crewId}</>}
        {row?.customer?.name && <> · customer <span class="customer">{row.customer.name}</span></>}
        {row?.customer?.address && <> ({row.customer.address})</>}
      </p>
      <p class="presence" aria-live="polite">
        Watching: <span class="session-watchers">{watchers.length ? watchers.map(w => (w === auth.userId ? `${w} (you)` : w)).join(', ') : 'nobody'}</span>
        {others.length > 0 && <span class="others"> · {others.length} other supervisor{others.length > 1 ? 's' : ''} here</span>}
      </p>
      {flags.map(f => <p class="flag" data-reason={f.reason}>{REASONS[f.reason] ?? f.reason}{f.detail ? ` (${f.detail})` : ''} · {ago(now - f.since)}</p>)}
      {isEnded && (
        <p class="ended" role="status">
          This session has ended{endReason ? `: ${endReason}` : ''}{closedRow?.endTime ? ` · ${ago(now - closedRow.endTime)} ago` : ''}. Nothing more can be done here.
        </p>
      )}
      {summary && <p class="summary"><strong>ResumenConversacion:</strong> {String(summary)}</p>}
      <div class="session-grid">
        <Transcript entries={entries} writing={writing} />
        <div class="actions">
          {pending && (
            <div class="confirm" role="alertdialog" aria-labelledby="confirm-h" aria-describedby="confirm-d">
              <h3 id="confirm-h">{pending.action}?</h3>
              <p id="confirm-d">{pending.consequence}</p>
              <button class="danger" autoFocus onClick={async () => { const p = pending; setPending(null); await p.run() }}>Yes, {pending.action.toLowerCase()}</button>{' '}
              <button onClick={() => setPending(null)}>Cancel</button>
            </div>
          )}
          <Composer label="Whisper to the assistant" button="Whisper" hint="Only the assistant reads it; the customer never sees it." disabled={!live || busy}
            send={t => act('Whisper', 'PUT', `${base}/whisper`, { text: t })} />
          <Composer label="Reply as the assistant" button="Impersonate" hint="Sent to the customer at once, in the assistant's name." disabled={!live || busy}
            send={t => new Promise<boolean>(resolve => confirmFirst({ action: 'Impersonate', consequence: `The customer receives, as the assistant's reply: “${t}”`, run: async () => resolve(await act('Impersonate', 'PUT', `${base}/impersonate`, { text: t })) }))} />
          <Composer label="Append to the context" button="Append" hint="A system note in the assistant's context; nobody is messaged." disabled={!live || busy}
            send={t => act('Append', 'PUT', `${base}/append`, { context: [{ author: 'system', text: t }] })} />
          <div class="composer">
            <button disabled={state !== 'active' || busy} onClick={() => void act('Attend', 'PUT', `${base}/attend`)}>Attend</button>
            <span class="hint">The assistant replies now, out of turn.</span>
          </div>
          <TransferBox agents={agents} current={agentId} disabled={!live || busy}
            transfer={target => confirmFirst({ action: 'Transfer', consequence: `Agent ${target} takes the conversation from ${agentId}; ${agentId} stops answering.`, run: () => act('Transfer', 'PUT', `${base}/transfer`, { target }) })} />
          <div class="row">
            <button disabled={state !== 'active' || busy} onClick={() => void act('Pause', 'PUT', `${base}/pause`)}>Pause</button>
            <button disabled={state !== 'paused' || busy} onClick={() => void act('Resume', 'PUT', `${base}/resume`)}>Resume</button>
            <button class="danger" disabled={!live || busy}
              onClick={() => confirmFirst({ action: 'Destroy', consequence: "The session ends now for the customer (their stream closes) and it cannot be reopened; its history is no longer served.", run: () => act('Destroy', 'DELETE', base) })}>
              Destroy
            </button>
          </div>
          <Advanced base={base} disabled={!live || busy} act={act} setOutcome={setOutcome} />
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

/** One text box for one action: emptied once the action is done, never shared with another. */
function Composer({ label, button, hint, disabled, send }: { label: string; button: string; hint: string; disabled: boolean; send: (text: string) => Promise<boolean> }) {
  const [value, setValue] = useState('')
  return (
    <form class="composer" onSubmit={async e => {
      e.preventDefault()
      if (value.trim() && (await send(value.trim()))) setValue('')
    }}>
      <label>{label} <textarea rows={2} value={value} disabled={disabled} onInput={e => setValue((e.target as HTMLTextAreaElement).value)}
        onKeyDown={e => e.key === 'Enter' && (e.ctrlKey || e.metaKey) && (e.currentTarget.form as HTMLFormElement).requestSubmit()} /></label>
      <button type="submit" disabled={disabled || !value.trim()}>{button}</button>
      <span class="hint">{hint}</span>
    </form>
  )
}

function TransferBox({ agents, current, disabled, transfer }: { agents: string[]; current?: string; disabled: boolean; transfer: (target: string) => void }) {
  const [target, setTarget] = useState('')
  const choices = agents.filter(a => a !== current)
  return (
    <div class="composer">
      <label>
        Transfer to
        <select value={target} disabled={disabled} onChange={e => setTarget((e.target as HTMLSelectElement).value)}>
          <option value="">choose an agent</option>
          {choices.map(a => <option value={a}>{a}</option>)}
        </select>
      </label>
      <button disabled={disabled || !target} onClick={() => (transfer(target), setTarget(''))}>Transfer</button>
    </div>
  )
}

/** What only an integrator needs: a tool run by hand, an external tool's result. */
function Advanced({ base, disabled, act, setOutcome }: { base: string; disabled: boolean; act: (n: string, m: string, p: string, b?: unknown) => Promise<boolean>; setOutcome: (s: string) => void }) {
  const [tool, setTool] = useState('')
  const [toolArgs, setToolArgs] = useState('{}')
  const [correlation, setCorrelation] = useState('')
  const [result, setResult] = useState('{}')
  const json = (raw: string, what: string) => {
    try {
      return { value: JSON.parse(raw) }
    } catch {
      setOutcome(`${what}: not JSON`)
      return undefined
    }
  }
  return (
    <details class="advanced">
      <summary>Advanced (integrators)</summary>
      <label>Tool <input value={tool} onInput={e => setTool((e.target as HTMLInputElement).value)} /></label>
      <label>Arguments (JSON) <input value={toolArgs} onInput={e => setToolArgs((e.target as HTMLInputElement).value)} /></label>
      <button disabled={disabled || !tool} onClick={() => { const a = json(toolArgs, 'Tool inject'); if (a) void act('Tool inject', 'PUT', `${base}/toolinject`, { tool, args: a.value }) }}>Inject tool</button>
      <label>Correlation id <input value={correlation} onInput={e => setCorrelation((e.target as HTMLInputElement).value)} /></label>
      <label>Result (JSON) <input value={result} onInput={e => setResult((e.target as HTMLInputElement).value)} /></label>
      <button disabled={disabled || !correlation} onClick={() => { const r = json(result, 'External result'); if (r) void act('External result', 'PUT', `${base}/external/${encodeURIComponent(correlation)}`, r.value) }}>Deliver external result</button>
    </details>
  )
}

/** Follows the newest entry unless the supervisor has scrolled up; then offers a jump back. */
function Transcript({ entries, writing }: { entries: Entry[]; writing: { agentId?: string; text: string } | null }) {
  const box = useRef<HTMLOListElement>(null)
  const [follow, setFollow] = useState(true)
  const [unseen, setUnseen] = useState(0)
  const count = useRef(0)
  useLayoutEffect(() => {
    const el = box.current
    if (!el) return
    const added = entries.length - count.current
    count.current = entries.length
    if (follow) el.scrollTop = el.scrollHeight
    else if (added > 0) setUnseen(n => n + added)
  }, [entries, writing?.text, follow])
  const onScroll = () => {
    const el = box.current!
    const atBottom = el.scrollHeight - el.scrollTop - el.clientHeight < 40
    if (atBottom !== follow) setFollow(atBottom)
    if (atBottom) setUnseen(0)
  }
  return (
    <div class="transcript-wrap">
      <ol class="transcript" ref={box} onScroll={onScroll} aria-label="Transcript" aria-live="polite" data-following={follow}>
        {entries.map(e => <Turn key={e.seq} e={e} />)}
        {writing && (
          <li class="turn assistant writing" aria-label="The assistant is writing">
            <span class="who">Assistant{writing.agentId ? ` · ${writing.agentId}` : ''}</span> <span class="typing">writing…</span>
            {writing.text && <p>{writing.text}</p>}
          </li>
        )}
      </ol>
      {!follow && (
        <button class="jump" onClick={() => { setFollow(true); setUnseen(0) }}>
          ↓ {unseen ? `${unseen} new` : 'Newest'}
        </button>
      )}
    </div>
  )
}
