// Helpers for dialer tests: create batches, load contacts and wait for the operation.
import { call, KEYS } from './harness.js'

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
