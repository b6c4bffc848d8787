// The thread of platform/store/write-thread.ts: opens each embedded database on first use and
// runs the writes it is sent with the same LmdbCollection code the loop would run. The writes of
// a message all start at once (not each after the one before it finishes), so lmdb-js gathers
// them into one transaction, in the order they were sent.
import { parentPort } from 'node:worker_threads'
import { ThreadStoreHandles } from './thread-handles.js'
import type { WriteAnswer, WriteMethod, WriteOutcome, WriteRequest } from './write-thread.js'

const stores = new ThreadStoreHandles()

const answer = (message: WriteAnswer) => parentPort!.postMessage(message)

parentPort!.on('message', (request: WriteRequest) => {
  void handle(request).catch((error: Error) => answer({ id: request.id, outcomes: 'writes' in request ? request.writes.map(() => failed(error)) : [] }))
})

const failed = (error: Error): WriteOutcome => {
  const code = (error as { code?: unknown })?.code
  return { error: { name: error?.name ?? 'Error', message: error?.message ?? String(error), ...(typeof code === 'number' ? { code } : {}) } }
}

async function handle(request: WriteRequest) {
  if ('close' in request) {
    await stores.release(request.path)
    return answer({ id: request.id, released: true })
  }
  const store = stores.open(request.path)
  // All started at once, in order: lmdb-js runs them in one transaction, in that order.
  const outcomes = await Promise.all(
    request.writes.map(async ({ collection, method, args }): Promise<WriteOutcome> => {
      try {
        const target = store.collection(collection) as unknown as Record<WriteMethod, (...a: unknown[]) => Promise<unknown>>
        return { result: await target[method](...args) }
      } catch (error) {
        return failed(error as Error)
      }
    }),
  )
  answer({ id: request.id, outcomes })
}
