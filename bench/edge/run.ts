// Edge bench: what the JSON depth guard costs. The gateway scans every JSON body once for its
// nesting depth before JSON.parse (gateway/request.ts parseJsonBody); baseline: JSON.parse alone
// on the same bytes, in the same run, as a ratio. Bodies: a 1000-contact load (~190 KB, the
// ingest bench's shape) and a 5 MiB one (MAX_BODY_BYTES).
//
//   node --import @tapjs/typescript/import bench/edge/run.ts
import { parseJsonBody } from '../../gateway/request.js'
import { runHeader, writeResults } from '../support.js'

const started = Date.now()

function contacts(n: number) {
  return {
    contacts: Array.from({ length: n }, (_, i) => ({
      externalId: `c-${i}`,
      name: `Contact ${i} [vip] {renewal}`,
      addresses: [{ type: 'phone', address: `+3460000${String(i).padStart(4, '0')}` }],
      customFields: { plan: 'gold', notes: 'called twice, "wants" a {callback}', tags: ['a', 'b', 'c'] },
    })),
  }
}

function median(values: number[]) {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

/** ms per call of `fn`, median of `rounds` rounds of `iterations`, interleaved with the baseline. */
function measure(body: Buffer, iterations: number, rounds: number) {
  const guarded: number[] = []
  const bare: number[] = []
  for (let r = 0; r < rounds; r++) {
    let t = process.hrtime.bigint()
    for (let i = 0; i < iterations; i++) JSON.parse(body.toString('utf8'))
    bare.push(Number(process.hrtime.bigint() - t) / 1e6 / iterations)
    t = process.hrtime.bigint()
    for (let i = 0; i < iterations; i++) parseJsonBody(body, 64)
    guarded.push(Number(process.hrtime.bigint() - t) / 1e6 / iterations)
  }
  const g = median(guarded)
  const b = median(bare)
  return { bytes: body.length, jsonParseMs: +b.toFixed(3), scanAndParseMs: +g.toFixed(3), ratio: +(g / b).toFixed(3) }
}

const small = Buffer.from(JSON.stringify(contacts(1000)))
const large = Buffer.from(JSON.stringify(contacts(Math.floor(1000 * (5 * 1024 * 1024) / small.length) - 10)))
measure(small, 20, 3) // warm-up
const results = {
  ...runHeader(started),
  note: 'depth scan + JSON.parse vs JSON.parse alone, same bytes, interleaved rounds; medians',
  load1000: measure(small, 50, 9),
  body5MiB: measure(large, 3, 7),
}
console.log(JSON.stringify(results, null, 2))
writeResults(import.meta.url, started, { ...results, ...runHeader(started) })
