// A worker thread for test/platform/write-thread.test.ts: answers each request with its id and
// value, and exits (as a crashed thread would) when a request asks it to.
import { parentPort } from 'node:worker_threads'

parentPort!.on('message', (request: { id: number; value?: unknown; exit?: boolean }) => {
  if (request.exit) process.exit(3)
  parentPort!.postMessage({ id: request.id, value: request.value })
})
