// The console's build for its tests: `make test` builds it first (make console); a test file run
// alone builds it when console/dist is missing, so test files running in parallel do not rebuild
// it under each other (CONSOLE_REBUILD=1 forces a build).
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { build } from 'vite'

export const consoleRoot = fileURLToPath(new URL('../../console/', import.meta.url))

export async function ensureConsoleBuilt() {
  if (existsSync(`${consoleRoot}dist/index.html`) && !process.env.CONSOLE_REBUILD) return
  await build({ configFile: `${consoleRoot}vite.config.mjs`, logLevel: 'silent' })
}
