// User messages let in at the pace the event loop can serve them. A loop past its busy target
// (OVERLOAD_LOOP_BUSY_PERCENT) serves every message late if it takes them all, and refusing all
// of them for a while and then all of them again only moves the queue in bursts: what such a
// switch lets in still waits behind a full loop. So the pace follows the loop, a token bucket
// per process. Each window, what the loop would serve at the target is
// estimated as the rate admitted in it scaled by target / busy; then:
//   - a window busier than the target: the pace becomes that estimate, never above the last pace;
//   - a window under the target: the pace grows toward the estimate (at most ×1.5, at least
//     +10/s, so a pace cut to zero by other work comes back), and it is lifted after ten such
//     windows in a row that refused nothing.
// A pace set while the loop was busy with other work (an opening burst) grows whenever there is
// room under the target: held until the loop fell well under it, it would refuse messages the
// loop could serve.
// The busy share is smoothed over windows: one window of a major collection does not pace.
// Work that is not messages (a spike of opens, a sweep) lowers the pace too, down to zero.
export const PACE_WINDOW_MS = 100
/** Tokens a bucket holds: this many seconds of its pace (at least one message). */
const BURST_SECONDS = 0.05
/** Weight of the newest window in the busy share the pace follows (one GC-heavy window alone does not pace). */
const SMOOTHING = 0.5
/** Growth of the pace in one window under the target: at most this factor, at least GROWTH_STEP per second. */
const MAX_GROWTH = 1.5
const GROWTH_STEP = 10
const CALM_WINDOWS_TO_LIFT = 10

export class PacedAdmission {
  /** Messages per second let in; null = no pace (the loop is under its target). */
  pace: number | null = null
  private tokens = 0
  private refilledAt = 0
  private admitted = 0
  private refused = 0
  private calmWindows = 0
  private busy = 0

  /** `targetBusy`: the share (0..1) of a window the loop may be busy. */
  constructor(
    private readonly targetBusy: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The end of a window of PACE_WINDOW_MS in which the loop was busy `busy` (0..1) of the time. */
  window(windowBusy: number, windowMs = PACE_WINDOW_MS) {
    const busy = (this.busy = SMOOTHING * windowBusy + (1 - SMOOTHING) * this.busy)
    const admittedPerSecond = (this.admitted * 1000) / windowMs
    // What the loop would serve at the target if a message cost what this window's did.
    const servable = busy > 0 ? admittedPerSecond * (this.targetBusy / busy) : Infinity
    if (busy > this.targetBusy) {
      if (this.pace === null) this.startPacing(servable)
      else this.pace = Math.min(this.pace, servable)
      this.calmWindows = 0
    } else if (this.pace !== null) {
      this.calmWindows = this.refused === 0 ? this.calmWindows + 1 : 0
      // Lifted once it no longer binds: a while under the target with nothing refused.
      if (this.calmWindows >= CALM_WINDOWS_TO_LIFT) this.pace = null
      else this.pace = Math.max(this.pace + GROWTH_STEP, Math.min(servable, this.pace * MAX_GROWTH))
    }
    this.admitted = 0
    this.refused = 0
  }

  /**
   * Whether a message would be let in now, at the edge of a process where its turn runs too: a
   * refusal there costs less than one after its session is found. Its token is taken later (take()).
   */
  allows(): boolean {
    if (this.pace === null) return true
    this.refill()
    if (this.tokens >= 1) return true
    this.refused++
    return false
  }

  /** Whether one more message may be taken now; takes its token when it may. */
  take(): boolean {
    if (this.pace !== null) {
      this.refill()
      if (this.tokens < 1) {
        this.refused++
        return false
      }
      this.tokens -= 1
    }
    this.admitted++
    return true
  }

  private refill() {
    const at = this.now()
    const burst = Math.max(1, this.pace! * BURST_SECONDS)
    this.tokens = Math.min(burst, this.tokens + ((at - this.refilledAt) / 1000) * this.pace!)
    this.refilledAt = at
  }

  private startPacing(pace: number) {
    this.pace = pace
    this.tokens = 0
    this.refilledAt = this.now()
  }
}
