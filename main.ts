// Entry point: `node dist/main.js` (what `make run` starts).
import { ConfigError, loadConfig } from './platform/config.js'
import { startService } from './service.js'

async function main() {
  const config = loadConfig()
  if (!config.apiKeys) {
    console.error('API_KEYS is empty: no request can authenticate. Set API_KEYS="key=account[:role+role],..." or issue keys with `npm run keys`.')
  }
  const service = await startService(config)
  let stopping = false
  const stop = async (signal: string) => {
    if (stopping) return
    stopping = true
    console.error(`${signal} received, draining`)
    await service.close()
    process.exit(0)
  }
  process.on('SIGINT', () => void stop('SIGINT'))
  process.on('SIGTERM', () => void stop('SIGTERM'))
}

main().catch(error => {
  if (error instanceof ConfigError) console.error(`Configuration error: ${error.message}`)
  else console.error(error)
  process.exit(1)
})
