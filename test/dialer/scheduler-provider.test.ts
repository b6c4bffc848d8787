// The simulated provider: a reproducible outcome mix from a seed, pinned outcomes per contact,
// and a refused mix at start-up.
import t from 'tap'
import { parseOutcomeMix, SimulatedProvider } from '../../dialer/providers/index.js'
import type { AttemptRequest } from '../../dialer/providers/index.js'
import { loadConfig } from '../../platform/config.js'

const request = (n: number, customFields: Record<string, unknown> = {}): AttemptRequest => ({
  attemptId: `a${n}`,
  accountId: 'acme',
  batchId: 'b',
  contactId: `c${n}`,
  identifier: `c${n}`,
  channel: 'phone',
  address: { address: '34600000000', type: 'phone', priority: 1 },
  attemptNumber: n,
  name: 'x',
  customFields,
})

t.test('the same seed draws the same outcomes, in the configured proportions', async t => {
  const options = { outcomes: 'answered=50,busy=25,failed=25', latencyMs: 0, seed: 7 }
  const draw = async (p: SimulatedProvider) => Promise.all(Array.from({ length: 2000 }, (_, i) => p.dial(request(1 + (i % 3))).then(r => r.outcome)))
  const a = await draw(new SimulatedProvider(options))
  const b = await draw(new SimulatedProvider(options))
  t.same(a, b, 'reproducible')
  t.notSame(a, await draw(new SimulatedProvider({ ...options, seed: 8 })), 'another seed, another sequence')
  const share = (o: string) => a.filter(x => x === o).length / a.length
  t.ok(Math.abs(share('answered') - 0.5) < 0.05, `answered ${share('answered')}`)
  t.ok(Math.abs(share('busy') - 0.25) < 0.05, `busy ${share('busy')}`)
  t.equal(share('voicemail'), 0)
})

t.test('customFields.simulatedOutcomes pins the outcome of attempt n', async t => {
  const p = new SimulatedProvider({ outcomes: 'failed=1', latencyMs: 0, seed: 1 })
  const pinned = { simulatedOutcomes: 'busy, no_answer,answered' }
  const outcomes = await Promise.all([1, 2, 3, 4].map(n => p.dial(request(n, pinned)).then(r => r.outcome)))
  t.same(outcomes, ['busy', 'no_answer', 'answered', 'answered'])
})

t.test('latency is applied', async t => {
  const p = new SimulatedProvider({ outcomes: 'answered=1', latencyMs: 30, seed: 1 })
  const started = Date.now()
  await p.dial(request(1))
  t.ok(Date.now() - started >= 25)
})

t.test('a bad mix is refused', async t => {
  t.throws(() => parseOutcomeMix('answered=1,hung_up=2'), /unknown outcome "hung_up"/)
  t.throws(() => parseOutcomeMix('answered=x'), /weight of answered/)
  t.throws(() => parseOutcomeMix('answered=0'), /must not all be 0/)
  t.same(parseOutcomeMix(loadConfig({}).dialer.simulated.outcomes).map(([o]) => o), ['answered', 'no_answer', 'busy', 'voicemail', 'failed'])
})
