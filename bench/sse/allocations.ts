// Who allocates: reads a sampling heap profile written by bench/sse/server.ts (BENCH_PROFILE=dir;
// every allocation of the measured window, collected or not) and prints the bytes allocated
// per function (self) and per first frame of the service's own code on the stack.
//
//   node --import @tapjs/typescript/import bench/sse/allocations.ts <file.heapprofile> [messages]
import { readFileSync } from 'node:fs'

/** The repository's root as profiles spell it (file:///…/): frames under it, outside node_modules, are the service's own. */
const ROOT = new URL('../../', import.meta.url).href

interface HeapNode {
  callFrame: { functionName: string; url: string; lineNumber: number }
  selfSize: number
  children: HeapNode[]
}

const [file, messagesArg] = process.argv.slice(2)
if (!file) {
  console.error('usage: allocations.ts <file.heapprofile> [messages in the window]')
  process.exit(1)
}
const messages = Number(messagesArg ?? 0)
const { head } = JSON.parse(readFileSync(file, 'utf8')) as { head: HeapNode }
const label = (n: HeapNode) => {
  const { functionName, url, lineNumber } = n.callFrame
  return `${functionName || '(anonymous)'} ${url ? `${url.replace(ROOT, '').replace(/^.*\/node_modules\//, 'node_modules/')}:${lineNumber + 1}` : ''}`.trim()
}
const own = (n: HeapNode) => n.callFrame.url.startsWith(ROOT) && !n.callFrame.url.includes('node_modules')
const self = new Map<string, number>()
const byOwn = new Map<string, number>()
let total = 0
const walk = (n: HeapNode, ownLabel: string) => {
  const mine = own(n) ? label(n) : ownLabel
  if (n.selfSize) {
    total += n.selfSize
    self.set(label(n), (self.get(label(n)) ?? 0) + n.selfSize)
    byOwn.set(mine, (byOwn.get(mine) ?? 0) + n.selfSize)
  }
  for (const c of n.children) walk(c, mine)
}
walk(head, '(outside the service)')
const per = (bytes: number) => (messages ? ` ${(bytes / messages / 1024).toFixed(2).padStart(6)} KiB/msg` : '')
console.log(`${file}: ${(total / 1e6).toFixed(1)} MB allocated${messages ? `, ${(total / messages / 1024).toFixed(1)} KiB per message` : ''}`)
for (const [title, map] of [['self', self], ['by the last service frame on the stack', byOwn]] as const) {
  console.log(`\n${title}`)
  for (const [name, bytes] of [...map].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`  ${(100 * bytes / total).toFixed(1).padStart(5)}%${per(bytes)}  ${name}`)
}
