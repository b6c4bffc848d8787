// Which dialing schedulers are alive. Each scheduler writes a beat (service clock) to
// `dialer_schedulers` every quarter of DIALER_SCHEDULER_DEAD_AFTER_MS, from a timer of its own
// (it beats while it drains attempts in flight too) and at the start of a cycle when one is due.
// A scheduler silent for longer than that died with its process (kill -9, a lost machine): the
// contacts it had claimed are released at the next look for lost claims, instead of staying in
// flight, and counted against the batch's room, until DIALER_CLAIM_TIMEOUT_MS (1 h) has passed.
// Beats expire from the store after a day (TTL), whether or not their scheduler said goodbye.
import type { Clock } from '../../platform/clock.js'
import type { Collection, Store } from '../../platform/store/index.js'
import { COLLECTIONS } from '../collections.js'

const KEEP_BEATS_MS = 24 * 60 * 60_000

interface BeatDoc {
  _id: string
  beatAt: Date
  expiresAt: Date
}

export class SchedulerPresence {
  private readonly beats: Collection<BeatDoc>
  private timer?: NodeJS.Timeout
  /** Service-clock time of the last beat written (-Infinity: none yet). */
  private beatAt = -Infinity

  constructor(
    store: Store,
    private readonly clock: Clock,
    private readonly workerId: string,
    /** A scheduler without a beat for this long is dead (DIALER_SCHEDULER_DEAD_AFTER_MS). */
    readonly deadAfterMs: number,
  ) {
    this.beats = store.collection<BeatDoc>(COLLECTIONS.schedulers)
  }

  private get beatEveryMs() {
    return this.deadAfterMs / 4
  }

  /** Beats now and then every quarter of the dead-after time, until stop(). */
  start(onError: (error: unknown) => void) {
    clearInterval(this.timer)
    this.beat().catch(onError)
    this.timer = setInterval(() => this.beat().catch(onError), this.beatEveryMs).unref()
  }

  /** Beats when the last beat is a quarter of the dead-after time old (by the service clock). */
  async beatIfDue() {
    if (this.clock.now() - this.beatAt >= this.beatEveryMs) await this.beat()
  }

  async beat() {
    const now = this.clock.now()
    this.beatAt = now
    await this.beats.updateOne({ _id: this.workerId }, { $set: { beatAt: new Date(now), expiresAt: new Date(now + KEEP_BEATS_MS) } }, { upsert: true })
  }

  /** No more beats; the beat goes (its claims are all settled by then: the scheduler drained). */
  async stop() {
    clearInterval(this.timer)
    this.timer = undefined
    await this.beats.deleteOne({ _id: this.workerId })
  }

  /** Ids of the schedulers that beat within the dead-after time. */
  async alive(now: number): Promise<string[]> {
    const docs = await this.beats.find({ beatAt: { $gt: new Date(now - this.deadAfterMs) } }, { projection: { _id: 1 } })
    return docs.map(d => d._id)
  }
}
