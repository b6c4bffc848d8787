// Builds the operator console into console/dist (served by gateway/static.ts at /console/).
import { defineConfig } from 'vite'

export default defineConfig({
  root: new URL('.', import.meta.url).pathname,
  base: '/console/',
  // JSX through Preact's automatic runtime (Vite 8 compiles with oxc).
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: { outDir: 'dist', emptyOutDir: true, modulePreload: { polyfill: false }, assetsInlineLimit: 0, target: 'es2020' },
  logLevel: 'warn',
})
