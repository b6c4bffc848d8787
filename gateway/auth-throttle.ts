// Slows down guessing of API keys: an address that presented too many unknown keys within a
// window is answered 429 (with Retry-After) until the window ends, before any key lookup. The
// addresses tracked are a bounded LRU, so a flood from many addresses costs bounded memory (the
// least recently seen addresses are forgotten first).
import { LRUCache } from 'lru-cache'

export interface AuthThrottleOptions {
  /** Unknown keys allowed per address and window; 0 turns the throttle off. */
  limit: number
  windowMs: number
  /** Addresses remembered at most. */
  maxAddresses: number
}

interface Failures {
  count: number
  windowEnds: number
}

export class AuthThrottle {
  private readonly failures: LRUCache<string, Failures>
  /** When the window of the latest failure ends: after it no address is slowed. */
  private lastWindowEnds = 0

  constructor(private readonly options: AuthThrottleOptions, private readonly now: () => number = Date.now) {
    this.failures = new LRUCache({ max: Math.max(1, options.maxAddresses) })
  }

  /**
   * Whether some address may be slowed now (a failure's window is still open). When not, a
   * request's address need not be read at all (reading it costs a system call).
   */
  get active(): boolean {
    return this.options.limit > 0 && this.now() < this.lastWindowEnds
  }

  /** Whole seconds until `address` may present a key again; 0 when it may now. */
  retryAfterSeconds(address: string): number {
    if (this.options.limit === 0) return 0
    const entry = this.failures.get(address)
    if (!entry) return 0
    const left = entry.windowEnds - this.now()
    if (left <= 0) {
      this.failures.delete(address)
      return 0
    }
    return entry.count >= this.options.limit ? Math.ceil(left / 1000) : 0
  }

  recordFailure(address: string) {
    if (this.options.limit === 0) return
    const now = this.now()
    const entry = this.failures.get(address)
    if (!entry || entry.windowEnds <= now) {
      this.failures.set(address, { count: 1, windowEnds: now + this.options.windowMs })
      this.lastWindowEnds = now + this.options.windowMs
    } else entry.count++
  }
}
