// Builds the operator console into console/dist (served by gateway/static.ts at /console/).
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { brotliCompressSync, constants, gzipSync } from 'node:zlib'
import { defineConfig } from 'vite'

/**
 * Writes file.br and file.gz beside every text file of the build, at the highest levels (paid
 * once here, not per request): the gateway sends them as Accept-Encoding allows.
 */
function precompress() {
  let outDir = ''
  return {
    name: 'switchboard-precompress',
    apply: 'build',
    configResolved(config) {
      outDir = resolve(config.root, config.build.outDir)
    },
    closeBundle() {
      const walk = dir => {
        for (const name of readdirSync(dir)) {
          const full = join(dir, name)
          if (statSync(full).isDirectory()) walk(full)
          else if (/\.(js|css|html|svg|json)$/.test(name)) {
            const body = readFileSync(full)
            writeFileSync(`${full}.br`, brotliCompressSync(body, { params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: body.length } }))
            writeFileSync(`${full}.gz`, gzipSync(body, { level: 9 }))
          }
        }
      }
      walk(outDir)
    },
  }
}

export default defineConfig({
  root: new URL('.', import.meta.url).pathname,
  base: '/console/',
  // JSX through Preact's automatic runtime (Vite 8 compiles with oxc).
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: { outDir: 'dist', emptyOutDir: true, modulePreload: { polyfill: false }, assetsInlineLimit: 0, target: 'es2020' },
  plugins: [precompress()],
  logLevel: 'warn',
})
