// The shared infrastructure every module receives. Modules depend on these interfaces only,
// never on which implementation (embedded or distributed) is behind them.
import type { Bus } from './bus/index.js'
import type { Clock } from './clock.js'
import type { Config } from './config.js'
import type { Logger } from './logger.js'
import type { Metrics } from './metrics.js'
import type { OverloadGuard } from './overload.js'
import type { Store } from './store/index.js'

export interface Platform {
  config: Config
  store: Store
  bus: Bus
  clock: Clock
  logger: Logger
  metrics: Metrics
  /** Refuses new work past what the process can serve (absent: never refuses). */
  overload?: OverloadGuard
}
