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
import type { Clock } from '../platform/clock.js'
import { ThreadRequests } from '../platform/thread-requests.js'
import type { ChunkMessage } from './chunk-application.js'

export type ChunkRequest = { id: number; path: string; now: number; message: ChunkMessage } | { id: number; path: string; close: true }
export type ChunkAnswer = { id: number; closed: boolean } | { id: number; error: string } | { id: number; released: true }

const shared = new ThreadRequests<ChunkRequest, ChunkAnswer>(import.meta.url, 'chunk-thread-worker')

/** One service's use of the shared thread: its database, its clock. */
export class ChunkThread {
  private used = false

  /** `written`: called once the thread answered, so that the loop's next read sees what it committed. */
  constructor(
    private readonly path: string,
    private readonly clock: Clock,
    private readonly written: () => void = () => {},
  ) {}

  /** Applies a chunk in the thread: whether it closed the operation; null when the thread is not there. */
  async apply(message: ChunkMessage): Promise<boolean | null> {
    this.used = true
    const answer = await shared.request(id => ({ id, path: this.path, now: this.clock.now(), message }))
    if (answer !== 'unsent') this.written()
    // Not sent, or the thread died with it: every step of a chunk is idempotent, the caller applies it.
    if (answer === 'unsent' || answer === 'lost') return null
    if ('error' in answer) throw new Error(answer.error)
    return 'closed' in answer ? answer.closed : null
  }

  /** Closes the thread's handle on this database (before the service closes its own). */
  async close() {
    if (!this.used || !shared.up) return
    await shared.request(id => ({ id, path: this.path, close: true }))
  }
}
