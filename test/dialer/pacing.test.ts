// Pacing per minute: rules.maxAttemptsPerMinute (per batch) and
// DIALER_MAX_ATTEMPTS_PER_MINUTE_PER_ACCOUNT (per account, over its batches), enforced by the
// selection cycle from the attempts' startedAt in the store: a sliding 60 s window, driven by a
// manual clock (no real waiting).
import t from 'tap'
import { call, KEYS, STORES } from '../support/harness.js'
import { contact, createBatch, extraScheduler, load, startBatch, startDialingService } from '../support/dialer.js'
import { loadConfig } from '../../platform/config.js'

const SEC = 1000
const answered = (n: number) => contact(n, { customFields: { simulatedOutcomes: 'answered' } })

t.test('DIALER_MAX_ATTEMPTS_PER_MINUTE_PER_ACCOUNT: default 0 (no limit), a whole number', async t => {
  t.equal(loadConfig({}).dialer.maxAttemptsPerMinutePerAccount, 0)
  t.equal(loadConfig({ DIALER_MAX_ATTEMPTS_PER_MINUTE_PER_ACCOUNT: '120' }).dialer.maxAttemptsPerMinutePerAccount, 120)
  t.throws(() => loadConfig({ DIALER_MAX_ATTEMPTS_PER_MINUTE_PER_ACCOUNT: '-1' }))
})

for (const store of STORES) {
  t.test(`pacing per minute on the ${store} store`, async t => {
    const { base, service, clock, cycle } = await startDialingService(t, store)

    t.test('rules.maxAttemptsPerMinute: a sliding 60 s window over attempt start times', async t => {
      const batchId = await createBatch(base, { rules: { maxAttemptsPerMinute: 2 } })
      await load(base, batchId, { contacts: [1, 2, 3, 4, 5].map(answered) })
      await startBatch(base, batchId)
      t.equal((await cycle()).claimed, 2, 'two in the first minute')
      t.equal((await cycle()).claimed, 0, 'attempts ended at once, but the minute is used up')
      clock.advance(30 * SEC)
      t.equal((await cycle()).claimed, 0, 'still inside the window')
      clock.advance(30 * SEC - 1)
      t.equal((await cycle()).claimed, 0, '1 ms before the first attempts leave the window')
      clock.advance(1)
      t.equal((await cycle()).claimed, 2, '60 s after they started, room for two more')
      clock.advance(59 * SEC)
      t.equal((await cycle()).claimed, 0)
      clock.advance(1 * SEC)
      const last = await cycle()
      t.equal(last.claimed, 1, 'the last contact')
      const attempts = await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts?limit=100`)
      const starts = attempts.json.data.map((a: any) => a.startedAt).sort()
      t.equal(starts.length, 5)
      for (let i = 2; i < starts.length; i++) {
        t.ok(Date.parse(starts[i]) - Date.parse(starts[i - 2]) >= 60 * SEC, 'no three attempts within any 60 s')
      }
      await cycle()
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status, 'completed')
    })

    t.test('per account: shared by the account’s batches; another account is not held back', async t => {
      const paced = extraScheduler(service.platform, 'paced', { dialer: { maxAttemptsPerMinutePerAccount: 3 } })
      clock.advance(60 * SEC) // the previous test's attempts leave the window
      const one = await createBatch(base)
      clock.advance(1000) // batches are served oldest first
      const two = await createBatch(base)
      const other = await createBatch(base, {}, KEYS.globex)
      await load(base, one, { contacts: [11, 12, 13].map(answered) })
      await load(base, two, { contacts: [14, 15, 16].map(answered) })
      await load(base, other, { contacts: [17, 18, 19, 20].map(answered) }, KEYS.globex)
      await startBatch(base, one)
      await startBatch(base, two)
      await startBatch(base, other, KEYS.globex)

      const first = await cycle(paced)
      t.equal(first.claimed, 3 + 3, 'three for acme (the account limit), three for globex')
      const attempts = async (batchId: string, key: string = KEYS.acme) =>
        (await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts?limit=100`, { key })).json.total as number
      t.equal((await attempts(one)) + (await attempts(two)), 3)
      t.ok((await attempts(one)) >= 1 && (await attempts(two)) >= 1, 'both batches of the account get a share')
      t.equal(await attempts(other, KEYS.globex), 3, 'globex has its own minute')
      t.equal((await cycle(paced)).claimed, 0, 'the minute is used up for both accounts')
      clock.advance(60 * SEC)
      t.equal((await cycle(paced)).claimed, 3 + 1, 'the next minute: the rest of acme, the last of globex')
      t.equal((await attempts(one)) + (await attempts(two)), 6)
      await cycle(paced)
      for (const [batchId, key] of [[one, KEYS.acme], [two, KEYS.acme], [other, KEYS.globex]] as const) {
        t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`, { key })).json.status, 'completed')
      }
    })

    t.test('the rule is validated', async t => {
      const bad = await call(base, 'POST', '/dialer/v1/batches', {
        key: KEYS.acme,
        body: { name: 'x', channel: 'phone', duplicateStrategy: 'merge', rules: { maxAttemptsPerMinute: 0 } },
      })
      t.equal(bad.status, 400)
      t.same(bad.json.details.map((d: any) => d.field), ['rules.maxAttemptsPerMinute'])
    })
  })
}
