// A contact-load chunk delivered again (worker crash, redelivery, two workers racing) is
// neither lost nor counted twice. Drives the chunk worker directly on both stores, with a
// store wrapper that makes one write fail exactly where a crash would hurt most.
import t from 'tap'
import { MemoryBus } from '../../platform/bus/index.js'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import { createMetrics } from '../../platform/metrics.js'
import { systemClock } from '../../platform/clock.js'
import { MemoryStore, MongoStore, type Collection, type Store } from '../../platform/store/index.js'
import type { Platform } from '../../platform/index.js'
import { Batches } from '../../dialer/batches.js'
import { BatchLog } from '../../dialer/batch-log.js'
import { ContactLoads, type ChunkMessage } from '../../dialer/loads.js'
import { Operations } from '../../dialer/operations.js'
import { chunkLoad } from '../../dialer/load-chunks.js'
import { COLLECTIONS, INDEXES } from '../../dialer/collections.js'
import type { Principal } from '../../gateway/auth.js'
import { STORES, mongoUrlFor } from '../support/harness.js'

/** Fails the next call of `method` on `collection` (a crash at that point of the chunk). */
function crashOnce(store: Store, collection: string, method: keyof Collection) {
  let armed = true
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop !== 'collection') return Reflect.get(target, prop, receiver)
      return (name: string) => {
        const inner = target.collection(name)
        if (name !== collection) return inner
        return new Proxy(inner, {
          get(c, p, r) {
            const value = Reflect.get(c, p, r)
            if (p !== method || typeof value !== 'function') return typeof value === 'function' ? value.bind(c) : value
            return (...args: unknown[]) => {
              if (armed) {
                armed = false
                return Promise.reject(new Error(`simulated crash in ${collection}.${String(method)}`))
              }
              return (value as Function).apply(c, args)
            }
          },
        })
      }
    },
  })
}

const principal: Principal = { keyId: '00000000-0000-4000-8000-000000000001', keyName: 'test', accountId: 'acme', roles: new Set(['dialer']) }

async function setup(t: { teardown(fn: () => unknown): void }, kind: 'memory' | 'mongo', wrap: (s: Store) => Store = s => s) {
  const config = loadConfig({ DIALER_CHUNK_SIZE: '10', LOG_LEVEL: 'silent' })
  const raw = kind === 'memory' ? new MemoryStore() : await MongoStore.connect(await mongoUrlFor(t))
  t.teardown(() => raw.close())
  for (const [collection, indexes] of Object.entries(INDEXES)) await raw.ensureIndexes(collection, indexes)
  const store = wrap(raw)
  const logger = createLogger('silent')
  const platform: Platform = { config, store, bus: new MemoryBus(logger), clock: systemClock, logger, metrics: createMetrics() }
  const batches = new Batches(store, systemClock)
  const operations = new Operations(store, systemClock)
  const loads = new ContactLoads(platform, batches, operations, new BatchLog(store, systemClock))
  const captured: ChunkMessage[] = []
  loads.queue.consume(async d => void captured.push(d.data), { concurrency: 1 })
  const batch = await batches.create({ accountId: 'acme', name: 'b', channel: 'phone', source: 'api', duplicateStrategy: 'merge', rules: {}, tempCsvKey: null, createdBy: { id: 'system' } })
  const contacts = Array.from({ length: 25 }, (_, i) => ({ identifier: `c${i}`, name: `C${i}`, addresses: [{ address: String(34600000000 + i), type: 'phone' as const, priority: 1 }] }))
  const ack = await loads.accept(principal, batch._id, chunkLoad(contacts, config.dialer.chunkSize))
  // Deliveries run in macrotasks of their own (platform/background.ts): wait for them, not a fixed time.
  for (let i = 0; i < 200 && captured.length < ack.chunksPublished; i++) await new Promise(r => setTimeout(r, 10))
  return { raw, loads, operations, batch, ack, captured }
}

for (const kind of STORES) {
  t.test(`redelivery on the ${kind} store`, async t => {
    t.test('every chunk delivered twice counts once', async t => {
      const { loads, operations, ack, captured, raw, batch } = await setup(t, kind)
      t.equal(captured.length, 3)
      for (const message of [...captured, ...captured]) await loads.process(message)
      const op = await operations.find('acme', ack.operationId)
      t.match(op, { status: 'succeeded', chunksCompleted: 3, insertedCount: 25, updatedCount: 0 })
      t.equal(await raw.collection(COLLECTIONS.contacts).countDocuments({ batchId: batch._id }), 25)
    })

    t.test('chunks queued by an earlier version (contacts as objects, not JSON text) apply alike', async t => {
      const { loads, operations, ack, captured, raw, batch } = await setup(t, kind)
      t.type(captured[0]!.contacts, 'string', 'queued as JSON text')
      for (const message of captured) await loads.process({ ...message, contacts: JSON.parse(message.contacts as string) })
      t.match(await operations.find('acme', ack.operationId), { status: 'succeeded', chunksCompleted: 3, insertedCount: 25 })
      const stored = await raw.collection(COLLECTIONS.contacts).find({ batchId: batch._id, identifier: 'c7' })
      t.match(stored, [{ identifier: 'c7', name: 'C7', identifierGenerated: false, addresses: [{ address: '34600000007', type: 'phone' }] }])
    })

    t.test('two workers racing on the same chunk count it once', async t => {
      const { loads, operations, ack, captured } = await setup(t, kind)
      await Promise.all(captured.flatMap(m => [loads.process(m), loads.process(m)]))
      const op = await operations.find('acme', ack.operationId)
      t.match(op, { status: 'succeeded', chunksCompleted: 3, insertedCount: 25 })
    })

    t.test('a crash after the writes but before the count: the retry counts them as inserted, once', async t => {
      const { loads, operations, ack, captured, raw, batch } = await setup(t, kind, s => crashOnce(s, COLLECTIONS.operations, 'findOneAndUpdate'))
      await t.rejects(loads.process(captured[0]!), /simulated crash/)
      t.equal(await raw.collection(COLLECTIONS.contacts).countDocuments({ batchId: batch._id }), 10, 'the writes landed')
      for (const message of captured) await loads.process(message)
      const op = await operations.find('acme', ack.operationId)
      // Re-deciding against the already-written contacts would say "updated"; the stored plan says inserted.
      t.match(op, { status: 'succeeded', insertedCount: 25, updatedCount: 0, duplicateCount: 0 })
    })

    t.test('a crash in the middle of the writes loses nothing', async t => {
      const { loads, operations, ack, captured, raw, batch } = await setup(t, kind, s => crashOnce(s, COLLECTIONS.contacts, 'bulkWrite'))
      await t.rejects(loads.process(captured[1]!), /simulated crash/)
      for (const message of captured) await loads.process(message)
      const op = await operations.find('acme', ack.operationId)
      t.match(op, { status: 'succeeded', insertedCount: 25 })
      t.equal(await raw.collection(COLLECTIONS.contacts).countDocuments({ batchId: batch._id }), 25)
    })
  })
}
