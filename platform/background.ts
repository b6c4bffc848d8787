// Background work (bulk contact loads, CSV imports, sweeps) shares the event loop with live
// sessions. It gives the loop back between slices: a yield lets every pending I/O callback
// (requests, stream writes, turns) run before the next slice, so realtime work waits at most one
// slice instead of a whole load.
import { readlinkSync } from 'node:fs'
import { getPriority, setPriority } from 'node:os'
import { setImmediate as immediate } from 'node:timers/promises'

/** Lets pending I/O and timers run first (setImmediate: after the poll phase). */
export const yieldToLoop = (): Promise<void> => immediate()

/** Runs `work` over `items` in slices of at most `size`, yielding before each slice. */
export async function inSlices<T, R>(items: T[], size: number, work: (slice: T[], offset: number) => Promise<R>): Promise<R[]> {
  const results: R[] = []
  for (let offset = 0; offset < items.length; offset += size) {
    await yieldToLoop()
    results.push(await work(items.slice(offset, offset + size), offset))
  }
  return results
}

/**
 * Lowers the OS scheduling priority of the calling thread (a worker thread doing background
 * work), so that on a busy machine the kernel runs the event loop's thread first. Linux keeps
 * a nice value per thread and `setpriority` accepts a thread id; elsewhere, or when refused,
 * nothing changes. Answers the nice value set, or null.
 */
export function lowerThreadPriority(nice = 10): number | null {
  try {
    // "/proc/thread-self" links to "<pid>/task/<tid>".
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop())
    if (!Number.isInteger(tid) || tid <= 0) return null
    setPriority(tid, nice)
    return getPriority(tid)
  } catch {
    return null
  }
}
