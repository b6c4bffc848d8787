// The orphan reaper: closes sessions that are live in the store but live on no node any more
// (their node died: kill -9, OOM) and whose idle deadline has passed, exactly as their idle
// timeout would have — state `destroyed`, reason `idle_timeout`, report record `abandoned`, crew
// slot released once. Without it such a session is restored only on its next command; one whose
// client never comes back would hold its crew slot (engine/crew-slots.ts) for ever.
//
// Every process that hosts sessions runs one (the in-process host, every engine node). Every
// ENGINE_REAPER_INTERVAL_MS it looks up live session documents whose persisted idle deadline
// has passed (index `state_idle_deadline`), skips those this host runs (their own idle timer
// closes them), and for each of the others:
//   - engine nodes first take the session's lease, as a restore on a command would; the claim
//     fails when another live node owns it (the owners bucket's compare-and-set decides
//     between two reapers), and succeeds when its owner is dead or there is none;
//   - then the host restores it through its ordinary restore path. The restore re-arms the idle
//     timer from the snapshot's deadline and does not touch it, so the timer fires at once and
//     the session closes through the normal path (log, record, tombstone, slot, lease). That is
//     why the reaper has no close logic of its own for restorable sessions: it is the least new
//     code, and the close is the very one an idle timeout runs.
//   - a session that cannot be restored (no snapshot yet: its node died during the first reply;
//     or its crew is no longer configured) is closed here the same way by hand.
// Both closes are conditional updates on the session document (still active/paused; here also
// the idle deadline read by the scan unchanged), and the crew slot is released only when that
// update matched: two reapers (or a reaper and a returning client) release a slot once.
import type { Clock } from '../platform/clock.js'
import type { Logger } from '../platform/logger.js'
import type { Collection, Doc, Store } from '../platform/store/index.js'
import { SessionRecorder } from '../reports/index.js'
import { CrewSlots } from './crew-slots.js'
import { SESSION_LOG, SESSIONS, type SessionHost } from './host.js'

interface OrphanDoc extends Doc {
  accountId: string
  crewId: string
  deadlines: { idle: number }
}

export interface ReaperOptions {
  host: SessionHost
  store: Store
  clock: Clock
  logger: Logger
  intervalMs: number
  /** Engine nodes: take the session's lease (false: another live node owns it) and give it back. */
  leases?: { claim(sessionId: string): Promise<boolean>; release(sessionId: string): Promise<void> }
  /** Sessions looked at per sweep (the oldest deadlines first). */
  batch?: number
}

const LIVE = { $in: ['active', 'paused'] }

export class OrphanReaper {
  private readonly sessions: Collection<OrphanDoc>
  private readonly slots: CrewSlots
  private readonly recorder: SessionRecorder
  private timer?: NodeJS.Timeout
  private sweeping: Promise<number> | null = null

  constructor(private readonly options: ReaperOptions) {
    this.sessions = options.store.collection<OrphanDoc>(SESSIONS)
    this.slots = new CrewSlots(options.store)
    this.recorder = new SessionRecorder(options.store)
  }

  start() {
    this.timer = setInterval(() => void this.sweep(), this.options.intervalMs)
    this.timer.unref()
  }

  async stop() {
    clearInterval(this.timer)
    await this.sweeping
  }

  /** One pass (one at a time); resolves with the number of orphans restored to expire or closed. */
  sweep(): Promise<number> {
    if (!this.sweeping) {
      this.sweeping = this.run()
        .catch(error => {
          this.options.logger.warn('orphan reaper sweep failed', { error })
          return 0
        })
        .finally(() => (this.sweeping = null))
    }
    return this.sweeping
  }

  private async run(): Promise<number> {
    const { host, logger } = this.options
    const orphans = await this.sessions.find(
      { state: LIVE, 'deadlines.idle': { $lt: this.options.clock.now() } },
      { sort: { 'deadlines.idle': 1 }, limit: this.options.batch ?? 500, projection: { accountId: 1, crewId: 1, deadlines: 1 } },
    )
    let reaped = 0
    for (const doc of orphans) {
      if (host.hosts(doc._id)) continue
      try {
        if (await this.reap(doc)) reaped++
      } catch (error) {
        logger.warn('orphan session not reaped', { sessionId: doc._id, error })
      }
    }
    if (reaped) logger.info('orphan sessions reaped', { count: reaped })
    return reaped
  }

  private async reap(doc: OrphanDoc): Promise<boolean> {
    const { leases, host } = this.options
    if (leases && !(await leases.claim(doc._id))) return false
    // Restored past its idle deadline: its timer fires at once and closes it (the lease goes with it).
    if (await host.restore(doc._id)) return true
    try {
      return await this.close(doc)
    } finally {
      await leases?.release(doc._id)
    }
  }

  /** What the host's idle expiry does, for a session the host cannot restore. */
  private async close(doc: OrphanDoc): Promise<boolean> {
    const at = this.options.clock.now()
    const closed = await this.sessions.updateOne(
      { _id: doc._id, state: LIVE, 'deadlines.idle': doc.deadlines.idle },
      { $set: { state: 'destroyed', snapshot: null, destroyedAt: new Date(at), closeReason: 'idle_timeout' } },
    )
    if (closed.matchedCount !== 1) return false
    await this.slots.release(doc.accountId, doc.crewId)
    await this.recorder.closed(doc._id, { endTime: at, status: 'abandoned', reason: 'idle_timeout' })
    await this.options.store.collection(SESSION_LOG).deleteMany({ sessionId: doc._id })
    return true
  }
}
