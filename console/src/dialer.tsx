// The dialer view: batches with their progress and lifecycle buttons, one batch's contacts (with
// why each is or is not being dialed), attempts and log, CSV import through the signed-upload
// flow with upload and import progress, and the account's blocked addresses. Every call is a
// public /dialer/v1 call; everything user-supplied is rendered as text.
import { useEffect, useState } from 'preact/hooks'
import { api, type Auth } from './api'

const DIALER = '/dialer/v1'
const when = (iso?: string | null) => (iso ? new Date(iso).toLocaleString() : '')

interface Progress {
  pending: number
  inProgress: number
  done: number
  cancelled: number
  byOutcome: Record<string, number>
}

function ProgressBars({ name, p }: { name: string; p?: Progress }) {
  if (!p) return null
  const total = p.pending + p.inProgress + p.done + p.cancelled || 1
  const outcomes = Object.entries(p.byOutcome ?? {}).map(([o, n]) => `${o} ${n}`).join(', ')
  return (
    <div class="progress">
      <progress max={total} value={p.done + p.cancelled} aria-label={`Done of ${name}`} />
      <span>
        pending {p.pending} · in progress {p.inProgress} · done {p.done}
        {outcomes ? ` (${outcomes})` : ''}
        {p.cancelled ? ` · cancelled ${p.cancelled}` : ''}
      </span>
    </div>
  )
}

/** Which batch statuses each move is accepted from (dialer/batches.ts MOVES): other buttons are off. */
const ALLOWED: Record<'start' | 'stop' | 'archive' | 'delete', string[]> = {
  start: ['created', 'stopped', 'completed'],
  stop: ['running'],
  archive: ['created', 'stopped', 'completed'],
  delete: ['created', 'stopped', 'completed', 'archived'],
}

export function Dialer({ auth }: { auth: Auth }) {
  const [batches, setBatches] = useState<any[]>([])
  const [error, setError] = useState('')
  const [outcome, setOutcome] = useState('')
  const [selected, setSelected] = useState<string>()
  const [refresh, setRefresh] = useState(0)
  const [pending, setPending] = useState<any>()
  useEffect(() => {
    let cancelled = false
    const load = async () => {
      const res = await api(auth, 'GET', `${DIALER}/batches?limit=20`)
      if (res.status === 403) return setError('This key has no dialer role.')
      if (res.status !== 200) return setError(`Batches refused (${res.status})`)
      // The list has no progress: each batch of the page is read once (20 reads a refresh).
      const detailed = await Promise.all((res.body.data as any[]).map(async b => (await api(auth, 'GET', `${DIALER}/batches/${b.batchId}`)).body ?? b))
      if (!cancelled) setBatches(detailed)
    }
    void load()
    const timer = setInterval(() => void load(), 2000)
    return () => {
      cancelled = true
      clearInterval(timer)
    }
  }, [auth, refresh])
  const lifecycle = async (b: any, action: 'start' | 'stop' | 'archive' | 'delete') => {
    const res = action === 'delete' ? await api(auth, 'DELETE', `${DIALER}/batches/${b.batchId}`) : await api(auth, 'POST', `${DIALER}/batches/${b.batchId}/${action}`)
    setOutcome(`${action} ${b.name}: ${res.status < 300 ? 'done' : 'refused'} (${res.status})${res.status >= 300 ? ` ${res.body?.code ?? ''} ${res.body?.message ?? ''}` : ''}`)
    setRefresh(n => n + 1)
  }
  if (error) return <section aria-labelledby="dialer-h"><h2 id="dialer-h">Dialer</h2><p role="alert">{error}</p></section>
  return (
    <section aria-labelledby="dialer-h">
      <h2 id="dialer-h">Dialer batches</h2>
      <p class="outcome" aria-live="polite">{outcome}</p>
      {pending && (
        <div class="confirm" role="alertdialog" aria-labelledby="confirm-batch-h" aria-describedby="confirm-batch-d">
          <h3 id="confirm-batch-h">Delete batch {pending.name}?</h3>
          <p id="confirm-batch-d">
            The batch and its {pending.progress ? pending.progress.pending + pending.progress.inProgress + pending.progress.done + pending.progress.cancelled : ''} contacts are deleted: nobody more is dialed from it and it cannot be started again.
          </p>
          <button class="danger" autoFocus onClick={() => { const b = pending; setPending(undefined); void lifecycle(b, 'delete') }}>Yes, delete</button>{' '}
          <button onClick={() => setPending(undefined)}>Cancel</button>
        </div>
      )}
      <table class="batches">
        <thead><tr><th>Batch</th><th>Channel</th><th>Status</th><th>Import</th><th>Progress</th><th>Actions</th></tr></thead>
        <tbody>
          {batches.map(b => (
            <tr key={b.batchId} data-batch={b.batchId}>
              <td><button class="link" onClick={() => setSelected(b.batchId)} aria-label={`Open batch ${b.name}`}>{b.name}</button></td>
              <td>{b.channel}</td>
              <td class="batch-status">{b.status}</td>
              <td>{b.source === 'csv' ? `${b.uploadStatus} ${b.uploadProgress}%${b.importErrorCount ? `, ${b.importErrorCount} row errors` : ''}` : ''}</td>
              <td><ProgressBars name={b.name} p={b.progress} /></td>
              <td class="actions">
                {(['start', 'stop', 'archive', 'delete'] as const).map(a => (
                  <button disabled={!ALLOWED[a].includes(b.status)} onClick={() => (a === 'delete' ? setPending(b) : void lifecycle(b, a))} aria-label={`${a} batch ${b.name}`}>{a}</button>
                ))}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <CsvImport auth={auth} onCreated={id => (setSelected(id), setRefresh(n => n + 1))} />
      {selected && <Batch auth={auth} id={selected} key={selected} />}
      <Blocked auth={auth} />
    </section>
  )
}

function Batch({ auth, id }: { auth: Auth; id: string }) {
  const [contacts, setContacts] = useState<any[]>([])
  const [attempts, setAttempts] = useState<any[]>([])
  const [log, setLog] = useState<any[]>([])
  const [rowErrors, setRowErrors] = useState<any[]>([])
  const [why, setWhy] = useState<Record<string, string>>({})
  const [offset, setOffset] = useState(0)
  useEffect(() => {
    const load = async () => {
      const [c, a, l, e] = await Promise.all([
        api(auth, 'GET', `${DIALER}/batches/${id}/contacts?limit=25&offset=${offset}`),
        api(auth, 'GET', `${DIALER}/batches/${id}/attempts?limit=25`),
        api(auth, 'GET', `${DIALER}/batches/${id}/logs?limit=25`),
        api(auth, 'GET', `${DIALER}/batches/${id}/import-errors?limit=25`),
      ])
      if (c.status === 200) setContacts(c.body.data)
      if (a.status === 200) setAttempts(a.body.data)
      if (l.status === 200) setLog(l.body.data)
      if (e.status === 200) setRowErrors(e.body.data)
    }
    void load()
    const timer = setInterval(() => void load(), 2000)
    return () => clearInterval(timer)
  }, [id, offset])
  const explain = async (contactId: string) => {
    const res = await api(auth, 'GET', `${DIALER}/batches/${id}/contacts/${contactId}`)
    const d = res.body?.dialability
    const text = res.status !== 200 ? `refused (${res.status})` : d?.dialable ? `dialable now on ${d.address ?? '-'}` : `${d?.reason ?? res.body?.doneReason ?? 'not dialable'}${d?.nextEligibleAt ? `, next ${when(d.nextEligibleAt)}` : ''}`
    setWhy(prev => ({ ...prev, [contactId]: text }))
  }
  return (
    <div class="batch-detail" aria-label="Batch detail">
      <h3>Contacts</h3>
      <table>
        <thead><tr><th>Identifier</th><th>Name</th><th>State</th><th>Attempts</th><th>Next attempt</th><th>Why (not) dialed</th></tr></thead>
        <tbody>
          {contacts.map(c => (
            <tr data-contact={c.contactId}>
              <td>{c.identifier}</td>
              <td>{c.name}</td>
              <td>{c.state}</td>
              <td>{c.attempts}</td>
              <td>{when(c.nextAttemptAt)}</td>
              <td>{why[c.contactId] ?? <button onClick={() => void explain(c.contactId)} aria-label={`Why is ${c.identifier} (not) dialed`}>Why?</button>}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <nav class="pager" aria-label="Contact pages">
        <button disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - 25))}>Previous contacts</button>
        <button disabled={contacts.length < 25} onClick={() => setOffset(offset + 25)}>Next contacts</button>
      </nav>
      {rowErrors.length > 0 && (
        <>
          <h3>Import errors</h3>
          <ul class="row-errors">{rowErrors.map(e => <li>row {e.row}: {e.field} {e.code} — {e.reason}</li>)}</ul>
        </>
      )}
      <h3>Attempts</h3>
      <ul class="attempts">{attempts.map(a => <li>{when(a.startedAt)} {a.identifier} → {a.address}: {a.outcome ?? 'in flight'}{a.detail ? ` (${a.detail})` : ''}</li>)}</ul>
      <h3>Batch log</h3>
      <ul class="batch-log">{log.map(r => <li>{when(r.createdAt)} {r.operation} by {r.user?.name ?? r.performedBy}</li>)}</ul>
    </div>
  )
}

/** Signed-upload CSV import: upload URL, PUT with progress, batch creation, then the import's own progress. */
function CsvImport({ auth, onCreated }: { auth: Auth; onCreated: (batchId: string) => void }) {
  const [file, setFile] = useState<File>()
  const [name, setName] = useState('')
  const [channel, setChannel] = useState('phone')
  const [mapping, setMapping] = useState({ identifier: 'id', name: 'name', phone: 'phone' })
  const [uploaded, setUploaded] = useState(0)
  const [state, setState] = useState('')
  const submit = async (e: Event) => {
    e.preventDefault()
    if (!file) return
    setState('requesting an upload URL')
    const url = await api(auth, 'POST', `${DIALER}/batches/upload-url`, { fileName: file.name, fileType: 'text/csv' })
    if (url.status !== 201) return setState(`upload URL refused (${url.status}): ${url.body?.message ?? ''}`)
    const put = await new Promise<number>(resolve => {
      const xhr = new XMLHttpRequest()
      // The signed path and query on this page's own origin: the URL's origin (PUBLIC_BASE_URL, or
      // the listener's address) need not be the one the console was loaded from.
      xhr.open('PUT', `${DIALER}/uploads/${url.body.tempCsvKey}${new URL(url.body.uploadUrl).search}`)
      xhr.setRequestHeader('Content-Type', 'text/csv')
      xhr.upload.onprogress = p => p.lengthComputable && setUploaded(Math.round((100 * p.loaded) / p.total))
      xhr.onload = () => resolve(xhr.status)
      xhr.onerror = () => resolve(0)
      xhr.send(file)
    })
    if (put !== 200) return setState(`upload failed (${put})`)
    setUploaded(100)
    const columnMapping = { identifier: mapping.identifier || undefined, name: mapping.name, [channel]: mapping.phone.split(',').map(c => c.trim()).filter(Boolean) }
    const created = await api(auth, 'POST', `${DIALER}/batches`, { name: name || file.name, channel, duplicateStrategy: 'merge', tempCsvKey: url.body.tempCsvKey, columnMapping })
    if (created.status !== 201) return setState(`batch refused (${created.status}): ${created.body?.code ?? ''} ${created.body?.message ?? ''}`)
    setState(`batch ${created.body.name} created; importing`)
    onCreated(created.body.batchId)
  }
  return (
    <form class="csv-import" onSubmit={submit} aria-label="CSV import">
      <h3>Import a CSV</h3>
      <label>CSV file <input type="file" accept=".csv,text/csv" onChange={e => setFile((e.target as HTMLInputElement).files?.[0])} /></label>
      <label>Batch name <input value={name} onInput={e => setName((e.target as HTMLInputElement).value)} /></label>
      <label>
        Channel
        <select value={channel} onChange={e => setChannel((e.target as HTMLSelectElement).value)}>
          {['phone', 'whatsapp', 'email'].map(c => <option value={c}>{c}</option>)}
        </select>
      </label>
      <label>Identifier column <input value={mapping.identifier} onInput={e => setMapping({ ...mapping, identifier: (e.target as HTMLInputElement).value })} /></label>
      <label>Name column <input value={mapping.name} onInput={e => setMapping({ ...mapping, name: (e.target as HTMLInputElement).value })} /></label>
      <label>Address columns <input value={mapping.phone} onInput={e => setMapping({ ...mapping, phone: (e.target as HTMLInputElement).value })} /></label>
      <button type="submit" disabled={!file}>Upload and import</button>
      <progress max={100} value={uploaded} aria-label="Upload progress" />
      <span class="import-state" aria-live="polite">{state}</span>
    </form>
  )
}

function Blocked({ auth }: { auth: Auth }) {
  const [rows, setRows] = useState<any[]>([])
  const [address, setAddress] = useState('')
  const [type, setType] = useState('phone')
  const [state, setState] = useState('')
  const load = async () => {
    const res = await api(auth, 'GET', `${DIALER}/blocked-addresses?limit=100`)
    if (res.status === 200) setRows(res.body.data)
  }
  useEffect(() => void load(), [])
  const change = async (method: 'POST' | 'DELETE', addr: string, addressType: string) => {
    const res = await api(auth, method, `${DIALER}/blocked-addresses`, { address: addr, addressType })
    setState(`${method === 'POST' ? 'block' : 'unblock'} ${addr}: ${res.status === 200 ? 'done' : `refused (${res.status}) ${res.body?.code ?? ''}`}`)
    await load()
  }
  return (
    <div class="blocked">
      <h3>Blocked addresses</h3>
      <form onSubmit={e => (e.preventDefault(), void change('POST', address.trim(), type))} aria-label="Block an address">
        <label>Address to block <input value={address} onInput={e => setAddress((e.target as HTMLInputElement).value)} /></label>
        <label>
          Type
          <select value={type} onChange={e => setType((e.target as HTMLSelectElement).value)}>
            {['phone', 'whatsapp', 'email'].map(c => <option value={c}>{c}</option>)}
          </select>
        </label>
        <button type="submit">Block</button>
      </form>
      <span aria-live="polite">{state}</span>
      <ul class="blocked-list">
        {rows.map(r => (
          <li data-address={r.address}>
            {r.addressType} {r.address}{r.reason ? ` (${r.reason})` : ''}{' '}
            <button onClick={() => void change('DELETE', r.address, r.addressType)} aria-label={`Unblock ${r.address}`}>Unblock</button>
          </li>
        ))}
      </ul>
    </div>
  )
}
