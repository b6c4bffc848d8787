// Contact loads checked and chunked off the event loop. A body of up to 1000 contacts costs
// milliseconds to parse, check (JSON Schema, phone and date rules), copy into queued contacts
// and encode, and leaves thousands of objects for the collector; on the loop that serves live
// sessions that holds every stream. Large bodies go to a worker thread that runs the very same
// loadFromBody (dialer/load-chunks.ts) and answers the domain error to throw (the 400 is the
// same byte for byte) or the load's chunks as JSON text, which the loop queues without reading.
// Small bodies, or no worker (DIALER_VALIDATION_THREADS=0, or the worker failed), are handled
// inline by the same function.
import { Worker } from 'node:worker_threads'
import { domainError, type ErrorKind } from '../platform/errors.js'
import { loadFromBody, type LoadRules, type PreparedLoad } from './load-chunks.js'

/** Bodies below this are validated inline (a round trip to the worker costs more). */
const INLINE_BYTES = 16 * 1024

export type ValidationRequest = { id: number; body: Uint8Array; rules: LoadRules }
export type ValidationAnswer =
  | { id: number; load: PreparedLoad }
  | { id: number; error: { kind: ErrorKind; code: string; message: string; extra: Record<string, unknown>; retryAfterSeconds?: number } }
  | { id: number; failed: string }

class ValidationWorker {
  private readonly worker: Worker
  private readonly jobs = new Map<number, (answer: ValidationAnswer | null) => void>()
  private next = 0
  dead = false

  constructor() {
    const here = import.meta.url
    // Under the TypeScript loader (tests, benches) the worker is the .ts source; built, the .js.
    const file = new URL(here.endsWith('.ts') ? './contact-validation-worker.ts' : './contact-validation-worker.js', here)
    this.worker = new Worker(file)
    this.worker.on('message', (answer: ValidationAnswer) => {
      this.jobs.get(answer.id)?.(answer)
      this.jobs.delete(answer.id)
      if (this.jobs.size === 0) this.worker.unref()
    })
    const fail = () => {
      this.dead = true
      for (const done of this.jobs.values()) done(null)
      this.jobs.clear()
    }
    this.worker.on('error', fail)
    this.worker.on('exit', fail)
    // Idle, the thread never keeps the process alive (after the listeners: adding one refs the port).
    this.worker.unref()
  }

  get load() {
    return this.jobs.size
  }

  /** The worker's verdict, or null when it is gone (the caller validates inline). */
  check(body: Buffer, rules: LoadRules): Promise<ValidationAnswer | null> {
    const id = this.next++
    return new Promise(resolve => {
      this.jobs.set(id, resolve)
      this.worker.ref() // a job in progress does
      this.worker.postMessage({ id, body, rules } satisfies ValidationRequest)
    })
  }

  terminate() {
    this.dead = true
    void this.worker.terminate()
  }
}

/** One pool per process, shared by every service instance in it; threads are unref'd. */
class ValidationPool {
  private workers: ValidationWorker[] = []
  private restarts = 0

  constructor(private readonly threads: number) {}

  private pick(): ValidationWorker | null {
    this.workers = this.workers.filter(w => !w.dead)
    // A worker that died is replaced a few times; after that, validation stays inline.
    while (this.workers.length < this.threads && this.restarts < this.threads + 3) {
      this.restarts++
      try {
        this.workers.push(new ValidationWorker())
      } catch {
        break
      }
    }
    return this.workers.reduce<ValidationWorker | null>((best, w) => (!best || w.load < best.load ? w : best), null)
  }

  async validate(body: Buffer, rules: LoadRules): Promise<PreparedLoad> {
    const worker = body.length >= INLINE_BYTES ? this.pick() : null
    const answer = worker ? await worker.check(body, rules) : null
    if (!answer || 'failed' in answer) {
      // Inline: no worker, or a worker gone or failing (the same function answers the same errors).
      validationCounts.inline++
      return loadFromBody(body, rules)
    }
    validationCounts.offLoop++
    if ('error' in answer) {
      const { kind, code, message, extra, retryAfterSeconds } = answer.error
      throw domainError(kind, code, message, extra, { retryAfterSeconds })
    }
    return answer.load
  }

  close() {
    for (const worker of this.workers) worker.terminate()
    this.workers = []
  }
}

const pools = new Map<number, ValidationPool>()

/** How many bodies were validated by a worker and inline (tests, diagnostics). */
export const validationCounts = { offLoop: 0, inline: 0 }

/**
 * A load body checked and chunked as loadFromBody does (same errors), off the event loop
 * when the body is large.
 */
export function validateLoad(body: Buffer, rules: LoadRules, threads: number): Promise<PreparedLoad> {
  if (threads <= 0) {
    validationCounts.inline++
    return Promise.resolve().then(() => loadFromBody(body, rules))
  }
  let pool = pools.get(threads)
  if (!pool) pools.set(threads, (pool = new ValidationPool(threads)))
  return pool.validate(body, rules)
}
