// The embedded mode's durable work queues (platform/bus/lmdb-bus.ts): a published message is on
// disk, survives the process, is delivered in order, redelivered when its handler throws, and
// dropped after maxDeliveries (so a poison message cannot spin forever, even across restarts).
import t from 'tap'
import { LmdbBus } from '../../platform/bus/lmdb-bus.js'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import { createLogger } from '../../platform/logger.js'
import { tempDir } from '../support/temp-dir.js'

const logger = createLogger('silent')

const until = async (check: () => boolean, ms = 5000) => {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out')
    await new Promise(r => setTimeout(r, 10))
  }
}

t.test('messages published before a restart are delivered after it, in order', async t => {
  const path = tempDir(t)
  const first = new LmdbStore({ path })
  const queue = new LmdbBus(first, logger).queue<{ n: number; at: Date }>('chunks')
  for (let n = 1; n <= 5; n++) await queue.publish({ n, at: new Date(n) })
  t.equal(queue.depth(), 5)
  await first.close()

  const second = new LmdbStore({ path })
  t.teardown(() => second.close())
  const again = new LmdbBus(second, logger).queue<{ n: number; at: Date }>('chunks')
  t.equal(again.depth(), 5, 'the stored messages wait')
  const seen: { n: number; attempt: number; date: boolean }[] = []
  const stop = again.consume(async d => void seen.push({ n: d.data.n, attempt: d.attempt, date: d.data.at instanceof Date }), { concurrency: 1 })
  await until(() => seen.length === 5)
  await stop()
  t.same(seen.map(s => s.n), [1, 2, 3, 4, 5], 'in order')
  t.ok(seen.every(s => s.attempt === 1 && s.date), 'first delivery, payload types kept')
  await again.publish({ n: 6, at: new Date(6) })
  t.equal(again.depth(), 1, 'a new message after the stored ones')
})

t.test('a handled message is gone; a failing one is retried, then dropped for good', async t => {
  const path = tempDir(t)
  const store = new LmdbStore({ path })
  const queue = new LmdbBus(store, logger).queue<string>('work')
  const attempts: string[] = []
  const stop = queue.consume(
    async d => {
      attempts.push(`${d.data}#${d.attempt}`)
      if (d.data === 'poison') throw new Error('always fails')
      if (d.data === 'flaky' && d.attempt === 1) throw new Error('fails once')
    },
    { concurrency: 2, maxDeliveries: 3 },
  )
  await queue.publish('fine')
  await queue.publish('flaky')
  await queue.publish('poison')
  await until(() => attempts.includes('poison#3') && attempts.includes('flaky#2'))
  await new Promise(r => setTimeout(r, 100))
  await stop()
  t.same(attempts.filter(a => a.startsWith('poison')), ['poison#1', 'poison#2', 'poison#3'], 'the poison message: maxDeliveries, no more')
  t.same(attempts.filter(a => a.startsWith('flaky')), ['flaky#1', 'flaky#2'])
  await store.close()

  const reopened = new LmdbStore({ path })
  t.teardown(() => reopened.close())
  t.equal(new LmdbBus(reopened, logger).queue<string>('work').depth(), 0, 'nothing left to deliver after a restart')
})

t.test('a message whose handler failed keeps its attempt count across a restart', async t => {
  const path = tempDir(t)
  const store = new LmdbStore({ path })
  const queue = new LmdbBus(store, logger).queue<string>('work')
  let calls = 0
  const stop = queue.consume(
    async () => {
      calls++
      throw new Error('fails')
    },
    { concurrency: 1, maxDeliveries: 2 },
  )
  await queue.publish('x')
  await until(() => calls === 1)
  await new Promise(r => setTimeout(r, 30)) // the failure is recorded before the retry's backoff ends
  await stop()
  await store.close()

  const reopened = new LmdbStore({ path })
  t.teardown(() => reopened.close())
  const again = new LmdbBus(reopened, logger).queue<string>('work')
  const seen: number[] = []
  const stopAgain = again.consume(
    async d => {
      seen.push(d.attempt)
      throw new Error('still fails')
    },
    { concurrency: 1, maxDeliveries: 2 },
  )
  await until(() => seen.length === 1)
  await new Promise(r => setTimeout(r, 50))
  await stopAgain()
  t.same(seen, [2], 'delivered as its second attempt, the last one')
  t.equal(again.depth(), 0)
})
