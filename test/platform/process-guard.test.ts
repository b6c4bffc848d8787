// The process-level policy in a real service process (main.ts, ROLE=all): an uncaught exception
// or unhandled rejection is logged and counted and the process keeps serving; a storm of
// exceptions (state presumed unknown) drains and exits 70 so a supervisor restarts it.
import t from 'tap'
import { fileURLToPath } from 'node:url'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomUUID } from 'node:crypto'
import { startProcess, waitHealthy } from '../support/processes.js'
import { API_KEYS } from '../support/harness.js'

const injector = fileURLToPath(new URL('../support/fault-injector.mjs', import.meta.url))
const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))
const env = (extra: Record<string, string>) => ({
  API_KEYS,
  DATA_DIR: join(tmpdir(), `sb-guard-${randomUUID()}`),
  LOG_LEVEL: 'info',
  NODE_OPTIONS: `--import=${injector}`,
  ...extra,
})

t.test('one uncaught exception and one unhandled rejection: logged, counted, still serving', async t => {
  const proc = await startProcess(t, 'service', env({ FAULT: 'once' }))
  await waitHealthy(proc)
  proc.child.kill('SIGUSR2')
  const deadline = Date.now() + 10_000
  while (!/injected unhandled rejection/.test(proc.output()) || !/injected uncaught exception/.test(proc.output())) {
    if (!proc.alive()) break
    if (Date.now() > deadline) break
    await sleep(100)
  }
  t.ok(proc.alive(), 'the process is alive')
  // One JSON line each, saying what happened and with the error.
  const logged = (msg: string) => proc.output().split('\n').filter(line => line.startsWith('{')).map(line => JSON.parse(line)).find(line => line.msg === msg)
  t.match(logged('uncaught exception'), { level: 'error', error: { message: 'injected uncaught exception' } })
  t.match(logged('unhandled promise rejection'), { level: 'error', error: { message: 'injected unhandled rejection' } })
  t.equal((await fetch(`${proc.base}/healthz`)).status, 200, 'still serving')
  const metrics = await (await fetch(`${proc.metricsBase}/metrics`)).text()
  t.match(metrics, /switchboard_process_errors_total\{kind="uncaught_exception"\} 1/)
  t.match(metrics, /switchboard_process_errors_total\{kind="unhandled_rejection"\} 1/)
})

t.test('exceptions beyond UNCAUGHT_EXCEPTION_LIMIT: drain and exit 70', async t => {
  const proc = await startProcess(t, 'service', env({ FAULT: 'storm', UNCAUGHT_EXCEPTION_LIMIT: '5' }))
  await waitHealthy(proc)
  proc.child.kill('SIGUSR2')
  await Promise.race([proc.exited, sleep(15_000)])
  t.notOk(proc.alive(), 'the process stopped')
  t.equal(proc.child.exitCode, 70)
  t.match(proc.output(), /process state presumed unknown: draining and exiting/)
})
