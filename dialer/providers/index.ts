// Providers by channel. The provider of an attempt is the batch's `rules.provider` when set, else
// the one DIALER_PROVIDERS maps the batch's channel to (default: `simulated` for every channel).
//   simulated: configurable outcome mix and latency (demos, benchmarks)
//   webhook:   HMAC-signed POST per attempt, outcome on a signed callback (webhook.ts)
//   assistant: an outbound assistant session per phone/whatsapp attempt (assistant.ts)
import { type Config, listenerOrigin } from '../../platform/config.js'
import type { Collection } from '../../platform/store/index.js'
import type { SessionTransport } from '../../engine/transport.js'
import { AssistantProvider, type AssistantRules } from './assistant.js'
import { SimulatedProvider } from './simulated.js'
import type { Provider } from './types.js'
import { WebhookProvider, type WebhookReportDoc } from './webhook.js'

export type { AttemptRequest, AttemptResult, Provider } from './types.js'
export { SimulatedProvider, parseOutcomeMix, seededRandom } from './simulated.js'
export { AssistantProvider, DEFAULT_OUTBOUND_TEXT, outcomeOfClose } from './assistant.js'
export { WebhookOutcomes, WebhookProvider, WEBHOOK_LABELS, WEBHOOK_REPORTS, checkSignature, signWebhook, type WebhookDirection, type WebhookReportDoc } from './webhook.js'

export const PROVIDER_NAMES = ['simulated', 'webhook', 'assistant'] as const
export type ProviderName = (typeof PROVIDER_NAMES)[number]
export type Channel = 'phone' | 'email' | 'whatsapp'

export type ProviderFor = (channel: Channel, rules?: Record<string, unknown>) => Provider

export interface ProviderRegistry extends ProviderFor {
  readonly webhook: WebhookProvider
  readonly assistant: AssistantProvider
  /** Attempts still waiting on a webhook or a session end as `failed` (service stopping). */
  close(): void
}

export interface ProviderDeps {
  /** Reports received by the callback endpoint (any process); without it only in-process reports count. */
  webhookReports?: Collection<WebhookReportDoc>
  /** The engine's session transport, looked up when an attempt starts. */
  transport?: () => SessionTransport | undefined
}

/** The webhook callbacks' root: DIALER_WEBHOOK_CALLBACK_URL, else PUBLIC_BASE_URL, else this process. */
export function callbackBaseUrl(config: Config): string {
  return config.dialer.webhook.callbackBaseUrl ?? config.publicBaseUrl ?? listenerOrigin(config.host, config.port)
}

export function createProviders(config: Config, deps: ProviderDeps = {}): ProviderRegistry {
  const { dialer } = config
  const simulated = new SimulatedProvider(dialer.simulated)
  const webhook = new WebhookProvider({ ...dialer.webhook, callbackBaseUrl: callbackBaseUrl(config) }, deps.webhookReports)
  const assistant = new AssistantProvider(deps.transport ?? (() => undefined), dialer.assistant.crewId)
  const choose = (channel: Channel, rules: Record<string, unknown> = {}): Provider => {
    const name = (typeof rules.provider === 'string' ? rules.provider : undefined) ?? dialer.providers[channel] ?? 'simulated'
    if (name === 'webhook') return webhook
    if (name === 'assistant') return assistant.forBatch(rules as AssistantRules)
    return simulated
  }
  return Object.assign(choose, {
    webhook,
    assistant,
    close() {
      webhook.close()
      assistant.close()
    },
  })
}
