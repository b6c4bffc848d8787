// Records written before the pre-aggregated blocks existed (slots.ts) are added to them once, at
// start, in bounded slices (500 records, in _id order, one after the other, yielding between
// slices). Until the whole collection has been through it, reports read the records alone, so
// results stay exact during the migration; the migration is marked done in the store, so later
// starts skip it. Each record is claimed by a conditional update before it is
// added, so nodes migrating at once, or a session closing meanwhile, never add it twice.
import type { Logger } from '../platform/logger.js'
import type { SessionRecorder } from './session-records.js'

const SLICE = 500
const MAX_FAILURES = 5

export class SlotMigration {
  private done = false
  private stopped = false
  private running: Promise<void> | null = null

  constructor(
    private readonly recorder: SessionRecorder,
    private readonly logger: Logger,
  ) {}

  /** True once every record is in the blocks. */
  ready(): boolean {
    return this.done
  }

  /** Resolves at once when the migration was done before; else after the first slice (the rest runs on). */
  async start() {
    if (await this.recorder.slotsComplete()) {
      this.done = true
      return
    }
    const next = await this.recorder.migrateSlice(null, SLICE)
    if (next === null) {
      this.done = true
      return
    }
    this.logger.info('reports: adding earlier session records to the report blocks', { slice: SLICE })
    this.running = this.runFrom(next)
  }

  async stop() {
    this.stopped = true
    await this.running
  }

  private async runFrom(after: string) {
    let cursor: string | null = after
    let failures = 0
    let migrated = SLICE
    while (cursor !== null && !this.stopped) {
      await new Promise(resolve => setImmediate(resolve))
      try {
        cursor = await this.recorder.migrateSlice(cursor, SLICE)
        migrated += SLICE
        failures = 0
      } catch (error) {
        // Bounded: after a few failures in a row the reports stay on the records (exact, slower).
        if (++failures >= MAX_FAILURES) {
          this.logger.error('reports: giving up adding earlier records to the report blocks; reports read records until the next start', { error })
          return
        }
        await new Promise(resolve => setTimeout(resolve, 200 * 2 ** failures).unref())
      }
    }
    if (cursor === null) {
      this.done = true
      this.logger.info('reports: earlier session records added to the report blocks', { records: migrated })
    }
  }
}
