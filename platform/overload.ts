// Overload is answered, not queued. Past what this process can serve, new work is refused at
// once with 503 and Retry-After, so the work already accepted (live sessions, their streams and
// turns) keeps its latency instead of every request waiting in an ever longer queue:
//   - event-loop delay: its p99 above OVERLOAD_LOOP_DELAY_MS in two windows (250 ms) in a row,
//     or above twice it in one: one long tick (a major GC) is not overload, a loop that stays
//     late is. The process counts as overloaded until a window's p99 is back under half of it;
//   - event-loop utilization past OVERLOAD_LOOP_BUSY_PERCENT. A saturated loop is not always a
//     late one: many short callbacks keep each timer nearly on time while turns and their writes
//     queue up (seen at 2,000 msg/s: delay p99 25 ms, replies 600 ms late). New sessions and
//     streams are refused while two windows in a row are past it, until one is 10 points under;
//     user messages are let in at the pace the loop can serve (platform/paced-admission.ts),
//     where their turn runs (the engine's check, `turn`; in a process that is both, the gateway's
//     `message` check refuses one early when the pace has no room);
//   - channel streams on this process at OVERLOAD_MAX_STREAMS, supervisors' feeds and watches at
//     OVERLOAD_MAX_SUPERVISION_STREAMS (new streams only; a place is taken when a stream is
//     admitted, before it opens). Once places are short (OVERLOAD_ACCOUNT_STREAMS_SHORT_PERCENT of
//     a limit held), an account at or past its share of it is refused with 429
//     ACCOUNT_STREAM_LIMIT, not 503, and the places left go to the accounts below theirs
//     (platform/stream-shares.ts); before that, any account is admitted;
//   - assistant turns in flight on this process above ENGINE_MAX_TURNS_IN_FLIGHT (messages that
//     would start a turn only).
// What is refused: new sessions, new streams (listen, supervisors' feeds and watches) and user
// messages. Never refused: ending a session, administration's actions, and the streams already
// open.
import { monitorEventLoopDelay, performance, type EventLoopUtilization, type IntervalHistogram } from 'node:perf_hooks'
import { PACE_WINDOW_MS, PacedAdmission } from './paced-admission.js'
import { StreamShares, type StreamPlace } from './stream-shares.js'
import { Unavailable } from './errors.js'
import type { Logger } from './logger.js'
import type { Metrics } from './metrics.js'

export interface OverloadLimits {
  /** p99 event-loop delay (ms) past which new work is refused; 0 = never. */
  loopDelayMs: number
  /** Share of a window (percent) the event loop may be busy before new work is refused; 0 = never. */
  loopBusyPercent?: number
  /** Channel streams (a session's creator and listeners) this process holds at most; 0 = no limit. */
  maxStreams: number
  /** Supervisors' feeds and watch streams this process holds at most; 0 = no limit. */
  maxSupervisionStreams?: number
  /** The share of each of those limits one account may hold (percent; 100 = no share)... */
  accountStreamsPercent?: number
  /** ...but never fewer places than this. */
  accountStreamsFloor?: number
  /** Percent of each of those limits held from which the shares bite (default 90; platform/stream-shares.ts). */
  accountStreamsShortPercent?: number
  /** Assistant turns in flight on this process past which messages that start a turn are refused; 0 = no limit. */
  maxTurnsInFlight: number
  /** Retry-After (seconds) of a refusal. */
  retryAfterSeconds: number
}

/**
 * `message`: a user message at the edge (the gateway); `turn`: the same message where its turn
 * runs (the engine), checked after it (one process checks both when it is both).
 */
export type Admission = 'session' | 'stream' | 'supervision' | 'message' | 'turn'

const WINDOW_MS = 250

export class OverloadGuard {
  private histogram: IntervalHistogram | null = null
  private timer: NodeJS.Timeout | null = null
  private overloaded = false
  /** Windows in a row whose p99 was past the limit. */
  private lateWindows = 0
  private busyWindows = 0
  private utilization: EventLoopUtilization | null = null
  /** Overloaded by delay, by utilization (each with its own way back). */
  private late = false
  private saturated = false
  /** Share of the last complete window the loop was busy (0..1). */
  lastLoopBusy = 0
  /** p99 of the last complete window (ms). */
  lastLoopDelayMs = 0
  /** User messages' pace (OVERLOAD_LOOP_BUSY_PERCENT set), over windows of its own. */
  readonly pacing: PacedAdmission | null
  private paceTimer: NodeJS.Timeout | null = null
  private paceUtilization: EventLoopUtilization | null = null
  private pacedAt = 0
  /** Turns run in this process (it hosts an engine): the edge can look at their pace. */
  private turnsHere = false
  /** Places for channel streams, and for supervisors' feeds and watches, with each account's share. */
  readonly channelStreams: StreamShares
  readonly supervisionStreams: StreamShares

  constructor(
    readonly limits: OverloadLimits,
    private readonly metrics?: Metrics,
    private readonly logger?: Logger,
  ) {
    this.pacing = limits.loopBusyPercent ? new PacedAdmission(limits.loopBusyPercent / 100) : null
    const share = {
      accountPercent: limits.accountStreamsPercent ?? 100,
      accountFloor: limits.accountStreamsFloor ?? 1,
      shortPercent: limits.accountStreamsShortPercent ?? 90,
    }
    const hooks = (kind: 'channel' | 'supervision') => ({
      held: (n: number) => metrics?.streamPlacesHeld.set({ kind }, n),
      accountRefused: () => metrics?.accountStreamsRefused.inc({ kind }),
    })
    this.channelStreams = new StreamShares('channel', { max: limits.maxStreams, ...share }, hooks('channel'))
    this.supervisionStreams = new StreamShares('supervision', { max: limits.maxSupervisionStreams ?? 0, ...share }, hooks('supervision'))
  }

  /** A guard that never refuses (tests that build a platform by hand). */
  static off(): OverloadGuard {
    return new OverloadGuard({ loopDelayMs: 0, maxStreams: 0, maxTurnsInFlight: 0, retryAfterSeconds: 1 })
  }

  start() {
    if ((this.limits.loopDelayMs <= 0 && !this.limits.loopBusyPercent) || this.timer) return
    this.histogram = monitorEventLoopDelay({ resolution: 5 })
    this.histogram.enable()
    this.utilization = performance.eventLoopUtilization()
    this.timer = setInterval(() => this.sample(), WINDOW_MS)
    this.timer.unref()
    if (this.pacing) {
      this.paceUtilization = performance.eventLoopUtilization()
      this.pacedAt = performance.now()
      this.paceTimer = setInterval(() => this.paceWindow(), PACE_WINDOW_MS)
      this.paceTimer.unref()
    }
  }

  stop() {
    if (this.timer) clearInterval(this.timer)
    if (this.paceTimer) clearInterval(this.paceTimer)
    this.timer = null
    this.paceTimer = null
    this.histogram?.disable()
    this.histogram = null
  }

  private sample() {
    const histogram = this.histogram!
    // The histogram counts delays beyond its resolution: a quiet loop has no samples at all.
    const p99 = histogram.count > 0 ? histogram.percentile(99) / 1e6 : 0
    histogram.reset()
    this.lastLoopDelayMs = p99
    this.metrics?.eventLoopDelayP99.set(p99 / 1000)
    const now = performance.eventLoopUtilization()
    const busy = performance.eventLoopUtilization(now, this.utilization!).utilization
    this.utilization = now
    this.lastLoopBusy = busy
    const { loopDelayMs } = this.limits
    if (loopDelayMs > 0) {
      const late = p99 > loopDelayMs
      const sustained = late && this.lateWindows > 0
      this.lateWindows = late ? this.lateWindows + 1 : 0
      if (!this.late && (sustained || p99 > 2 * loopDelayMs)) this.late = true
      else if (this.late && p99 < loopDelayMs / 2) this.late = false
    }
    const limit = (this.limits.loopBusyPercent ?? 0) / 100
    if (limit > 0) {
      this.busyWindows = busy > limit ? this.busyWindows + 1 : 0
      if (!this.saturated && this.busyWindows >= 2) this.saturated = true
      else if (this.saturated && busy < limit - 0.1) this.saturated = false
    }
    const overloaded = this.late || this.saturated
    if (overloaded !== this.overloaded) {
      this.overloaded = overloaded
      const at = { loopDelayP99Ms: Math.round(p99), loopBusyPercent: Math.round(100 * busy) }
      if (overloaded) this.logger?.warn('overloaded: new sessions, streams and messages are refused', at)
      else this.logger?.info('no longer overloaded', at)
    }
  }

  private paceWindow() {
    const now = performance.eventLoopUtilization()
    const at = performance.now()
    const busy = performance.eventLoopUtilization(now, this.paceUtilization!).utilization
    this.pacing!.window(busy, Math.max(1, at - this.pacedAt))
    this.paceUtilization = now
    this.pacedAt = at
    this.metrics?.messagePace.set(this.pacing!.pace ?? -1)
  }

  /** This process runs turns (an engine lives in it): messages at its edge are checked against their pace. */
  hostsTurns() {
    this.turnsHere = true
  }

  /** Whether the event loop is past its limit right now. */
  get busy(): boolean {
    return this.overloaded
  }

  /**
   * A new stream of `accountId`: a channel stream (a session's creator, a listen) or a
   * supervisor's feed or watch. Answers its place, to be released when the stream closes (or
   * at once when it never opens); throws 503 OVERLOADED as admit() does and past the process's
   * limit of such streams, 429 ACCOUNT_STREAM_LIMIT while that limit is nearly reached and the
   * account holds its share of it or more.
   */
  admitStream(kind: 'session' | 'stream' | 'supervision', accountId: string): StreamPlace {
    this.admit(kind)
    const shares = kind === 'supervision' ? this.supervisionStreams : this.channelStreams
    return shares.take(accountId, this.limits.retryAfterSeconds, () =>
      kind === 'supervision'
        ? this.refuse('supervision_streams', `This node holds its maximum of ${shares.limits.max} supervision streams (feeds and watches); retry shortly (another node may take it)`)
        : this.refuse('streams', `This node holds its maximum of ${shares.limits.max} open streams; retry shortly (another node may take it)`),
    )
  }

  /**
   * Throws 503 OVERLOADED (Retry-After) when new work of this kind cannot be taken now (streams:
   * admitStream, which also counts them). `load`: turns in flight, for a turn.
   */
  admit(kind: Admission, load: { turnsInFlight?: number } = {}) {
    const { maxTurnsInFlight } = this.limits
    if (this.late) this.refuse('loop_delay', `The service is overloaded (event-loop delay ${Math.round(this.lastLoopDelayMs)} ms); retry shortly`)
    const paced = kind === 'message' || kind === 'turn'
    if (this.saturated && !paced) this.refuse('loop_busy', this.busyMessage())
    if (kind === 'turn' && maxTurnsInFlight > 0 && (load.turnsInFlight ?? 0) >= maxTurnsInFlight) {
      this.refuse('turns', `This node runs its maximum of ${maxTurnsInFlight} assistant turns at once; retry shortly`)
    }
    // Last: a message refused for another reason takes no token. Where the turn runs in this
    // process, a message is looked at against the pace at the edge too, before its session is.
    if (kind === 'message' && this.pacing && this.turnsHere && !this.pacing.allows()) this.refuse('loop_busy', this.busyMessage())
    if (kind === 'turn' && this.pacing && !this.pacing.take()) this.refuse('loop_busy', this.busyMessage())
  }

  private busyMessage() {
    return `The service is overloaded (event loop busy ${Math.round(100 * this.lastLoopBusy)} % of the time); retry shortly`
  }

  private refuse(reason: 'loop_delay' | 'loop_busy' | 'streams' | 'supervision_streams' | 'turns', message: string): never {
    this.metrics?.overloadRefused.inc({ reason })
    throw new Unavailable('OVERLOADED', message, { reason }, { retryAfterSeconds: this.limits.retryAfterSeconds })
  }
}
