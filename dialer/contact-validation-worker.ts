// The worker thread of dialer/contact-validation.ts: checks and chunks a contact-load body with
// the same loadFromBody the loop would use, and answers the chunks or the ApiError to send.
import { parentPort } from 'node:worker_threads'
import { lowerThreadPriority } from '../platform/background.js'
import { ApiError } from '../gateway/errors.js'
import { loadFromBody } from './load-chunks.js'
import type { ValidationAnswer, ValidationRequest } from './contact-validation.js'

// Background work: on a busy machine the kernel runs the event loop's thread first.
lowerThreadPriority()

const answer = (message: ValidationAnswer) => parentPort!.postMessage(message)

parentPort!.on('message', ({ id, body, rules }: ValidationRequest) => {
  try {
    answer({ id, load: loadFromBody(Buffer.from(body.buffer, body.byteOffset, body.byteLength), rules) })
  } catch (error) {
    if (error instanceof ApiError) {
      answer({ id, error: { status: error.status, code: error.code, message: error.message, extra: error.extra, headers: error.headers } })
    } else {
      // Not the body's fault (a stack overflow on a pathological body, a bug): the loop retries inline.
      answer({ id, failed: (error as Error)?.message ?? String(error) })
    }
  }
})
