// User messages let in at the pace the event loop can serve them. A loop past its busy target
// (OVERLOAD_LOOP_BUSY_PERCENT) serves every message late if it takes them all, and refusing all
// of them for a while and then all of them again only moves the queue in bursts (measured: a
// refuse/admit switch at 2,000 msg/s let in messages whose p99 was 250 ms). So the pace follows
// the loop, a token bucket per process:
//   - a window busier than the target: the pace becomes the rate admitted in it, scaled by
//     target / busy (what the loop could have served at the target), never above the last pace;
//   - a window well under the target (10 points): the pace grows by 10 % + 10/s, and it is
//     lifted after ten such windows once one refuses nothing;
//   - in between: held (growing there let the queue come back at twice the sustainable rate).
// The busy share is smoothed over windows: one window of a major collection does not pace.
// Work that is not messages (a spike of opens, a sweep) lowers the pace too, down to zero.
export const PACE_WINDOW_MS = 100
/** Tokens a bucket holds: this many seconds of its pace (at least one message). */
const BURST_SECONDS = 0.05
/** Weight of the newest window in the busy share the pace follows (one GC-heavy window alone does not pace). */
const SMOOTHING = 0.5
const CALM_MARGIN = 0.1
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
    if (busy > this.targetBusy) {
      const paced = admittedPerSecond * (this.targetBusy / busy)
      if (this.pace === null) this.startPacing(paced)
      else this.pace = Math.min(this.pace, paced)
      this.calmWindows = 0
    } else if (this.pace !== null && busy < this.targetBusy - CALM_MARGIN) {
      this.calmWindows++
      // Lifted once it no longer binds: a while under the target with nothing refused.
      if (this.calmWindows >= CALM_WINDOWS_TO_LIFT && this.refused === 0) this.pace = null
      else this.pace = this.pace * 1.1 + 10
    }
    this.admitted = 0
    this.refused = 0
  }

  /** Whether one more message may be taken now; takes its token when it may. */
  take(): boolean {
    if (this.pace !== null) {
      const at = this.now()
      const burst = Math.max(1, this.pace * BURST_SECONDS)
      this.tokens = Math.min(burst, this.tokens + ((at - this.refilledAt) / 1000) * this.pace)
      this.refilledAt = at
      if (this.tokens < 1) {
        this.refused++
        return false
      }
      this.tokens -= 1
    }
    this.admitted++
    return true
  }

  private startPacing(pace: number) {
    this.pace = pace
    this.tokens = 0
    this.refilledAt = this.now()
  }
}
