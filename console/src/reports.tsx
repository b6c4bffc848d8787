// Reports at a glance: the report picked from GET …/reports/definitions, the crew from those on
// the floor, a date range (presets or from/to days), grouping and time zone — all in the URL.
// Counts and durations never share an axis: one chart each (ratios a third), every series in a
// fixed colour of its own, and the values in a table under the charts in the chosen zone.
import { useEffect, useRef, useState } from 'preact/hooks'
import uPlot from 'uplot'
import { api, type Auth } from './api'
import { SessionsDetail, zoned } from './sessions-detail'
import { navigate, withQuery, type Route } from './router'

const REPORTS = '/engine/v1/api/reports'
const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04', '#db2777', '#4b5563', '#65a30d']
const RANGES: Record<string, number> = { '24h': 24 * 3600_000, '7d': 7 * 86400_000, '30d': 30 * 86400_000, '90d': 90 * 86400_000 }

interface Definition {
  id: string
  title?: string
  metrics: Record<string, { op: string; field?: string }>
}

/**
 * A metric's colour is fixed: its place in the report's definition (the API returns metrics in
 * definition order), so a series keeps its colour across runs, ranges and both charts, and no
 * two series of a report share one (up to ten metrics).
 */
export const colourOf = (name: string, names: string[]) => PALETTE[Math.max(0, names.indexOf(name)) % PALETTE.length]!

type Kind = 'count' | 'duration' | 'ratio'
const kindOf = (name: string, m?: { op: string; field?: string }): Kind =>
  m?.op === 'ratio' ? 'ratio' : m?.field === 'duration' || /DurationMs$|Ms$/.test(name) ? 'duration' : 'count'

const fmt = (kind: Kind, v: number | null | undefined) =>
  v === null || v === undefined ? '—' : kind === 'duration' ? `${(v / 1000).toFixed(v < 10_000 ? 1 : 0)} s` : kind === 'ratio' ? `${(v * 100).toFixed(1)} %` : String(v)

const day = (ms: number, timeZone: string) => zoned(ms, timeZone).slice(0, 10)

/** Unix ms of a local day's midnight in a zone (the offset read back from the formatter). */
function startOfDay(date: string, timeZone: string) {
  const guess = Date.parse(`${date}T00:00:00Z`)
  const shown = Date.parse(zoned(guess, timeZone).replace(' ', 'T') + 'Z')
  return guess - (shown - guess)
}

export function Reports({ auth, route, crews }: { auth: Auth; route: Route; crews: string[] }) {
  const p = route.params
  const [defs, setDefs] = useState<Definition[]>([])
  const tz = p.get('tz') || Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'
  const report = p.get('report') || defs[0]?.id || 'sessions-overview'
  const crew = p.get('crew') || crews[0] || 'demo'
  const group = p.get('group') ?? 'hour'
  const range = p.get('range') || (p.get('from') ? '' : '24h')
  const now = Date.now()
  const start = range ? now - RANGES[range]! : startOfDay(p.get('from')!, tz)
  const end = range ? now : p.get('to') ? startOfDay(p.get('to')!, tz) + 86400_000 : now
  const [rows, setRows] = useState<any[]>([])
  const [error, setError] = useState('')
  const set = (changes: Record<string, string>) =>
    navigate(withQuery('reports', { report: p.get('report') ?? '', crew: p.get('crew') ?? '', group: p.get('group') ?? '', tz: p.get('tz') ?? '', range: p.get('range') ?? '', from: p.get('from') ?? '', to: p.get('to') ?? '', ...changes }), true)

  useEffect(() => {
    void (async () => {
      const res = await api(auth, 'GET', `${REPORTS}/definitions`)
      if (res.status === 200) setDefs(res.body.data)
      else setError(`Definitions refused (${res.status}): ${res.body?.message ?? ''}`)
    })()
  }, [auth])
  const key = `${report}|${crew}|${group}|${tz}|${range}|${p.get('from')}|${p.get('to')}`
  const run = async () => {
    const q = `crew_id=${encodeURIComponent(crew)}&start_ts=${start}&end_ts=${end}&page=0&pageSize=500&timeZone=${encodeURIComponent(tz)}&groupByTime=${group}`
    const res = await api(auth, 'GET', `${REPORTS}/execute-report/${encodeURIComponent(report)}?${q}`)
    if (res.status !== 200) return setError(`Report refused (${res.status}): ${res.body?.message ?? ''}`)
    setRows(res.body.data)
    setError(res.body.data.length ? '' : 'No data in this range')
  }
  useEffect(() => void run(), [key])
  const def = defs.find(d => d.id === report)
  const names = def ? Object.keys(def.metrics) : [...new Set(rows.flatMap(r => Object.keys(r.metrics ?? {})))]
  const byKind = (k: Kind) => names.filter(n => kindOf(n, def?.metrics[n]) === k)
  const zones = (Intl as any).supportedValuesOf?.('timeZone') as string[] | undefined
  return (
    <section aria-labelledby="reports-h">
      <h2 id="reports-h">Reports</h2>
      <div class="filters">
        <label>
          Report
          <select name="report" value={report} onChange={e => set({ report: (e.target as HTMLSelectElement).value })}>
            {defs.map(d => <option value={d.id}>{d.title ?? d.id}</option>)}
          </select>
        </label>
        <label>
          Crew
          <select value={crew} onChange={e => set({ crew: (e.target as HTMLSelectElement).value })}>
            {[...new Set([crew, ...crews])].map(c => <option value={c}>{c}</option>)}
          </select>
        </label>
        <label>
          Range
          <select value={range} onChange={e => set({ range: (e.target as HTMLSelectElement).value, from: '', to: '' })}>
            {Object.keys(RANGES).map(r => <option value={r}>last {r}</option>)}
            <option value="">from … to …</option>
          </select>
        </label>
        <label>From <input type="date" value={day(start, tz)} onChange={e => set({ range: '', from: (e.target as HTMLInputElement).value, to: p.get('to') || day(end - 1, tz) })} /></label>
        <label>To <input type="date" value={day(end - 1, tz)} onChange={e => set({ range: '', from: p.get('from') || day(start, tz), to: (e.target as HTMLInputElement).value })} /></label>
        <label>
          Group by
          <select value={group} onChange={e => set({ group: (e.target as HTMLSelectElement).value })}>
            {['hour', 'day', 'week', 'month'].map(g => <option value={g}>{g}</option>)}
          </select>
        </label>
        <label>
          Time zone
          {zones ? (
            <select value={tz} onChange={e => set({ tz: (e.target as HTMLSelectElement).value })}>
              {[...new Set([tz, 'UTC', ...zones])].map(z => <option value={z}>{z}</option>)}
            </select>
          ) : (
            <input value={tz} onChange={e => set({ tz: (e.target as HTMLInputElement).value })} />
          )}
        </label>
        <button onClick={() => void run()}>Run</button>
      </div>
      {error && <p role="alert">{error}</p>}
      <div class="charts">
        {(['count', 'duration', 'ratio'] as const).map(k => byKind(k).length > 0 && <Chart kind={k} names={byKind(k)} all={names} rows={rows} tz={tz} />)}
      </div>
      <table class="report-values" aria-label="Report values">
        <thead>
          <tr><th>{tz}</th>{names.map(n => <th><span class="swatch" data-colour={colourOf(n, names)} style={{ background: colourOf(n, names) }} />{n}</th>)}</tr>
        </thead>
        <tbody>
          {rows.filter(r => names.some(n => r.metrics?.[n])).map(r => (
            <tr>
              <td>{zoned(Date.parse(r.date), tz).slice(0, group === 'hour' ? 16 : 10)}</td>
              {names.map(n => <td>{fmt(kindOf(n, def?.metrics[n]), r.metrics?.[n])}</td>)}
            </tr>
          ))}
        </tbody>
      </table>
      <SessionsDetail auth={auth} crew={crew} start={start} end={end} timeZone={tz} key={key} />
    </section>
  )
}

function Chart({ kind, names, all, rows, tz }: { kind: Kind; names: string[]; all: string[]; rows: any[]; tz: string }) {
  const box = useRef<HTMLDivElement>(null)
  useEffect(() => {
    if (!box.current) return
    const xs = rows.map(r => Date.parse(r.date) / 1000)
    const data = [xs, ...names.map(n => rows.map(r => r.metrics?.[n] ?? null))] as uPlot.AlignedData
    const plot = new uPlot(
      {
        title: kind === 'count' ? 'Counts' : kind === 'duration' ? 'Durations' : 'Ratios',
        width: Math.min(900, box.current.clientWidth || 600),
        height: 240,
        tzDate: ts => uPlot.tzDate(new Date(ts * 1e3), tz),
        series: [{}, ...names.map(n => ({ label: n, stroke: colourOf(n, all), fill: undefined, width: 2, points: { show: true, size: 5 }, value: (_u: uPlot, v: number | null) => fmt(kind, v) }))],
        axes: [{}, { size: 70, values: (_u: uPlot, vals: number[]) => vals.map(v => fmt(kind, v)) }],
        // The legend shows the latest bucket's values until the pointer picks another one.
        legend: { live: true },
      },
      data,
      box.current,
    )
    plot.setCursor({ left: plot.valToPos(xs[xs.length - 1] ?? 0, 'x'), top: 0 })
    return () => plot.destroy()
  }, [rows, names.join(), tz])
  return <div ref={box} class={`chart chart-${kind}`} aria-label={`Report chart: ${kind === 'count' ? 'counts' : kind === 'duration' ? 'durations' : 'ratios'}`} />
}
