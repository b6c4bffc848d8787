// The dialing scheduler and contact control. `schedulerOf(platform)` reaches the scheduler a
// running service created (tests run cycles deterministically with DIALER_CYCLE_MS=0).
import type { Platform } from '../../platform/index.js'
import type { Scheduler } from './scheduler.js'

export { Scheduler, type CycleReport } from './scheduler.js'
export { ContactControl, emptyProgress, type BatchProgress } from './control.js'
export { ManualClock } from './clock.js'

const registry = new WeakMap<Platform, Scheduler>()

export function registerScheduler(platform: Platform, scheduler: Scheduler) {
  registry.set(platform, scheduler)
}

export function schedulerOf(platform: Platform): Scheduler {
  const scheduler = registry.get(platform)
  if (!scheduler) throw new Error('no dialer scheduler on this platform')
  return scheduler
}
