// Report definitions: the shipped file, and the errors a bad file fails start-up with.
import { writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { loadDefinitions, parseDefinitions } from '../../reports/index.js'
import { CompiledReport, percentile } from '../../reports/metrics.js'
import { startTestService } from '../support/harness.js'

t.test('the shipped config/reports.json', async t => {
  const defs = loadDefinitions('config/reports.json')
  t.ok(defs.has('sessions-overview'))
  t.same(Object.keys(defs.get('sessions-overview')!.metrics), [
    'sessions', 'active', 'completed', 'abandoned', 'transferred', 'errors', 'avgDurationMs', 'p90DurationMs', 'messages',
  ])
  for (const d of defs.values()) t.ok(new CompiledReport(d), `${d.id} compiles`)
})

t.test('bad definitions are rejected with the reason', async t => {
  const bad: [unknown, RegExp][] = [
    [{}, /reports is required/],
    [{ reports: [{ id: 'x', metrics: {} }] }, /metrics/],
    [{ reports: [{ id: 'x', metrics: { a: { op: 'median', field: 'duration' } } }] }, /op/],
    [{ reports: [{ id: 'x', metrics: { a: { op: 'sum' } } }] }, /field is required/],
    [{ reports: [{ id: 'x', metrics: { a: { op: 'sum', field: 'accountId' } } }] }, /field/],
    [{ reports: [{ id: 'x', metrics: { a: { op: 'percentile', field: 'duration' } } }] }, /p is required/],
    [{ reports: [{ id: 'x', metrics: { a: { op: 'percentile', field: 'duration', p: 101 } } }] }, /\bp\b/],
    [{ reports: [{ id: 'x', metrics: { a: { op: 'count', where: { accountId: 'globex' } } } }] }, /accountId is not a known field/],
    [{ reports: [{ id: 'x', metrics: { a: { op: 'ratio', of: ['b', 'c'] } } }] }, /unknown metric "b"/],
    [{ reports: [{ id: 'x', metrics: { a: { op: 'count' }, b: { op: 'ratio', of: ['a', 'a'] }, c: { op: 'ratio', of: ['b', 'a'] } } }] }, /another ratio/],
    [{ reports: [{ id: 'x', metrics: { a: { op: 'count' } } }, { id: 'x', metrics: { a: { op: 'count' } } }] }, /defined twice/],
    [{ reports: [{ id: 'has space', metrics: { a: { op: 'count' } } }] }, /id/],
    [{ reports: [{ id: 'x', metrics: { '1bad': { op: 'count' } } }] }, /metrics/],
  ]
  for (const [document, reason] of bad) t.throws(() => parseDefinitions(document, 'test.json'), reason, JSON.stringify(document))
})

t.test('the service does not start on a broken definitions file', async t => {
  const file = join(tmpdir(), `reports-broken-${process.pid}.json`)
  writeFileSync(file, '{"reports": [')
  await t.rejects(startTestService(t, { env: { REPORTS_FILE: file } }), /not valid JSON/)
  await t.rejects(startTestService(t, { env: { REPORTS_FILE: join(tmpdir(), 'does-not-exist.json') } }), /Cannot read report definitions/)
})

t.test('nearest-rank percentile over bins', async t => {
  const bins = new Map([[10, { n: 5, max: 11 }], [3, { n: 4, max: 3 }], [20, { n: 1, max: 500 }]])
  t.equal(percentile(bins, 40), 3)
  t.equal(percentile(bins, 41), 11)
  t.equal(percentile(bins, 90), 11)
  t.equal(percentile(bins, 91), 500)
  t.equal(percentile(bins, 100), 500)
  t.equal(percentile(new Map(), 50), null)
})
