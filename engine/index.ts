// The engine module: assistant sessions as XState actors behind a session transport, the SSE
// channel and live administration.
import type { ServiceModule } from '../gateway/routes.js'
import type { Platform } from '../platform/index.js'
import { SessionRecorder } from '../reports/index.js'
import { loadCrews, type CrewCatalog } from './crews.js'
import { SessionHost } from './host.js'
import { ChannelHub } from './hub.js'
import { OpenAiProvider } from './providers/openai.js'
import { ScriptedProvider } from './providers/scripted.js'
import type { AssistantProvider } from './providers/types.js'
import { adminRoutes } from './routes/admin.js'
import { channelRoutes, listenPath } from './routes/channel.js'
import { InProcessTransport, type SessionTransport } from './transport.js'

export { CrewConfigError, loadCrews, parseCrews } from './crews.js'
export type { SessionTransport } from './transport.js'

export interface EngineOptions {
  crews?: CrewCatalog
  providers?: Record<string, AssistantProvider>
}

export interface Engine extends ServiceModule {
  readonly host: SessionHost
  readonly hub: ChannelHub
  readonly transport: SessionTransport
}

export function createEngine(platform: Platform, options: EngineOptions = {}): Engine {
  const { config } = platform
  const crews = options.crews ?? loadCrews(config.crewsFile)
  const host = new SessionHost({
    platform,
    crews,
    recorder: new SessionRecorder(platform.store),
    providers: { scripted: new ScriptedProvider(), openai: new OpenAiProvider(), ...options.providers },
    idleTimeoutMs: config.engine.sessionIdleTimeoutMs,
    externalToolTimeoutMs: config.engine.externalToolTimeoutMs,
  })
  const transport: SessionTransport = new InProcessTransport(host)
  const hub = new ChannelHub(
    transport,
    {
      heartbeatMs: config.channel.heartbeatMs,
      replayBufferEvents: config.channel.replayBufferEvents,
      consumerRetentionMs: config.channel.consumerRetentionMs,
      maxConsumersPerSession: config.channel.maxConsumersPerSession,
      listenPath,
    },
    platform.metrics,
    platform.logger,
  )
  return {
    name: 'engine',
    host,
    hub,
    transport,
    routes: [...channelRoutes(hub, transport), ...adminRoutes(transport)],
    start: () => host.init(),
    async stop() {
      // Streams first (reconnect_required), then the actors, which stay persisted for a restore.
      hub.shutdown()
      await host.stop()
    },
  }
}
