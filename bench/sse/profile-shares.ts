// Where a live turn's CPU goes: reads a V8 CPU profile of the service (BENCH_PROFILE=dir
// bench/sse/run.ts writes one per measured window) and sums self time into the parts of a turn,
// as shares of the main thread's busy time (idle left out).
//
//   node --import @tapjs/typescript/import bench/sse/profile-shares.ts <file.cpuprofile> [--functions]
import { readFileSync } from 'node:fs'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}

/** A frame's part of the turn, by where its code lives (first match wins). */
const PARTS: [string, (url: string, name: string) => boolean][] = [
  ['GC', (_u, n) => n === '(garbage collector)'],
  ['XState library', u => u.includes('/node_modules/xstate/')],
  ['session machine and effects', u => /\/engine\/(session\/(machine|session-effects|conversation)|host\/deadlines)\.ts/.test(u)],
  ['store: session journal, checkpoints, records', u => /\/engine\/persistence\/(session-writer|session-store|record-writer|session-restore)\.ts|\/reports\//.test(u)],
  ['store: document layer and LMDB', u => /\/platform\/store\/|\/node_modules\/(lmdb|msgpackr|ordered-binary|mingo)\//.test(u)],
  ['host, generation, providers, tools', u => /\/engine\/(host\/|session\/(generation|tools|live-session)\.ts|providers\/)/.test(u)],
  ['SSE hub, event log, streams', u => /\/engine\/(streams\/(hub|event-log)|transport)\.ts|\/gateway\/sse\.ts/.test(u)],
  ['gateway (routes, request, reply, auth)', u => /\/gateway\/|\/engine\/routes\/|\/schemas\/|\/node_modules\/(ajv|lru-cache|prom-client)\//.test(u)],
  ['crypto', (u, n) => u.startsWith('node:crypto') || /randomUUID|createHash|timingSafeEqual/.test(n)],
  ['native (uWS, V8 builtins, timers)', (u, n) => u === '' && n !== '(idle)' && n !== '(program)'],
  ['other', () => true],
]

export function profileShares(file: string): { busyMs: number; shares: Record<string, number>; functions: [string, number][] } {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] }
  const byId = new Map(profile.nodes.map(n => [n.id, n]))
  const self = new Map<number, number>()
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)))
  const parts = new Map<string, number>()
  const functions = new Map<string, number>()
  let busy = 0
  for (const [id, micros] of self) {
    const { url, functionName, lineNumber } = byId.get(id)!.callFrame
    if (functionName === '(idle)') continue
    busy += micros
    const part = PARTS.find(([, match]) => match(url, functionName))![0]
    parts.set(part, (parts.get(part) ?? 0) + micros)
    const name = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(node_modules\/)?/, '')}:${lineNumber + 1}`
    functions.set(name, (functions.get(name) ?? 0) + micros)
  }
  const shares = Object.fromEntries(PARTS.map(([name]) => [name, (parts.get(name) ?? 0) / busy]).filter(([, share]) => (share as number) > 0))
  return { busyMs: busy / 1000, shares, functions: [...functions.entries()].sort((a, b) => b[1] - a[1]).map(([name, micros]) => [name, micros / busy]) }
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  const [file, flag] = process.argv.slice(2)
  if (!file) {
    console.error('usage: profile-shares.ts <file.cpuprofile> [--functions]')
    process.exit(1)
  }
  const { busyMs, shares, functions } = profileShares(file)
  console.log(`busy ${busyMs.toFixed(0)} ms`)
  for (const [part, share] of Object.entries(shares).sort((a, b) => b[1] - a[1])) console.log(`${(share * 100).toFixed(1).padStart(5)} %  ${part}`)
  if (flag === '--functions') for (const [name, share] of functions.slice(0, 40)) console.log(`${(share * 100).toFixed(2).padStart(6)} %  ${name}`)
}
