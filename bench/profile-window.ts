// BENCH_PROFILE=dir: a CPU profile and an allocation profile of one measured window of a bench
// (not the whole process: seeding, compiling and baselines would drown what is measured),
// written as <dir>/<name>.cpuprofile and .heapprofile. bench/sse/long-ticks.ts and
// bench/sse/allocations.ts read them. BENCH_PROMOTED=1: the allocation profile leaves out what
// young-generation collections freed (what lived long enough to be promoted).
import type { Session } from 'node:inspector'
import { mkdirSync, writeFileSync } from 'node:fs'

const profileDir = process.env.BENCH_PROFILE

export class ProfileWindow {
  private constructor(private readonly session: Session) {}

  /** Starts profiling this thread; null when BENCH_PROFILE is not set. */
  static async start(): Promise<ProfileWindow | null> {
    if (!profileDir) return null
    const { Session } = await import('node:inspector')
    const window = new ProfileWindow(new Session())
    window.session.connect()
    await window.post('Profiler.enable')
    await window.post('Profiler.setSamplingInterval', { interval: 500 })
    await window.post('Profiler.start')
    await window.post('HeapProfiler.enable')
    await window.post('HeapProfiler.startSampling', {
      samplingInterval: 16384,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: !process.env.BENCH_PROMOTED,
    })
    return window
  }

  /** Stops and writes <BENCH_PROFILE>/<name>.cpuprofile and .heapprofile. */
  async stop(name: string) {
    const { profile } = await this.post('Profiler.stop')
    // What is still in the young generation when the window ends was not freed by a scavenge
    // yet, dead or alive: two scavenges first, so that BENCH_PROMOTED counts only what outlived
    // them (the server runs with --expose-gc; without it the tail of the window stays counted).
    const gc = (globalThis as { gc?: (options: object) => void }).gc
    if (process.env.BENCH_PROMOTED && gc) for (let i = 0; i < 2; i++) gc({ type: 'minor', execution: 'sync' })
    const { profile: heap } = await this.post('HeapProfiler.stopSampling')
    mkdirSync(profileDir!, { recursive: true })
    writeFileSync(`${profileDir}/${name}.cpuprofile`, JSON.stringify(profile))
    writeFileSync(`${profileDir}/${name}.heapprofile`, JSON.stringify(heap))
    this.session.disconnect()
  }

  private post(method: string, params: object = {}): Promise<any> {
    return new Promise((resolve, reject) => this.session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))))
  }
}
