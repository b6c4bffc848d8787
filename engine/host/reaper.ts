// The orphan reaper: closes sessions that are live in the store but live on no node any more
// (their node died: kill -9, OOM) and whose idle deadline has passed, exactly as their idle
// timeout would have — state `destroyed`, reason `idle_timeout`, report record `abandoned`, crew
// slot released once. Without it such a session is restored only on its next command; one whose
// client never comes back would hold its crew slot (engine/persistence/crew-slots.ts) for ever.
//
// Every process that hosts sessions runs one (the in-process host, every engine node). Every
// ENGINE_REAPER_INTERVAL_MS it looks up live session documents whose persisted idle deadline
// has passed (index `state_idle_deadline`), skips those this host runs (their own idle timer
// closes them), and for each of the others:
//   - engine nodes first take the session's lease, as a restore on a command would; the claim
//     fails when another live node owns it (the owners bucket's compare-and-set decides
//     between two reapers), and succeeds when its owner is dead or there is none;
//   - then the host restores it through its ordinary restore path. The restore re-arms the idle
//     timer from the checkpoint's deadline and does not touch it, so the timer fires at once and
//     the session closes through the normal path (log, record, tombstone, slot, lease). That is
//     why the reaper has no close logic of its own for restorable sessions: it is the least new
//     code, and the close is the very one an idle timeout runs.
//   - a session that cannot be restored (its crew is no longer configured; or a document written
//     before sessions were inserted with their opening snapshot, whose node died during the
//     first reply) is closed here the same way by hand.
// Both closes are conditional updates on the session document (still active/paused; here also
// the idle deadline read by the scan unchanged), and the crew slot is released only when that
// update matched: two reapers (or a reaper and a returning client) release a slot once.
import type { Clock } from '../../platform/clock.js'
import type { Logger } from '../../platform/logger.js'
import type { Store } from '../../platform/store/index.js'
import { SessionRecorder } from '../../reports/index.js'
import { CrewSlots } from '../persistence/crew-slots.js'
import type { SessionHost } from './host.js'
import { SessionStore, type ExpiredSession } from '../persistence/session-store.js'

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

export class OrphanReaper {
  private readonly sessions: SessionStore
  private readonly slots: CrewSlots
  private readonly recorder: SessionRecorder
  private timer?: NodeJS.Timeout
  private sweeping: Promise<number> | null = null

  constructor(private readonly options: ReaperOptions) {
    this.sessions = new SessionStore(options.store)
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
    const orphans = await this.sessions.expired(this.options.clock.now(), this.options.batch ?? 500)
    let reaped = 0
    for (const orphan of orphans) {
      if (host.hosts(orphan.sessionId)) continue
      try {
        if (await this.reap(orphan)) reaped++
      } catch (error) {
        logger.warn('orphan session not reaped', { sessionId: orphan.sessionId, error })
      }
    }
    if (reaped) logger.info('orphan sessions reaped', { count: reaped })
    return reaped
  }

  private async reap(orphan: ExpiredSession): Promise<boolean> {
    const { leases, host } = this.options
    const { sessionId } = orphan
    if (leases && !(await leases.claim(sessionId))) return false
    // Restored past its idle deadline: its timer fires at once and closes it (the lease goes with it).
    if (await host.restore(sessionId)) return true
    try {
      return await this.close(orphan)
    } finally {
      await leases?.release(sessionId)
    }
  }

  /** What the host's idle expiry does, for a session the host cannot restore. */
  private async close(orphan: ExpiredSession): Promise<boolean> {
    const { sessionId, idleDeadline } = orphan
    const at = this.options.clock.now()
    if (!(await this.sessions.markDestroyed(sessionId, { reason: 'idle_timeout', at, idleDeadline }))) return false
    await this.slots.release(orphan.accountId, orphan.crewId)
    await this.recorder.closed(sessionId, { endTime: at, status: 'abandoned', reason: 'idle_timeout' })
    await this.sessions.deleteLog(sessionId)
    return true
  }
}
