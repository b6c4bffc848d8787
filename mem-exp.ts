import { createEngine } from './engine/index.js'
import { MemoryBus } from './platform/bus/index.js'
import { loadConfig } from './platform/config.js'
import { createLogger } from './platform/logger.js'
import { createMetrics } from './platform/metrics.js'
import { MemoryStore } from './platform/store/index.js'
import { parseCrews } from './engine/crews.js'
import { readFileSync } from 'node:fs'
import { randomUUID } from 'node:crypto'
const crews = JSON.parse(readFileSync('config/crews.json', 'utf8'))
for (const c of crews.crews) c.maxConcurrentSessions = 100000
const store = new MemoryStore()
const logger = createLogger('silent')
const platform: any = { config: loadConfig({ LOG_LEVEL: 'silent' }), store, bus: new MemoryBus(logger), clock: { now: () => Date.now() }, logger, metrics: createMetrics() }
const engine = createEngine(platform, { crews: parseCrews(crews) })
await engine.start()
const gc = (globalThis as any).gc
const N = 3000
const mk = async (n: number) => { for (let i = 0; i < n; i++) await engine.transport.create({ sessionId: randomUUID(), consumerId: randomUUID(), accountId: 'acme', crewId: 'demo', arguments: {} }, () => {}) }
await mk(200); await new Promise(r => setTimeout(r, 300))
gc(); const h0 = process.memoryUsage().heapUsed
await mk(N); await new Promise(r => setTimeout(r, 500))
gc(); const h1 = process.memoryUsage().heapUsed
console.log('engine+store KiB/session', ((h1 - h0) / N / 1024).toFixed(2))
// the store's part: copy out the docs and drop the store maps? estimate via JSON size
for (const [name, col] of (store as any).collections) console.log(name, col.docs.size)
for (const col of (store as any).collections.values()) { col.docs.clear(); for (const ix of col.indexes) ix.maps?.clear?.() }
gc(); const h2 = process.memoryUsage().heapUsed
console.log('store KiB/session', ((h1 - h2) / N / 1024).toFixed(2))
process.exit(0)
