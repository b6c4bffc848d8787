// How long reports' data is kept (README "Retention"; Config.retention, 0 = forever), and what a
// report over a range that is no longer kept answers.
//
// Session records expire SESSION_RECORD_RETENTION_DAYS after their session started (TTL on
// `started_at`, the Date of start_time), the report blocks REPORT_BLOCK_RETENTION_DAYS after the
// block starts (TTL on `slot_at`, the Date of slot), never sooner than the records (config.ts).
// Records and blocks written before these fields existed get them once, in bounded slices.
//
// A range that reaches back past what is kept is refused with 410 DATA_EXPIRED naming the first
// instant that is answered (`retainedFrom`), never answered with zeros. How far back each
// endpoint reaches: sessions-detail lists records; execute-report reads whole quarters from the
// blocks and the bits of quarters at a range's ends from the records, so before the records'
// horizon its ends must fall on the quarter grid. The horizon is also kept in the store as it
// moves (a floor that never goes back), so lengthening a retention does not make ranges whose
// data was already deleted read as empty.
import { Expired } from '../platform/errors.js'
import type { Config } from '../platform/config.js'
import type { Clock } from '../platform/clock.js'
import type { Logger } from '../platform/logger.js'
import type { Collection, Doc, Filter, IndexSpec, Store } from '../platform/store/index.js'
import { SESSION_RECORDS, SLOT_MIGRATIONS, type SessionRecordDoc } from './session-records.js'
import { QUARTER, SLOT_COUNTS, SLOT_STATS, SLOT_STATS_OPTIONS } from './slots.js'

const DAY_S = 86_400
const DAY_MS = DAY_S * 1000
/** Where the horizons are kept (one document per kind of data). */
export const REPORT_RETENTION = 'report_retention'
const MIGRATION_ID = 'retention-dates-v1'
const SLICE = 500
/** How often the kept horizon moves on; it is written this far ahead of what the TTL has deleted. */
const FLOOR_EVERY_MS = 60_000

type Kind = 'records' | 'blocks'

const ttl = (days: number) => (days > 0 ? { expireAfterSeconds: days * DAY_S } : {})

/** The TTL indexes; a kind kept forever keeps its index without a TTL (turning it on again changes only that). */
export function reportRetentionIndexes(retention: Config['retention']): Record<string, IndexSpec[]> {
  const blocks: IndexSpec[] = [{ name: 'slot_ttl', key: { slot_at: 1 }, ...ttl(retention.reportBlocksDays) }]
  return {
    [SESSION_RECORDS]: [{ name: 'started_ttl', key: { started_at: 1 }, ...ttl(retention.sessionRecordsDays) }],
    [SLOT_COUNTS]: blocks,
    [SLOT_STATS]: blocks,
  }
}

export const dataExpired = (parameter: 'start_ts' | 'end_ts', retainedFrom: number, message: string) =>
  new Expired('DATA_EXPIRED', message, {
    parameter,
    retainedFrom,
    details: [{ parameter, code: 'DATA_EXPIRED', message }],
  })

const iso = (t: number) => new Date(t).toISOString()

export class ReportRetention {
  /** The kept horizons: nothing before them is answered, whatever the retention is now. */
  private readonly floors: Record<Kind, number> = { records: -Infinity, blocks: -Infinity }
  private readonly kept: Collection<Doc & { floor: number }>
  private timer?: NodeJS.Timeout
  private migration: Promise<void> | undefined
  private stopped = false

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly retention: Config['retention'],
  ) {
    this.kept = store.collection(REPORT_RETENTION)
  }

  async start() {
    for (const [collection, indexes] of Object.entries(reportRetentionIndexes(this.retention))) await this.store.ensureIndexes(collection, indexes)
    for (const doc of await this.kept.find({})) if (doc._id === 'records' || doc._id === 'blocks') this.floors[doc._id] = doc.floor
    await this.keepFloors()
    this.timer = setInterval(() => void this.keepFloors().catch(error => this.logger.warn('reports: retention horizon not kept', { error })), FLOOR_EVERY_MS)
    this.timer.unref()
    this.migration = this.migrate().catch(error => this.logger.error('reports: dating earlier records and blocks for their retention failed; the next start goes on', { error }))
  }

  async stop() {
    this.stopped = true
    clearInterval(this.timer)
    await this.migration
  }

  private days(kind: Kind) {
    return kind === 'records' ? this.retention.sessionRecordsDays : this.retention.reportBlocksDays
  }

  /** The first instant of `kind` that is kept now (-Infinity: all of it). */
  retainedFrom(kind: Kind): number {
    const days = this.days(kind)
    return Math.max(this.floors[kind], days > 0 ? this.clock.now() - days * DAY_MS : -Infinity)
  }

  /** Records the horizons, a little ahead of the TTLs that follow them, so they outlive a change of retention. */
  private async keepFloors() {
    for (const kind of ['records', 'blocks'] as const) {
      const days = this.days(kind)
      if (days === 0) continue
      const floor = this.clock.now() - days * DAY_MS + FLOOR_EVERY_MS
      await this.kept.updateOne({ _id: kind }, { $max: { floor } }, { upsert: true })
      this.floors[kind] = Math.max(this.floors[kind], floor)
    }
  }

  /** sessions-detail lists records: its range starts where they are kept. */
  checkRecords(startTs: number) {
    const from = this.retainedFrom('records')
    if (startTs < from) {
      throw dataExpired('start_ts', from, `Sessions that started before ${iso(from)} are no longer kept (SESSION_RECORD_RETENTION_DAYS); start_ts must be at least ${from}`)
    }
  }

  /**
   * execute-report reads blocks for whole quarters and records for the rest. `blocksReady`:
   * false while earlier records are still being added to the blocks (it reads records only then).
   */
  checkReport(startTs: number, endTs: number, blocksReady: boolean) {
    const records = this.retainedFrom('records')
    if (!blocksReady) return this.checkRecords(startTs)
    const blocks = this.retainedFrom('blocks')
    if (startTs < blocks) {
      throw dataExpired('start_ts', blocks, `Report data before ${iso(blocks)} is no longer kept (REPORT_BLOCK_RETENTION_DAYS); start_ts must be at least ${blocks}`)
    }
    for (const [parameter, t] of [['start_ts', startTs], ['end_ts', endTs]] as const) {
      if (t < records && t % QUARTER !== 0) {
        throw dataExpired(
          parameter,
          records,
          `Before ${iso(records)} only 15-minute totals are kept (SESSION_RECORD_RETENTION_DAYS): ${parameter} must fall on a quarter hour (a multiple of ${QUARTER}) or be at least ${records}`,
        )
      }
    }
  }

  /**
   * Records and blocks written before they carried the dates their TTLs read get them, in _id
   * order a slice at a time, once per database.
   */
  private async migrate() {
    const done = this.store.collection(SLOT_MIGRATIONS)
    if (await done.findOne({ _id: MIGRATION_ID })) return
    const records = this.store.collection<SessionRecordDoc>(SESSION_RECORDS)
    await this.date(records, 'started_at', 'start_time')
    await this.date(this.store.collection(SLOT_COUNTS), 'slot_at', 'slot')
    await this.date(this.store.collection(SLOT_STATS, SLOT_STATS_OPTIONS), 'slot_at', 'slot')
    if (this.stopped) return
    await done.updateOne({ _id: MIGRATION_ID }, { $setOnInsert: { doneAt: new Date() } }, { upsert: true })
    this.logger.info('reports: earlier records and blocks dated for their retention')
  }

  private async date<T extends Doc>(collection: Collection<T>, field: string, time: string) {
    let after: string | null = null
    while (!this.stopped) {
      const page: T[] = await collection.find((after === null ? {} : { _id: { $gt: after } }) as Filter<T>, { sort: { _id: 1 }, limit: SLICE, projection: { [field]: 1, [time]: 1 } })
      const missing = page.filter(doc => !(doc[field] instanceof Date) && Number.isFinite(doc[time]))
      if (missing.length > 0) {
        await collection.bulkWrite(missing.map(doc => ({ updateOne: { filter: { _id: doc._id, [field]: { $exists: false } }, update: { $set: { [field]: new Date(doc[time]) } } } })), { ordered: false })
      }
      if (page.length < SLICE) return
      after = page[page.length - 1]!._id
      await new Promise(resolve => setImmediate(resolve))
    }
  }
}
