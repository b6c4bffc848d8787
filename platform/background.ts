// Background work (bulk contact loads, CSV imports, sweeps) shares the event loop with live
// sessions. It gives the loop back between slices: a yield lets every pending I/O callback
// (requests, stream writes, turns) run before the next slice, so realtime work waits at most one
// slice instead of a whole load.
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
