// The worker thread of dialer/contact-validation.ts: checks and chunks a contact-load body with
// the same loadFromBody the loop would use, and answers the chunks or the domain error to throw.
import { parentPort } from 'node:worker_threads'
import { lowerThreadPriority } from '../platform/background.js'
import { DomainError } from '../platform/errors.js'
import { loadFromBody } from './load-chunks.js'
import type { ValidationAnswer, ValidationRequest } from './contact-validation.js'

// Background work: on a busy machine the kernel runs the event loop's thread first.
lowerThreadPriority()

const answer = (message: ValidationAnswer) => parentPort!.postMessage(message)

parentPort!.on('message', ({ id, body, rules }: ValidationRequest) => {
  try {
    answer({ id, load: loadFromBody(Buffer.from(body.buffer, body.byteOffset, body.byteLength), rules) })
  } catch (error) {
    if (error instanceof DomainError) {
      answer({ id, error: { kind: error.kind, code: error.code, message: error.message, extra: error.extra, retryAfterSeconds: error.retryAfterSeconds } })
    } else {
      // Not the body's fault (a stack overflow on a pathological body, a bug): the loop retries inline.
      answer({ id, failed: (error as Error)?.message ?? String(error) })
    }
  }
})
