// V8 settings the service runs with, set by startService() before it builds anything.
//
// Allocation-site pretenuring off. V8 watches how many objects from each allocation site survive
// a young-generation collection and, past a threshold, allocates that site's objects straight in
// the old generation. Here the sites that trip it are the store's write path (index keys, updated
// documents, counted moves) and a turn's steps: their objects live across one write transaction
// (a few milliseconds to tens of them) and then die. Allocated old, each dies only at a major
// collection, and every old object that points at a young one is one more slot each scavenge
// must visit: young collections get slower and major ones come sooner. Off, they die young, as
// they should.
import { setFlagsFromString } from 'node:v8'

const PRETENURING = 'allocation-site-pretenuring'

/**
 * Applies the service's V8 settings to this process (its worker threads share them) and answers
 * the flags it set. A setting given on the command line wins: `node --allocation-site-pretenuring
 * dist/main.js` runs with V8's default.
 */
export function applyV8Flags(execArgv: readonly string[] = process.execArgv): string[] {
  const given = execArgv.some(arg => arg.replace(/_/g, '-').replace(/^--(no-)?/, '') === PRETENURING)
  if (given) return []
  const flag = `--no-${PRETENURING}`
  setFlagsFromString(flag)
  return [flag]
}
