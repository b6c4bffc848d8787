// Validation of contact loads off the event loop. A body of up to 1000 contacts takes tens of
// milliseconds to parse and check (JSON Schema, phone and date rules); on the loop that serves
// live sessions it would hold every stream for as long. Large bodies go to a worker thread that
// runs the very same parseContactsBody and answers only "valid" or the ApiError to send, so the
// 400 is the same byte for byte; the loop then parses the body once (a valid body is needed on
// this thread anyway). Small bodies, or no worker (DIALER_VALIDATION_THREADS=0, or the worker
// failed), are validated inline.
import { Worker } from 'node:worker_threads'
import { ApiError } from '../gateway/errors.js'
import { contactsOf, parseContactsBody, type ContactInput } from './contact-input.js'

/** Bodies below this are validated inline (a round trip to the worker costs more). */
const INLINE_BYTES = 16 * 1024

type Answer = { id: number; ok: true } | { id: number; error: { status: number; code: string; message: string; extra: Record<string, unknown>; headers: Record<string, string> } } | { id: number; unparsable: true } | { id: number; failed: string }

class ValidationWorker {
  private readonly worker: Worker
  private readonly jobs = new Map<number, (answer: Answer | null) => void>()
  private next = 0
  dead = false

  constructor() {
    const here = import.meta.url
    // Under the TypeScript loader (tests, benches) the worker is the .ts source; built, the .js.
    const file = new URL(here.endsWith('.ts') ? './contact-validation-worker.ts' : './contact-validation-worker.js', here)
    this.worker = new Worker(file)
    this.worker.on('message', (answer: Answer) => {
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
  check(body: Buffer, now: number): Promise<Answer | null> {
    const id = this.next++
    return new Promise(resolve => {
      this.jobs.set(id, resolve)
      this.worker.ref() // a job in progress does
      this.worker.postMessage({ id, body, now })
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

  async validate(body: Buffer, parse: () => unknown, now: number): Promise<ContactInput[]> {
    const worker = body.length >= INLINE_BYTES ? this.pick() : null
    const answer = worker ? await worker.check(body, now) : null
    if (!answer || 'failed' in answer || 'unparsable' in answer) {
      // Inline: no worker, a worker gone or failing, or a body that is not JSON (parse() answers the usual 400).
      validationCounts.inline++
      return parseContactsBody(parse(), now)
    }
    validationCounts.offLoop++
    if ('error' in answer) {
      const { status, code, message, extra, headers } = answer.error
      throw new ApiError(status, code, message, extra, headers)
    }
    return contactsOf(parse())
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
 * The contacts of a load body, validated exactly as parseContactsBody does (same ApiErrors), off
 * the event loop when the body is large. `parse`: the request's JSON parser (ctx.json).
 */
export function validateContacts(body: Buffer, parse: () => unknown, now: number, threads: number): Promise<ContactInput[]> {
  if (threads <= 0) {
    validationCounts.inline++
    return Promise.resolve().then(() => parseContactsBody(parse(), now))
  }
  let pool = pools.get(threads)
  if (!pool) pools.set(threads, (pool = new ValidationPool(threads)))
  return pool.validate(body, parse, now)
}
