// Requests to one worker thread, each answered by its id. The thread starts on the first
// request and is let go (unref) while nothing is in flight, so an idle process can exit. It is
// restarted when it dies, a few times at most; then, or when it cannot start, requests answer
// 'unsent' and the caller does the work itself. A request in flight when the thread dies answers
// 'lost': the thread may or may not have done it, which only the caller can judge.
import { Worker } from 'node:worker_threads'

export type ThreadOutcome<Answer> = Answer | 'unsent' | 'lost'

export class ThreadRequests<Request extends { id: number }, Answer extends { id: number }> {
  private worker: Worker | null = null
  private readonly jobs = new Map<number, (outcome: ThreadOutcome<Answer>) => void>()
  private next = 0
  private starts = 0

  /**
   * `moduleUrl` is the caller's import.meta.url and `script` the worker's file name beside it,
   * without extension: under the TypeScript loader (tests, benches) the .ts source runs, built the .js.
   */
  constructor(
    private readonly moduleUrl: string,
    private readonly script: string,
    private readonly maxStarts = 3,
  ) {}

  request(build: (id: number) => Request): Promise<ThreadOutcome<Answer>> {
    const worker = this.running()
    if (!worker) return Promise.resolve('unsent')
    const id = this.next++
    const request = build(id)
    return new Promise(resolve => {
      try {
        worker.postMessage(request)
      } catch {
        // Not cloneable (a function, a symbol): the caller does it on its own thread.
        return resolve('unsent')
      }
      this.jobs.set(id, resolve)
      worker.ref() // work in progress keeps the process alive; idle, the thread does not
    })
  }

  /** Whether a thread is up now (no start for a question). */
  get up() {
    return this.worker !== null
  }

  private running(): Worker | null {
    if (this.worker) return this.worker
    if (this.starts >= this.maxStarts) return null
    this.starts++
    try {
      const extension = this.moduleUrl.endsWith('.ts') ? '.ts' : '.js'
      const worker = new Worker(new URL(`./${this.script}${extension}`, this.moduleUrl))
      worker.on('message', (answer: Answer) => {
        this.jobs.get(answer.id)?.(answer)
        this.jobs.delete(answer.id)
        if (this.jobs.size === 0) worker.unref()
      })
      const gone = () => {
        if (this.worker !== worker) return
        this.worker = null
        for (const done of this.jobs.values()) done('lost')
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
