// Starts the whole service in-process on a free port for black-box tests over real HTTP.
// `store: 'mongo'` points it at the MongoDB wire-protocol test server (or MONGO_URL).
import { randomUUID } from 'node:crypto'
import { rmSync } from 'node:fs'
import { loadConfig } from '../../platform/config.js'
import { createLogger } from '../../platform/logger.js'
import type { Clock } from '../../platform/clock.js'
import type { Logger } from '../../platform/logger.js'
import { startService, type RunningService } from '../../service.js'

export const KEYS = {
  acme: 'acme-key-0000000000000000',
  globex: 'globex-key-000000000000000',
  acmeDialerOnly: 'acme-dialer-only-00000000',
  acmeReportsOnly: 'acme-reports-only-0000000',
} as const

export const API_KEYS = [
  `${KEYS.acme}=acme`,
  `${KEYS.globex}=globex`,
  `${KEYS.acmeDialerOnly}=acme:dialer`,
  `${KEYS.acmeReportsOnly}=acme:reports`,
].join(',')

export type StoreKind = 'memory' | 'mongo'
export const STORES: StoreKind[] = ['memory', 'mongo']

export interface TestService {
  base: string
  /** The metrics listener (METRICS_PORT, any free port in tests): /metrics is not on the API port. */
  metricsBase: string
  service: RunningService
  mongoUrl?: string
  close(): Promise<void>
}

interface Teardown {
  teardown(fn: () => unknown): void
}

let mongo: Promise<{ url: string; stop(): Promise<void> }> | undefined

/** One wire-protocol server per test file, shared by its services (each gets its own database). */
export async function mongoUrlFor(t: Teardown): Promise<string> {
  if (!mongo) {
    mongo = import('./mongo-server.js').then(m => m.startMongoTestServer())
    t.teardown(async () => {
      const server = await mongo
      mongo = undefined
      await server?.stop()
    })
  }
  const { url } = await mongo
  const parsed = new URL(url)
  parsed.pathname = `/sb_${randomUUID().replace(/-/g, '')}`
  return parsed.toString()
}

export async function startTestService(
  t: Teardown,
  options: { store?: StoreKind; env?: Record<string, string>; clock?: Clock; logger?: Logger } = {},
): Promise<TestService> {
  const mongoUrl = options.store === 'mongo' ? await mongoUrlFor(t) : undefined
  // The embedded store (LMDB) and uploads live here; removed once the service closed.
  const dataDir = `/tmp/switchboard-test-${randomUUID()}`
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    API_KEYS,
    LOG_LEVEL: 'silent',
    DATA_DIR: dataDir,
    // Load shedding on event-loop delay is off unless a test asks for it (test/channel/overload):
    // the service shares its loop with the test's own code and the TypeScript loader (which
    // compiles modules imported mid-test on it), beside another test file on two cores. With the
    // default, ordinary suites (channel reconnects, assistant calls) get 503 OVERLOADED for a delay
    // that is not the service's.
    OVERLOAD_LOOP_DELAY_MS: '0',
    // The engine's write thread (ENGINE_WRITE_THREAD) is left to its default, which depends on
    // the cores as in a deployment: off on a 2-core machine such as CI's. Set in the environment
    // of the run, it passes through (ENGINE_WRITE_THREAD=1 npx tap test/channel); the suites that
    // exist for the thread set it, and test/engine/write-thread-pass.test.ts runs key suites with it.
    ...(process.env.ENGINE_WRITE_THREAD ? { ENGINE_WRITE_THREAD: process.env.ENGINE_WRITE_THREAD } : {}),
    ...(mongoUrl ? { MONGO_URL: mongoUrl } : {}),
    ...options.env,
  })
  const service = await startService(config, { clock: options.clock, logger: options.logger ?? createLogger('silent') })
  const base = `http://127.0.0.1:${service.port}`
  const metricsBase = `http://127.0.0.1:${service.metricsPort}`
  let closed = false
  const close = async () => {
    if (closed) return
    closed = true
    await service.close()
    if (!options.env?.DATA_DIR) rmSync(dataDir, { recursive: true, force: true })
  }
  t.teardown(close)
  return { base, metricsBase, service, mongoUrl, close }
}

/** fetch with an API key and JSON body; returns status, headers and parsed JSON. */
export async function call(
  base: string,
  method: string,
  path: string,
  options: { key?: string | null; body?: unknown; headers?: Record<string, string>; raw?: string } = {},
) {
  const headers: Record<string, string> = { ...options.headers }
  if (options.key !== null) headers.apikey = options.key ?? KEYS.acme
  let body: string | undefined
  if (options.raw !== undefined) body = options.raw
  else if (options.body !== undefined) {
    body = JSON.stringify(options.body)
    headers['content-type'] = 'application/json'
  }
  const res = await fetch(base + path, { method, headers, body })
  const text = await res.text()
  let json: any = undefined
  try {
    json = text ? JSON.parse(text) : undefined
  } catch {
    json = undefined
  }
  return { status: res.status, headers: res.headers, json, text }
}

/**
 * Reads `read()` until `until` holds of what it answers, for at most `timeoutMs` (generous: a
 * loaded 2-core machine is slow, and how fast belongs in bench/, not in a test); answers the last
 * value read, which the caller then asserts on (so a timeout fails with what was seen).
 */
export async function eventually<T>(read: () => Promise<T>, until: (value: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (until(value) || Date.now() > deadline) return value
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}
