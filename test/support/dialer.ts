// Helpers for dialer tests: create batches, load contacts and wait for the operation; start and
// stop batches; a service whose scheduling cycles the test runs on a manual clock.
import { call, KEYS, startTestService, type StoreKind } from './harness.js'
import { ManualClock, Scheduler, schedulerOf } from '../../dialer/scheduler/index.js'
import { Attempts } from '../../dialer/attempts.js'
import { BatchLog } from '../../dialer/batch-log.js'
import { createProviders, type Provider } from '../../dialer/providers/index.js'
import type { Platform } from '../../platform/index.js'

export const phone = (n: number) => String(34600000000 + n)

export function contact(n: number, extra: Record<string, unknown> = {}) {
  return { identifier: `c${n}`, name: `Contact ${n}`, addresses: [{ address: phone(n), type: 'phone', priority: 1 }], ...extra }
}

export async function createBatch(base: string, body: Record<string, unknown> = {}, key: string = KEYS.acme) {
  const res = await call(base, 'POST', '/dialer/v1/batches', {
    key,
    body: { name: 'Batch', channel: 'phone', duplicateStrategy: 'merge', ...body },
  })
  if (res.status !== 201) throw new Error(`batch creation failed: ${res.status} ${res.text}`)
  return res.json.batchId as string
}

/** Polls an operation until it leaves pending/running (bounded). */
export async function waitForOperation(base: string, operationId: string, key: string = KEYS.acme, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    const res = await call(base, 'GET', `/dialer/v1/batches/operations/${operationId}`, { key })
    if (res.status !== 200) throw new Error(`operation read failed: ${res.status} ${res.text}`)
    if (!['pending', 'running'].includes(res.json.status)) return res.json
    await new Promise(r => setTimeout(r, 20))
  }
  throw new Error(`operation ${operationId} did not finish within ${timeoutMs} ms`)
}

export async function load(base: string, batchId: string, body: unknown, key: string = KEYS.acme) {
  const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { key, body })
  if (res.status !== 202) throw new Error(`load refused: ${res.status} ${res.text}`)
  return waitForOperation(base, res.json.operationId, key)
}

async function move(base: string, batchId: string, action: 'start' | 'stop', key: string) {
  const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/${action}`, { key })
  if (res.status !== 202) throw new Error(`${action}: ${res.status} ${res.text}`)
  await waitForOperation(base, res.json.operationId, key)
}

/** Starts a batch and waits for its lifecycle operation. */
export const startBatch = (base: string, batchId: string, key: string = KEYS.acme) => move(base, batchId, 'start', key)
/** Stops a batch and waits for its lifecycle operation. */
export const stopBatch = (base: string, batchId: string, key: string = KEYS.acme) => move(base, batchId, 'stop', key)

/**
 * A service whose scheduler runs only when a test calls `cycle()` (one cycle, then its attempts
 * drained), on a manual clock, with a zero-latency simulated provider.
 */
export async function startDialingService(t: Parameters<typeof startTestService>[0], store: StoreKind, env: Record<string, string> = {}) {
  // Monday 2036-03-03 09:00Z: ahead of the real date, because the MongoDB test server expires
  // TTL documents (operations) by its own clock, not ours.
  const clock = new ManualClock('2036-03-03T09:00:00Z')
  const started = await startTestService(t, { store, clock, env: { DIALER_CYCLE_MS: '0', DIALER_SIM_LATENCY_MS: '0', ...env } })
  const scheduler = schedulerOf(started.service.platform)
  const cycle = async (s: Scheduler = scheduler) => {
    const report = await s.runCycle()
    await s.drain()
    return report
  }
  return { ...started, clock, scheduler, cycle }
}

/** A second scheduler on the service's store, with its own provider and dialer config overrides. */
export function extraScheduler(platform: Platform, name: string, options: { provider?: Provider; dialer?: Partial<Platform['config']['dialer']> } = {}) {
  const config = { ...platform.config, dialer: { ...platform.config.dialer, ...options.dialer } }
  const provider = options.provider
  const providers = provider ? () => provider : createProviders(config)
  return new Scheduler({ ...platform, config }, { log: new BatchLog(platform.store, platform.clock), attempts: new Attempts(platform.store), providers }, name)
}
