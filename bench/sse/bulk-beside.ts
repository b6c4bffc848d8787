// A bulk contact load beside live sessions, on one service process (child process, embedded
// store, 127.0.0.1), three phases in the same run:
//   1. sessions alone: RATE user messages/s over SESSIONS sessions (PUT → assistant.message);
//   2. the load alone: LOADS requests × CONTACTS contacts into one batch, IN_FLIGHT at once,
//      until every operation has succeeded (acknowledged and end-to-end contacts/s);
//   3. both at once: the same message rate while a second load of the same size runs.
// Reports the sessions' p50/p99/max and lost messages in 1 and 3, the load's speed in 2 and 3,
// and the server's event-loop delay in each phase. Target: sessions' p99 in 3 within 2× of 1
// (+5 ms), nothing lost, and the load in 3 at the speed of 2.
//
//   node --import @tapjs/typescript/import bench/sse/bulk-beside.ts
//   BENCH_SESSIONS=90 BENCH_RATE=300 BENCH_LOADS=200 BENCH_CONTACTS=1000 BENCH_IN_FLIGHT=4
import { request } from 'node:http'
import { writeFileSync } from 'node:fs'
import { machineInfo } from '../support.js'
import { Load, openStreams, percentile, startServer, type ServerStats, type Stream } from './run.js'

const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 90)
const RATE = Number(process.env.BENCH_RATE ?? 300)
const LOADS = Number(process.env.BENCH_LOADS ?? 200)
const CONTACTS = Number(process.env.BENCH_CONTACTS ?? 1000)
const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT ?? 4)
const SOLO_SECONDS = Number(process.env.BENCH_SOLO_SECONDS ?? 30)
const HOST = '127.0.0.1'
const started = Date.now()

function http(port: number, key: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    const req = request(
      { host: HOST, port, method, path, headers: { apikey: key, ...(payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {}) } },
      res => {
        const chunks: Buffer[] = []
        res.on('data', c => chunks.push(c))
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let json: any
          try {
            json = JSON.parse(text)
          } catch {}
          resolve({ status: res.statusCode ?? 0, json })
        })
      },
    )
    req.on('error', reject)
    req.end(payload)
  })
}

let serial = 0
/** Whether the running load is still being acknowledged (its requests parsed, checked, queued). */
let acking = false
function contacts(n: number) {
  return Array.from({ length: n }, () => {
    const i = serial++
    return {
      identifier: `c-${i}`,
      name: `Contact ${i}`,
      addresses: [{ address: String(34_600_000_000 + i), type: 'phone', priority: 1 }],
      contactPriority: i % 10,
      customFields: { plan: i % 3 ? 'basic' : 'premium', region: `r${i % 17}` },
    }
  })
}

/** LOADS requests of CONTACTS contacts, IN_FLIGHT at once; resolves when every operation has succeeded. */
async function bulkLoad(port: number, key: string, batchId: string) {
  const bodies = Array.from({ length: LOADS }, () => ({ contacts: contacts(CONTACTS) }))
  acking = true
  const acks: number[] = []
  const operations: string[] = []
  let next = 0
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < bodies.length) {
        const body = bodies[next++]!
        const s = performance.now()
        const res = await http(port, key, 'POST', `/dialer/v1/batches/${batchId}/contacts`, body)
        if (res.status !== 202) throw new Error(`load answered ${res.status}: ${JSON.stringify(res.json).slice(0, 300)}`)
        acks.push(performance.now() - s)
        operations.push(res.json.operationId)
      }
    }),
  )
  const ackSeconds = (performance.now() - t0) / 1000
  acking = false
  const pending = new Set(operations)
  while (pending.size) {
    for (const id of [...pending]) {
      const res = await http(port, key, 'GET', `/dialer/v1/batches/operations/${id}`)
      if (res.json?.status === 'succeeded') pending.delete(id)
      else if (['failed', 'partial'].includes(res.json?.status)) throw new Error(`operation ${id} ${res.json.status}`)
    }
    if (pending.size) await new Promise(r => setTimeout(r, 100))
  }
  const seconds = (performance.now() - t0) / 1000
  acks.sort((a, b) => a - b)
  return { contacts: LOADS * CONTACTS, ackSeconds, seconds, ackPerSecond: (LOADS * CONTACTS) / ackSeconds, endToEndPerSecond: (LOADS * CONTACTS) / seconds, ackP50: percentile(acks, 50), ackP99: percentile(acks, 99) }
}

const server = await startServer('switchboard')
try {
  const streams: Stream[] = []
  await openStreams(server.port, server.key, SESSIONS, streams)
  const load = new Load(server.port, server.key, streams)
  const batch = await http(server.port, server.key, 'POST', '/dialer/v1/batches', { name: 'bench', channel: 'phone', duplicateStrategy: 'merge' })
  if (batch.status !== 201 && batch.status !== 200) throw new Error(`batch: ${batch.status} ${JSON.stringify(batch.json)}`)
  const batchId = batch.json.batchId

  const sessionsPhase = (r: Awaited<ReturnType<Load['openLoop']>>, stats: ServerStats) => ({
    sent: r.sent,
    completed: r.rtts.length,
    lost: r.lost,
    errors: r.errors,
    p50: percentile(r.rtts, 50),
    p99: percentile(r.rtts, 99),
    max: r.rtts.at(-1) ?? NaN,
    ackP99: percentile(r.acks, 99),
    loopDelayP99: stats.loopDelayMs.p99,
    loopDelayMax: stats.loopDelayMs.max,
    // The loop's store writes: how long each transaction held the loop, and waited for the write lock.
    storeWriteHoldMs: stats.storeWriteHoldMs,
  })
  const holdText = (h?: ServerStats['storeWriteHoldMs']) => (h ? `; store write holds p99 ${h.p99} max ${h.max} ms, waits p99 ${h.waits.p99} max ${h.waits.max} ms` : '')

  // 1. sessions alone
  await load.openLoop(RATE, 1)
  await server.reset()
  const solo = sessionsPhase(await load.openLoop(RATE, SOLO_SECONDS), await server.stats())
  console.error(`   sessions alone: p50 ${solo.p50.toFixed(2)} p99 ${solo.p99.toFixed(2)} max ${solo.max.toFixed(1)} ms, PUT → 201 p99 ${solo.ackP99.toFixed(1)} ms, lost ${solo.lost}, loop delay p99 ${solo.loopDelayP99.toFixed(1)} max ${solo.loopDelayMax.toFixed(1)} ms${holdText(solo.storeWriteHoldMs)}`)

  // 2. the load alone
  await server.reset()
  const loadAlone = await bulkLoad(server.port, server.key, batchId)
  const loadAloneLoop = (await server.stats()).loopDelayMs
  console.error(`   load alone: ${loadAlone.contacts} contacts, ack ${loadAlone.ackPerSecond.toFixed(0)}/s, end to end ${loadAlone.endToEndPerSecond.toFixed(0)}/s, loop delay p99 ${loadAloneLoop.p99.toFixed(1)} max ${loadAloneLoop.max.toFixed(1)} ms`)

  // 3. both
  await server.reset()
  let loading = true
  const both = bulkLoad(server.port, server.key, batchId).finally(() => (loading = false))
  const runs: Awaited<ReturnType<Load['openLoop']>>[] = []
  // Which 1 s windows started while the load's requests were still being acknowledged: the
  // replies are then also split by phase (requests on the loop, or chunks applied in the background).
  const duringAcks: boolean[] = []
  while (loading) {
    duringAcks.push(acking)
    runs.push(await load.openLoop(RATE, 1))
  }
  const loadBeside = await both
  const bothStats = await server.stats()
  const merged = { sent: 0, skipped: 0, lost: 0, errors: 0, rtts: runs.flatMap(r => r.rtts).sort((a, b) => a - b), acks: runs.flatMap(r => r.acks).sort((a, b) => a - b) }
  for (const r of runs) {
    merged.sent += r.sent
    merged.lost += r.lost
    merged.errors += r.errors
  }
  const beside = sessionsPhase(merged, bothStats)
  const byPhase = (acks: boolean) => {
    const rtts = runs.filter((_, i) => duringAcks[i] === acks).flatMap(r => r.rtts).sort((a, b) => a - b)
    const puts = runs.filter((_, i) => duringAcks[i] === acks).flatMap(r => r.acks).sort((a, b) => a - b)
    return { windows: duringAcks.filter(a => a === acks).length, replies: rtts.length, p50: percentile(rtts, 50), p99: percentile(rtts, 99), max: rtts.at(-1) ?? NaN, putAckP99: percentile(puts, 99) }
  }
  const phases = { whileAcknowledging: byPhase(true), whileApplying: byPhase(false) }
  for (const [name, p] of Object.entries(phases)) console.error(`     ${name}: ${p.windows} s, ${p.replies} replies, p50 ${p.p50.toFixed(2)} p99 ${p.p99.toFixed(2)} max ${p.max.toFixed(1)} ms; PUT → 201 p99 ${p.putAckP99.toFixed(1)} ms`)
  console.error(`   sessions beside the load: p50 ${beside.p50.toFixed(2)} p99 ${beside.p99.toFixed(2)} max ${beside.max.toFixed(1)} ms, PUT → 201 p99 ${beside.ackP99.toFixed(1)} ms, lost ${beside.lost}, errors ${beside.errors}, loop delay p99 ${beside.loopDelayP99.toFixed(1)} max ${beside.loopDelayMax.toFixed(1)} ms${holdText(beside.storeWriteHoldMs)}`)
  console.error(`   load beside the sessions: ack ${loadBeside.ackPerSecond.toFixed(0)}/s, end to end ${loadBeside.endToEndPerSecond.toFixed(0)}/s`)

  const verdict = {
    p99Ratio: beside.p99 / solo.p99,
    p99WithinTarget: beside.p99 <= 2 * solo.p99 + 5,
    nothingLost: beside.lost === 0 && beside.errors === 0,
    loadSpeedRatio: loadBeside.endToEndPerSecond / loadAlone.endToEndPerSecond,
  }
  console.log(
    `sessions p99 alone ${solo.p99.toFixed(2)} ms, beside the load ${beside.p99.toFixed(2)} ms (x${verdict.p99Ratio.toFixed(2)}; target <= 2x + 5 ms: ${verdict.p99WithinTarget ? 'met' : 'NOT met'}); ` +
      `lost ${beside.lost}, errors ${beside.errors}; load end to end ${loadAlone.endToEndPerSecond.toFixed(0)} -> ${loadBeside.endToEndPerSecond.toFixed(0)} contacts/s (x${verdict.loadSpeedRatio.toFixed(2)})`,
  )
  writeFileSync(
    new URL('./bulk-beside.json', import.meta.url),
    JSON.stringify({ date: new Date().toISOString(), machine: machineInfo(), config: { SESSIONS, RATE, LOADS, CONTACTS, IN_FLIGHT, SOLO_SECONDS }, solo, loadAlone: { ...loadAlone, loop: loadAloneLoop }, beside, besideByPhase: phases, loadBeside, verdict, wallSeconds: (Date.now() - started) / 1000 }, null, 2) + '\n',
  )
  load.close()
  for (const s of streams) s.socket.destroy()
} finally {
  await server.stop()
}
process.exit(0)
