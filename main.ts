// Entry point: `node dist/main.js` (what `make run` starts).
import { ConfigError, loadConfig } from './platform/config.js'
import { installProcessGuards } from './platform/process-guard.js'
import { startService } from './service.js'

/** EX_SOFTWARE: the supervisor restarts a process that stopped because its state was unknown. */
const EXIT_STATE_UNKNOWN = 70

async function main() {
  const config = loadConfig()
  if (!config.apiKeys) {
    console.error('API_KEYS is empty: no request can authenticate. Set API_KEYS="key=account[:role+role],..." or issue keys with `npm run keys`.')
  }
  const service = await startService(config)
  let stopping = false
  const stop = async (why: string, code: number) => {
    if (stopping) return
    stopping = true
    console.error(`${why}, draining`)
    // A drain that hangs must not keep a broken process alive.
    setTimeout(() => process.exit(code), config.engine.drainTimeoutMs + 5000).unref()
    try {
      await service.close()
    } finally {
      service.platform.logger.flush?.()
      process.exit(code)
    }
  }
  // Same policy in every role (all, gateway, engine, worker): docs/operations.md, "Process-level policy".
  installProcessGuards({
    logger: service.platform.logger,
    metrics: service.platform.metrics,
    exceptionLimit: config.edge.uncaughtExceptionLimit,
    exceptionWindowMs: config.edge.uncaughtExceptionWindowMs,
    onFatal: reason => void stop(`stopping: ${reason}`, EXIT_STATE_UNKNOWN),
  })
  process.on('SIGINT', () => void stop('SIGINT received', 0))
  process.on('SIGTERM', () => void stop('SIGTERM received', 0))
}

main().catch(error => {
  if (error instanceof ConfigError) console.error(`Configuration error: ${error.message}`)
  else console.error(error)
  process.exit(1)
})
