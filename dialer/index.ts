// The dialer module: batches, contact loads, blocked addresses, batch log.
import type { ServiceModule } from '../gateway/routes.js'
import type { Platform } from '../platform/index.js'
import type { Store } from '../platform/store/index.js'

export function createDialer(_platform: Platform, _options: { idempotencyStore: Store }): ServiceModule {
  return { name: 'dialer', routes: [], start: async () => {}, stop: async () => {} }
}
