// Memory of held conversations, by transport: the same service (bench/sse/server.ts
// `switchboard`, a child process) holds BENCH_HOLD sessions opened over SSE (`POST eventstream`,
// each stream its own socket) or over the channel's WebSocket (one socket each, an `open` frame),
// alternately, BENCH_RUNS runs of each. RSS of the server's process tree is read from /proc (no
// forced GC) before the opens, and 5 s and 20 s after the last one (quiet sessions hibernate
// after 10 s): the marginal RSS per held session at each. The clients live in this process.
//
//   node --import @tapjs/typescript/import bench/sse/held-sockets.ts
//   BENCH_HOLD=10000 BENCH_RUNS=2
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import WebSocket from 'ws'
import { openStreams, startServer, type Stream } from './run.js'
import { machineInfo } from '../support.js'

const HOLD = Number(process.env.BENCH_HOLD ?? 10_000)
const RUNS = Number(process.env.BENCH_RUNS ?? 2)
const SOCKET = '/assistants-channel/api/v1/channel/api/socket'
const IN_FLIGHT = 128
const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))

/** RSS of a process and its descendants, from /proc (bytes). */
function treeRss(root: number): number {
  const children = new Map<number, number[]>()
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)])
    } catch {}
  }
  let total = 0
  const visit = (pid: number) => {
    try {
      total += Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024
    } catch {}
    for (const child of children.get(pid) ?? []) visit(child)
  }
  visit(root)
  return total
}

function openSocket(port: number, key: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(`ws://127.0.0.1:${port}${SOCKET}`, { headers: { apikey: key }, perMessageDeflate: false })
    socket.once('open', () => socket.send('{"type":"open","crewId":"demo"}'))
    socket.on('message', (raw: Buffer) => {
      const frame = JSON.parse(raw.toString('utf8'))
      if (frame.type === 'ack') resolve(socket)
      else if (frame.type === 'error') reject(new Error(`open refused: ${frame.status}`))
    })
    socket.once('error', reject)
  })
}

async function openSockets(port: number, key: string, count: number, into: WebSocket[]) {
  let next = 0
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < count) {
        next++
        into.push(await openSocket(port, key))
      }
    }),
  )
}

async function run(transport: 'sse' | 'ws', round: number) {
  const server = await startServer('switchboard')
  try {
    const pid = server.child.pid!
    await sleep(1000)
    const before = treeRss(pid)
    const started = performance.now()
    const streams: Stream[] = []
    const sockets: WebSocket[] = []
    if (transport === 'sse') await openStreams(server.port, server.key, HOLD, streams)
    else await openSockets(server.port, server.key, HOLD, sockets)
    const openSeconds = (performance.now() - started) / 1000
    await sleep(5000)
    const at5 = treeRss(pid)
    await sleep(15_000)
    const at20 = treeRss(pid)
    const perSession = (rss: number) => (rss - before) / HOLD / 1024
    const result = { transport, round, held: streams.length + sockets.length, openPerSecond: HOLD / openSeconds, rssKiBPerSession: { at5s: perSession(at5), at20s: perSession(at20) } }
    console.error(`  ${transport} round ${round}: ${result.held} held, ${result.openPerSecond.toFixed(0)} opened/s; RSS per session ${result.rssKiBPerSession.at5s.toFixed(1)} KiB at 5 s, ${result.rssKiBPerSession.at20s.toFixed(1)} KiB at 20 s`)
    for (const s of streams) s.socket.destroy()
    for (const s of sockets) s.terminate()
    return result
  } finally {
    await server.stop()
  }
}

const results: Awaited<ReturnType<typeof run>>[] = []
for (let round = 1; round <= RUNS; round++) for (const transport of ['sse', 'ws'] as const) results.push(await run(transport, round))
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const summary = Object.fromEntries(
  (['sse', 'ws'] as const).map(transport => {
    const mine = results.filter(r => r.transport === transport)
    return [transport, { at5s: median(mine.map(r => r.rssKiBPerSession.at5s)), at20s: median(mine.map(r => r.rssKiBPerSession.at20s)), openPerSecond: median(mine.map(r => r.openPerSecond)) }]
  }),
)
console.log(JSON.stringify({ hold: HOLD, runs: RUNS, machine: machineInfo(), summary }, null, 2))
writeFileSync(new URL('./held-sockets.json', import.meta.url), JSON.stringify({ date: new Date().toISOString(), hold: HOLD, runs: RUNS, machine: machineInfo(), summary, results }, null, 2))
process.exit(0)
