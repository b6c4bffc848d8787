// The sessions-detail report as a paged table (the first page's asOf is sent with every later
// page, so pages do not move while sessions start), and a CSV export of exactly the rows shown.
import { useState } from 'preact/hooks'
import { api, type Auth } from './api'

const COLUMNS = ['session_id', 'crew_id', 'agent_id', 'status', 'start_time', 'end_time', 'duration', 'messages', 'user_messages', 'assistant_messages', 'tool_calls', 'transfers', 'end_reason'] as const
const PAGE_SIZE = 50

/** RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled. */
const csvField = (value: unknown) => {
  const text = value === null || value === undefined ? '' : String(value)
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text
}
export const toCsv = (rows: Record<string, unknown>[]) => [COLUMNS.join(','), ...rows.map(r => COLUMNS.map(c => csvField(r[c])).join(','))].join('\r\n') + '\r\n'

/** A time in the chosen zone, as the chart shows it: 2026-11-28 12:04:05. */
export const zoned = (ms: number | null, timeZone: string) =>
  ms ? new Intl.DateTimeFormat('sv-SE', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false }).format(ms) : ''

export function SessionsDetail({ auth, crew, start, end, timeZone }: { auth: Auth; crew: string; start: number; end: number; timeZone: string }) {
  const [rows, setRows] = useState<any[]>([])
  const [page, setPage] = useState(0)
  const [paging, setPaging] = useState<{ total: number; hasMore: boolean; asOf: number } | null>(null)
  const [error, setError] = useState('')
  const load = async (n: number, asOf?: number) => {
    const q = `crew_id=${encodeURIComponent(crew)}&start_ts=${start}&end_ts=${end + 1}&page=${n}&pageSize=${PAGE_SIZE}${asOf ? `&asOf=${asOf}` : ''}`
    const res = await api(auth, 'GET', `/engine/v1/api/reports/sessions-detail?${q}`)
    if (res.status !== 200) return setError(`Sessions detail refused (${res.status}): ${res.body?.message ?? ''}`)
    setError('')
    setRows(res.body.data)
    setPage(n)
    setPaging(res.body.pagination)
  }
  const exportCsv = () => {
    const url = URL.createObjectURL(new Blob([toCsv(rows)], { type: 'text/csv' }))
    const a = document.createElement('a')
    a.href = url
    a.download = `sessions-detail-${crew}-page${page + 1}.csv`
    a.click()
    setTimeout(() => URL.revokeObjectURL(url), 1000)
  }
  return (
    <div class="sessions-detail" aria-label="Sessions detail">
      <h3>Sessions detail (the range above, times in {timeZone})</h3>
      <button onClick={() => void load(0)}>Load sessions detail</button>{' '}
      <button onClick={exportCsv} disabled={rows.length === 0}>Export CSV</button>
      {error && <p role="alert">{error}</p>}
      {paging && <span class="status"> {paging.total} sessions · page {page + 1} of {Math.max(1, Math.ceil(paging.total / PAGE_SIZE))}</span>}
      <table>
        <thead><tr>{COLUMNS.map(c => <th>{c}</th>)}</tr></thead>
        <tbody>
          {rows.map(r => (
            <tr data-row={r.session_id}>
              {COLUMNS.map(c => <td>{c === 'start_time' || c === 'end_time' ? zoned(r[c], timeZone) : String(r[c] ?? '')}</td>)}
            </tr>
          ))}
        </tbody>
      </table>
      <nav class="pager" aria-label="Sessions detail pages">
        <button disabled={page === 0 || !paging} onClick={() => void load(page - 1, paging?.asOf)}>Previous page</button>
        <button disabled={!paging?.hasMore} onClick={() => void load(page + 1, paging?.asOf)}>Next page</button>
      </nav>
    </div>
  )
}
