// A clock that only moves when told: tests and benchmarks drive retry delays, calling windows
// and scheduled times with it instead of waiting.
import type { Clock } from '../../platform/clock.js'

export class ManualClock implements Clock {
  private current: number
  constructor(start: number | string | Date) {
    this.current = typeof start === 'number' ? start : new Date(start).getTime()
  }
  now() {
    return this.current
  }
  advance(ms: number) {
    this.current += ms
    return this.current
  }
  set(to: number | string | Date) {
    this.current = typeof to === 'number' ? to : new Date(to).getTime()
    return this.current
  }
}
