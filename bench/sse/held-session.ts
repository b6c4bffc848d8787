// What one held session costs: opens N streams on a fresh server (bench/sse/server.ts, default
// `switchboard`), takes a heap snapshot before and after, and prints the heap retained per
// session by constructor (the difference divided by N), beside RSS per session.
// BENCH_HELD_MESSAGES=M: each session first has M user messages answered (at
// BENCH_HELD_RATE/s, 500), so the difference is what a conversation that went on keeps.
//
//   node --import @tapjs/typescript/import bench/sse/held-session.ts [N=2000] [mode=switchboard]
import { readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Load, openStreams, startServer, type Stream } from './run.js'

const N = Number(process.argv[2] ?? 2000)
const mode = process.argv[3] ?? 'switchboard'
const MESSAGES = Number(process.env.BENCH_HELD_MESSAGES ?? 0)
const RATE = Number(process.env.BENCH_HELD_RATE ?? 500)

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]] } }
  nodes: number[]
  strings: string[]
}

function byConstructor(file: string): Map<string, { count: number; bytes: number }> {
  const snap = JSON.parse(readFileSync(file, 'utf8')) as Snapshot
  const fields = snap.snapshot.meta.node_fields
  const types = snap.snapshot.meta.node_types[0]
  const width = fields.length
  const [typeAt, nameAt, sizeAt] = ['type', 'name', 'self_size'].map(f => fields.indexOf(f)) as [number, number, number]
  const out = new Map<string, { count: number; bytes: number }>()
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + typeAt]!]!
    const name = type === 'object' || type === 'closure' || type === 'native' ? `${type}:${snap.strings[snap.nodes[i + nameAt]!]}` : `(${type})`
    const entry = out.get(name) ?? { count: 0, bytes: 0 }
    entry.count++
    entry.bytes += snap.nodes[i + sizeAt]!
    out.set(name, entry)
  }
  return out
}

const server = await startServer(mode)
const snap = async (name: string) => (await new Promise<string>(done => {
  const on = (m: any) => m.type === 'heapsnapshot' && (server.child.off('message', on), done(m.file))
  server.child.on('message', on)
  server.child.send({ type: 'heapsnapshot', file: join(tmpdir(), `sb-held-${process.pid}-${name}.heapsnapshot`) })
}))
const streams: Stream[] = []
await openStreams(server.port, server.key, 200, streams) // warm-up: code paths compiled, caches filled
const before = await server.memory()
const a = await snap('a')
const t0 = performance.now()
await openStreams(server.port, server.key, N, streams)
const seconds = (performance.now() - t0) / 1000
if (MESSAGES > 0) {
  const talking = new Load(server.port, server.key, streams.slice(200))
  const sent = await talking.openLoop(RATE, (N * MESSAGES) / RATE)
  talking.close()
  console.log(`${sent.sent} messages sent (${sent.skipped} skipped: the session was still answering), ${sent.lost} unanswered, ${sent.errors} errors`)
}
await new Promise(r => setTimeout(r, Number(process.env.BENCH_SETTLE_MS ?? 1000)))
const after = await server.memory()
const b = await snap('b')
const [A, B] = [byConstructor(a), byConstructor(b)]
rmSync(a)
rmSync(b)
const rows = [...B].map(([name, v]) => ({ name, count: (v.count - (A.get(name)?.count ?? 0)) / N, bytes: (v.bytes - (A.get(name)?.bytes ?? 0)) / N })).filter(r => r.bytes > 8).sort((x, y) => y.bytes - x.bytes)
const heap = rows.reduce((n, r) => n + r.bytes, 0)
console.log(`${mode}: ${N} streams opened at ${(N / seconds).toFixed(0)}/s; per session: RSS ${((after.rss - before.rss) / N / 1024).toFixed(1)} KiB, heap used ${((after.heapUsed - before.heapUsed) / N / 1024).toFixed(1)} KiB, external ${((after.external - before.external) / N / 1024).toFixed(2)} KiB; heap snapshot difference ${(heap / 1024).toFixed(1)} KiB`)
for (const r of rows.slice(0, 40)) console.log(`  ${r.bytes.toFixed(0).padStart(6)} B  ${r.count.toFixed(2).padStart(6)} ×  ${r.name}`)
for (const s of streams) s.socket.destroy()
await server.stop()
process.exit(0)
