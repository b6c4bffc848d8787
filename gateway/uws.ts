// Loads the native uWebSockets.js binary directly. The npm package silently swaps in a slow
// pure-JS fallback when its binary does not match this Node ABI; we refuse to start instead.
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import type * as Uws from '@trufflesuite/uws-js-unofficial'

export type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from '@trufflesuite/uws-js-unofficial'
export type UwsModule = typeof Uws

const require = createRequire(import.meta.url)

export function loadNativeUws(): UwsModule {
  const packageDir = dirname(require.resolve('@trufflesuite/uws-js-unofficial/package.json'))
  const binary = join(
    packageDir,
    'binaries',
    `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`,
  )
  try {
    return require(binary) as UwsModule
  } catch (error) {
    throw new Error(
      `uWebSockets.js native binary could not be loaded (${binary}: ${(error as Error).message}). ` +
        'Refusing to start on the slow JavaScript fallback; use a Node.js version the package ships a binary for (18, 20).',
    )
  }
}
