// Places for long-lived streams on this process, and each account's share of them. A stream
// holds a socket, buffers and heartbeats (a supervisor's, a store query every few hundred ms)
// for as long as its client keeps it, so the process has a limit; a limit alone would let one
// account hold every place and every other account be refused until it let go. So each account
// has a share of the process's places (OVERLOAD_ACCOUNT_STREAMS_PERCENT, never fewer than
// OVERLOAD_ACCOUNT_STREAMS_FLOOR), and the share is work-conserving, as a scheduler's is: it
// bites only when places are short.
//   - While fewer than `shortAt` places are held (OVERLOAD_ACCOUNT_STREAMS_SHORT_PERCENT of the
//     limit, 90 by default), every account is admitted: one account alone uses the process up
//     to there, whatever its share.
//   - From `shortAt` on, the places left are kept for the accounts below their share: one below
//     it is admitted up to the limit, one at or past it is answered 429 ACCOUNT_STREAM_LIMIT
//     (Retry-After: its own doing, its own retry). A held stream is never cut, so an account
//     that arrives once another filled the process gets the places left at once, and more of its
//     share as the others' streams close (they cannot take those places back while short).
//   - At the limit, 503 OVERLOADED: the accounts below their share together filled it.
// The share is the configured one, a guaranteed minimum, not an equal split of the limit among
// the accounts holding streams: that split gives a lone account (or each of a few heavy ones) a
// share as large as the process, so nothing would be kept for an account that comes later, and
// it would change with every account that opens or closes its last stream.
//
// A place is taken when a stream is admitted, before it opens (a listen first waits for its
// session's attach, a watch for the history): counting only open streams would let concurrent
// requests all pass the check before any of them opened.
import { LimitReached } from './errors.js'

export interface StreamShareLimits {
  /** Places on this process; 0 = no limit (and no account share). */
  max: number
  /** An account's share is this percent of `max`... */
  accountPercent: number
  /** ...and never fewer than this many places (within `max`). */
  accountFloor: number
  /**
   * Places are short once this percent of `max` is held (default 90): from there on an account
   * at or past its share is refused. 100: only when the process is full; 0: always (a hard cap).
   */
  shortPercent?: number
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

  /** An account's share of the places; 0 = no share (no process limit, or a share that is all of it). */
  get accountLimit(): number {
    const { max, accountPercent, accountFloor } = this.limits
    if (max <= 0) return 0
    const share = Math.max(1, accountFloor, Math.floor((max * accountPercent) / 100))
    return share >= max ? 0 : share
  }

  /** Places held from which they are short: an account at or past its share is refused from there on. */
  get shortAt(): number {
    const { max, shortPercent = 90 } = this.limits
    return Math.floor((max * shortPercent) / 100)
  }

  /**
   * Takes a place for `accountId`, or throws: 429 ACCOUNT_STREAM_LIMIT while places are short
   * and the account holds its share or more (checked first: such an account is told so even when
   * the process is full too), `full()` past the process's limit.
   */
  take(accountId: string, retryAfterSeconds: number, full: () => never): StreamPlace {
    const share = this.accountLimit
    if (share > 0 && this.total >= this.shortAt && this.heldBy(accountId) >= share) {
      this.hooks.accountRefused?.()
      throw new LimitReached(
        'ACCOUNT_STREAM_LIMIT',
        `This node is short of ${this.kind} streams and this account holds its share of ${share} or more; close one, or retry later`,
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
