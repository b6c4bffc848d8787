// A `make run`-style process (embedded store, no external server) killed with SIGKILL while its
// attempts are in flight: the contacts it had claimed fill the batch's room. The next process on
// the same DATA_DIR must dial them again once the dead scheduler has been silent for
// DIALER_SCHEDULER_DEAD_AFTER_MS (2 s here; 60 s by default), not after the 1 h claim timeout.
import t from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { API_KEYS, call } from '../support/harness.js'
import { startProcess, waitHealthy } from '../support/processes.js'
import { contact, createBatch, load, startBatch } from '../support/dialer.js'

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))

t.test('kill -9 with attempts in flight: the next process dials those contacts again and completes the batch', async t => {
  const dataDir = mkdtempSync(join(tmpdir(), 'sb-dialer-restart-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const env = { DATA_DIR: dataDir, API_KEYS, LOG_LEVEL: 'warn', DIALER_CYCLE_MS: '100', DIALER_SCHEDULER_DEAD_AFTER_MS: '2000' }
  // Calls that last ten minutes: they are still in flight at the kill.
  const first = await startProcess(t, 'dialer-1', { ...env, DIALER_SIM_LATENCY_MS: '600000' })
  await waitHealthy(first)
  const batchId = await createBatch(first.base, { rules: { maxInFlight: 3, maxAttempts: 2 } })
  const answered = { customFields: { simulatedOutcomes: 'answered' } }
  await load(first.base, batchId, { contacts: Array.from({ length: 5 }, (_, i) => contact(700 + i, answered)) })
  await startBatch(first.base, batchId)
  const progress = async (base: string) => (await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json
  for (let i = 0; i < 100 && (await progress(first.base)).progress.inProgress < 3; i++) await sleep(50)
  t.match((await progress(first.base)).progress, { inProgress: 3, pending: 2 }, 'the batch room is taken by attempts in flight')
  await first.kill()

  const second = await startProcess(t, 'dialer-2', { ...env, DIALER_SIM_LATENCY_MS: '0' })
  await waitHealthy(second)
  const started = Date.now()
  let batch = await progress(second.base)
  while (batch.status !== 'completed' && Date.now() - started < 30_000) {
    await sleep(200)
    batch = await progress(second.base)
  }
  t.equal(batch.status, 'completed', `completed ${Date.now() - started} ms after the restart`)
  t.match(batch.progress, { pending: 0, inProgress: 0, done: 5 })
  const attempts = (await call(second.base, 'GET', `/dialer/v1/batches/${batchId}/attempts?limit=100`)).json.data
  const lost = attempts.filter((a: { outcome: string }) => a.outcome === 'failed')
  t.equal(lost.length, 3, 'the dead process\'s three attempts are closed as failed')
  t.ok(lost.every((a: { detail: string }) => /scheduler lost/.test(a.detail)), lost.map((a: { detail: string }) => a.detail).join('; '))
  t.equal(attempts.filter((a: { outcome: string }) => a.outcome === 'answered').length, 5, 'every contact dialed and answered once')
  t.equal(await second.terminate(), 0)
  t.notMatch(second.output(), /"level":"(error|warn)"/, 'a clean stop: nothing failed (the scheduler drains and removes its beat)')
})
