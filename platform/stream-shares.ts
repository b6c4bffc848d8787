// Places for long-lived streams on this process, and each account's share of them. A stream
// holds a socket, buffers and heartbeats (a supervisor's, a store query every few hundred ms)
// for as long as its client keeps it, so the process has a limit; a limit alone would let one
// account hold every place and every other account be refused until it let go. Like Ably's and
// Pusher's connection limits per app or account, each account may hold only its share of the
// process's places: past it, it is answered 429 (its own doing, its own retry), while the
// process's limit still answers 503 when the accounts together fill it.
//
// A place is taken when a stream is admitted, before it opens (a listen first waits for its
// session's attach, a watch for the history): counting only open streams would let concurrent
// requests all pass the check before any of them opened.
import { LimitReached } from './errors.js'

export interface StreamShareLimits {
  /** Places on this process; 0 = no limit (and no account share). */
  max: number
  /** An account may hold this percent of `max`... */
  accountPercent: number
  /** ...and never fewer than this many places (within `max`). */
  accountFloor: number
}

/** One taken place; released once, when its stream closes or when it never opened. */
export class StreamPlace {
  private released = false
  /** Its stream opened: released when that stream closes, no longer when the request fails. */
  opened = false
  constructor(
    private readonly shares: StreamShares,
    readonly accountId: string,
  ) {}

  release() {
    if (this.released) return
    this.released = true
    this.shares.give(this.accountId)
  }
}

export class StreamShares {
  private total = 0
  private readonly byAccount = new Map<string, number>()

  constructor(
    /** What the places are for, as errors and metrics name it. */
    readonly kind: 'channel' | 'supervision',
    readonly limits: StreamShareLimits,
    /** Metrics: the places held after each change; each refusal of an account past its share. */
    private readonly hooks: { held?(n: number): void; accountRefused?(): void } = {},
  ) {}

  /** Places taken on this process. */
  get held(): number {
    return this.total
  }

  heldBy(accountId: string): number {
    return this.byAccount.get(accountId) ?? 0
  }

  /** The places one account may hold; 0 = no share (no process limit, or a share that is all of it). */
  get accountLimit(): number {
    const { max, accountPercent, accountFloor } = this.limits
    if (max <= 0) return 0
    const share = Math.max(1, accountFloor, Math.floor((max * accountPercent) / 100))
    return share >= max ? 0 : share
  }

  /**
   * Takes a place for `accountId`, or throws: 429 ACCOUNT_STREAM_LIMIT past the account's share
   * (checked first: an account over its share is told so even when the process is full too),
   * `full()` past the process's limit.
   */
  take(accountId: string, retryAfterSeconds: number, full: () => never): StreamPlace {
    const share = this.accountLimit
    if (share > 0 && this.heldBy(accountId) >= share) {
      this.hooks.accountRefused?.()
      throw new LimitReached(
        'ACCOUNT_STREAM_LIMIT',
        `This account holds its share of ${share} ${this.kind} streams on this node; close one, or retry later`,
        { kind: this.kind, limit: share },
        { retryAfterSeconds },
      )
    }
    if (this.limits.max > 0 && this.total >= this.limits.max) full()
    this.total++
    this.byAccount.set(accountId, this.heldBy(accountId) + 1)
    this.hooks.held?.(this.total)
    return new StreamPlace(this, accountId)
  }

  /** @internal StreamPlace.release */
  give(accountId: string) {
    this.total--
    const n = this.heldBy(accountId) - 1
    if (n > 0) this.byAccount.set(accountId, n)
    else this.byAccount.delete(accountId)
    this.hooks.held?.(this.total)
  }
}
