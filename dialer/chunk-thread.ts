// Contact-load chunks applied in a worker thread beside the embedded store. Applying a chunk is
// store work on the thread that runs it (LMDB puts, key and value encoding: ~95 µs per contact),
// and on the loop that serves live sessions it competes with every turn and stream write. LMDB
// lets several threads of one process open the same environment (its single writer lock orders
// their write transactions), so a thread of its own opens the service's database and runs the
// very same ChunkApplication; the loop only posts the chunk and reads back "closed or not".
//
// One thread per process, shared by every service instance in it (tests start many); each
// request names the database it is for. The chunk carries the service clock's time, so plans
// and operation timestamps are what the loop would have written. If the thread cannot start or
// dies, apply() answers null and the caller applies the chunk itself (every step of a chunk is
// idempotent, whatever the thread did of it); after a few restarts it stays off.
import { Worker } from 'node:worker_threads'
import type { Clock } from '../platform/clock.js'
import type { ChunkMessage } from './chunk-application.js'

export type ChunkRequest = { id: number; path: string; now: number; message: ChunkMessage } | { id: number; path: string; close: true }
export type ChunkAnswer = { id: number; closed: boolean } | { id: number; error: string } | { id: number; released: true }

const MAX_RESTARTS = 3

class ChunkWorker {
  private worker: Worker | null = null
  private readonly jobs = new Map<number, (answer: ChunkAnswer | null) => void>()
  private next = 0
  private restarts = 0

  /** The worker's answer, or null when there is no worker (the caller does the work). */
  request(build: (id: number) => ChunkRequest): Promise<ChunkAnswer | null> {
    const worker = this.running()
    if (!worker) return Promise.resolve(null)
    const id = this.next++
    return new Promise(resolve => {
      this.jobs.set(id, resolve)
      worker.ref() // work in progress keeps the process alive; idle, the thread does not
      worker.postMessage(build(id))
    })
  }

  /** Whether a worker is up now (no start for a question). */
  get up() {
    return this.worker !== null
  }

  private running(): Worker | null {
    if (this.worker) return this.worker
    if (this.restarts >= MAX_RESTARTS) return null
    this.restarts++
    try {
      const here = import.meta.url
      // Under the TypeScript loader (tests, benches) the worker is the .ts source; built, the .js.
      const worker = new Worker(new URL(here.endsWith('.ts') ? './chunk-thread-worker.ts' : './chunk-thread-worker.js', here))
      worker.on('message', (answer: ChunkAnswer) => {
        this.jobs.get(answer.id)?.(answer)
        this.jobs.delete(answer.id)
        if (this.jobs.size === 0) worker.unref()
      })
      const gone = () => {
        if (this.worker !== worker) return
        this.worker = null
        for (const done of this.jobs.values()) done(null)
        this.jobs.clear()
      }
      worker.on('error', gone)
      worker.on('exit', gone)
      worker.unref()
      this.worker = worker
      return worker
    } catch {
      return null
    }
  }
}

const shared = new ChunkWorker()

/** One service's use of the shared thread: its database, its clock. */
export class ChunkThread {
  private used = false

  constructor(
    private readonly path: string,
    private readonly clock: Clock,
  ) {}

  /** Applies a chunk in the thread: whether it closed the operation; null when the thread is not there. */
  async apply(message: ChunkMessage): Promise<boolean | null> {
    this.used = true
    const answer = await shared.request(id => ({ id, path: this.path, now: this.clock.now(), message }))
    if (answer === null) return null
    if ('error' in answer) throw new Error(answer.error)
    return 'closed' in answer ? answer.closed : null
  }

  /** Closes the thread's handle on this database (before the service closes its own). */
  async close() {
    if (!this.used || !shared.up) return
    await shared.request(id => ({ id, path: this.path, close: true }))
  }
}
