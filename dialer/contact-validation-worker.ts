// The worker thread of dialer/contact-validation.ts: parses and validates a contact-load body
// with the same parseContactsBody the loop would use, and answers only the verdict.
import { parentPort } from 'node:worker_threads'
import { ApiError } from '../gateway/errors.js'
import { parseContactsBody } from './contact-input.js'

parentPort!.on('message', ({ id, body, now }: { id: number; body: Uint8Array; now: number }) => {
  let parsed: unknown
  try {
    parsed = JSON.parse(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8'))
  } catch {
    return parentPort!.postMessage({ id, unparsable: true })
  }
  try {
    parseContactsBody(parsed, now)
    parentPort!.postMessage({ id, ok: true })
  } catch (error) {
    if (error instanceof ApiError) {
      parentPort!.postMessage({ id, error: { status: error.status, code: error.code, message: error.message, extra: error.extra, headers: error.headers } })
    } else {
      parentPort!.postMessage({ id, failed: (error as Error)?.message ?? String(error) })
    }
  }
})
