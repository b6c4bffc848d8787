// The thread of dialer/chunk-thread.ts: opens each service's embedded database on first use and
// applies chunks with the same ChunkApplication the loop would run, over repositories whose
// clock reads the time the chunk was posted with.
import { parentPort } from 'node:worker_threads'
import { lowerThreadPriority } from '../platform/background.js'
import { ThreadStoreHandles } from '../platform/store/thread-handles.js'
import { ActiveContacts } from './active-contacts.js'
import { BatchLog } from './batch-log.js'
import { Batches } from './batches.js'
import { ChunkApplication } from './chunk-application.js'
import type { ChunkAnswer, ChunkRequest } from './chunk-thread.js'
import { Operations } from './operations.js'

// Background work: on a busy machine the kernel runs the event loop's thread first.
lowerThreadPriority()

const stores = new ThreadStoreHandles()

const answer = (message: ChunkAnswer) => parentPort!.postMessage(message)

parentPort!.on('message', (request: ChunkRequest) => {
  void handle(request).catch(error => answer({ id: request.id, error: (error as Error)?.message ?? String(error) }))
})

async function handle(request: ChunkRequest) {
  if ('close' in request) {
    await stores.release(request.path)
    return answer({ id: request.id, released: true })
  }
  const store = stores.open(request.path)
  const clock = { now: () => request.now }
  const application = new ChunkApplication({
    store,
    clock,
    batches: new Batches(store, clock),
    operations: new Operations(store, clock),
    log: new BatchLog(store, clock),
    active: new ActiveContacts(store),
  })
  answer({ id: request.id, closed: await application.process(request.message) })
}
