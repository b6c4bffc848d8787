// What every bench does at the end: results.json next to its run.ts, saying when, on what
// machine and for how long it ran (figures only compare within one machine and run).
import { cpus } from 'node:os'
import { writeFileSync } from 'node:fs'
import { constants, PerformanceObserver } from 'node:perf_hooks'
import { relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const REPO_ROOT = fileURLToPath(new URL('..', import.meta.url))

export const machineInfo = () => ({ cpus: cpus().length, cpuModel: cpus()[0]?.model, node: process.version, platform: `${process.platform} ${process.arch}` })

export const secondsSince = (started: number) => Math.round((Date.now() - started) / 1000)

/** The fields a results.json starts with: date, machine, durationSeconds. */
export const runHeader = (started: number) => ({ date: new Date().toISOString(), machine: machineInfo(), durationSeconds: secondsSince(started) })

/** Writes `results` to results.json beside the bench's run.ts (pass its import.meta.url). */
export function writeResults(runUrl: string, started: number, results: object) {
  const file = new URL('./results.json', runUrl)
  writeFileSync(file, JSON.stringify(results, null, 2) + '\n')
  console.log(`done in ${secondsSince(started)} s; ${relative(REPO_ROOT, fileURLToPath(file))} written`)
}

/**
 * This thread's garbage collections since the last reset(): counts and pause times, young
 * (scavenges) and old (mark-compact, incremental marking) apart, and the longest pause.
 */
export class GcTally {
  major = 0
  minor = 0
  majorMs = 0
  minorMs = 0
  maxMs = 0
  private readonly observer = new PerformanceObserver(list => {
    for (const entry of list.getEntries()) {
      const kind = (entry as any).detail?.kind ?? (entry as any).kind
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR || kind === constants.NODE_PERFORMANCE_GC_INCREMENTAL) {
        this.major++
        this.majorMs += entry.duration
      } else {
        this.minor++
        this.minorMs += entry.duration
      }
      this.maxMs = Math.max(this.maxMs, entry.duration)
    }
  })

  constructor() {
    this.observer.observe({ entryTypes: ['gc'] })
  }

  reset() {
    Object.assign(this, { major: 0, minor: 0, majorMs: 0, minorMs: 0, maxMs: 0 })
  }

  /** The figures so far (entries are delivered asynchronously: read after a turn of the loop). */
  read() {
    const { major, minor, majorMs, minorMs, maxMs } = this
    return { major, minor, majorMs, minorMs, maxMs }
  }
}
