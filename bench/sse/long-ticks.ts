// What runs during the long ticks: reads a V8 CPU profile (BENCH_PROFILE=dir bench/sse/run.ts
// writes one per server process) and cuts it to the stretches where the process never went
// idle for longer than THRESHOLD ms (the event loop could not serve anything else meanwhile).
// Prints the share of time inside those windows by function (self time) and by the profile's
// own categories (GC, program), beside the whole-run profile, so a periodic stall is not hidden
// by averaging over the run.
//
//   node --import @tapjs/typescript/import bench/sse/long-ticks.ts <file.cpuprofile> [thresholdMs=20]
import { readFileSync } from 'node:fs'

/** The repository's root as profiles spell it (file:///…/): frames under it, outside node_modules, are the service's own. */
const ROOT = new URL('../../', import.meta.url).href

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}
interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

const [file, thresholdArg] = process.argv.slice(2)
if (!file) {
  console.error('usage: long-ticks.ts <file.cpuprofile> [thresholdMs]')
  process.exit(1)
}
const threshold = Number(thresholdArg ?? 20) * 1000
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile
const byId = new Map(profile.nodes.map(n => [n.id, n]))
const parent = new Map<number, number>()
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)

const label = (id: number) => {
  const { functionName, url, lineNumber } = byId.get(id)!.callFrame
  const where = url ? `${url.replace(ROOT, '').replace(/^.*\/node_modules\//, 'node_modules/')}:${lineNumber + 1}` : ''
  return `${functionName || '(anonymous)'} ${where}`.trim()
}
/** The first frame of our own code on the stack (what in the service led to this sample). */
const ownFrame = (id: number) => {
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
    const url = byId.get(at)!.callFrame.url
    if (url.startsWith(ROOT) && !url.includes('node_modules')) return label(at)
  }
  return label(id)
}
const isIdle = (id: number) => byId.get(id)!.callFrame.functionName === '(idle)'

// Sample i lasts timeDeltas[i + 1] (the gap to the next sample).
const samples = profile.samples.map((id, i) => ({ id, us: profile.timeDeltas[i + 1] ?? 0 }))
const windows: { from: number; to: number; us: number }[] = []
let start = -1
let busy = 0
samples.forEach((s, i) => {
  if (isIdle(s.id)) {
    if (start >= 0 && busy >= threshold) windows.push({ from: start, to: i, us: busy })
    start = -1
    busy = 0
  } else {
    if (start < 0) start = i
    busy += s.us
  }
})
if (start >= 0 && busy >= threshold) windows.push({ from: start, to: samples.length, us: busy })

function top(range: { from: number; to: number }[], key: (id: number) => string, n = 20) {
  const totals = new Map<string, number>()
  let all = 0
  for (const { from, to } of range) {
    for (let i = from; i < to; i++) {
      const s = samples[i]!
      totals.set(key(s.id), (totals.get(key(s.id)) ?? 0) + s.us)
      all += s.us
    }
  }
  return { all, rows: [...totals].sort((a, b) => b[1] - a[1]).slice(0, n).map(([name, us]) => ({ name, ms: us / 1000, share: us / all })) }
}

const totalBusy = samples.filter(s => !isIdle(s.id)).reduce((n, s) => n + s.us, 0)
const inWindows = windows.reduce((n, w) => n + w.us, 0)
console.log(`${file}: ${(totalBusy / 1e6).toFixed(1)} s busy; ${windows.length} stretches without idle >= ${threshold / 1000} ms, ${(inWindows / 1e6).toFixed(2)} s (${((100 * inWindows) / totalBusy).toFixed(1)}% of busy time); longest ${(Math.max(0, ...windows.map(w => w.us)) / 1000).toFixed(1)} ms`)
const show = (title: string, t: ReturnType<typeof top>) => {
  console.log(`\n${title} (${(t.all / 1000).toFixed(0)} ms)`)
  for (const r of t.rows) console.log(`  ${(100 * r.share).toFixed(1).padStart(5)}%  ${r.ms.toFixed(0).padStart(7)} ms  ${r.name}`)
}
show('self time inside the long stretches', top(windows, label))
show('inside the long stretches, by the service frame that led there', top(windows, ownFrame))
show('whole run, self time', top([{ from: 0, to: samples.length }], label))
show('whole run, by service frame', top([{ from: 0, to: samples.length }], ownFrame))
