// Providers by channel. Only `simulated` exists so far; `webhook` (HMAC-signed POST per attempt,
// outcome on a callback) and `assistant` (an outbound assistant session per attempt) are the
// remaining part of issue 6 and plug in here.
import type { Config } from '../../platform/config.js'
import { SimulatedProvider } from './simulated.js'
import type { Provider } from './types.js'

export type { AttemptRequest, AttemptResult, Provider } from './types.js'
export { SimulatedProvider, parseOutcomeMix, seededRandom } from './simulated.js'

export type ProviderFor = (channel: 'phone' | 'email' | 'whatsapp') => Provider

export function createProviders(config: Config): ProviderFor {
  const simulated = new SimulatedProvider(config.dialer.simulated)
  return () => simulated
}
