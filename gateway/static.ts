// Static files of the operator console (console/dist, built by `make run`) at /console/, from
// the same origin as the API. Read once into memory at start (a few small files); every answer
// carries a strict Content-Security-Policy (no inline script, nothing from another origin) and
// nosniff. An unbuilt console answers 503 saying how to build it, and never ends the process.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { extname, join, relative, sep } from 'node:path'
import type { TemplatedApp } from './uws.js'
import { Reply } from './response.js'

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
}

export const CONSOLE_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const SECURITY = {
  'Content-Security-Policy': CONSOLE_CSP,
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
}

interface Asset {
  body: Buffer
  type: string
  immutable: boolean
}

function load(dir: string): Map<string, Asset> {
  const files = new Map<string, Asset>()
  if (!existsSync(dir)) return files
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const full = join(d, name)
      if (statSync(full).isDirectory()) walk(full)
      else {
        const path = relative(dir, full).split(sep).join('/')
        // Hashed bundle names (assets/index-abc123.js) never change content: cache them for good.
        files.set(path, { body: readFileSync(full), type: TYPES[extname(name)] ?? 'application/octet-stream', immutable: path.startsWith('assets/') })
      }
    }
  }
  walk(dir)
  return files
}

/** Mounts GET /console/* on the app (before its catch-all 404). */
export function mountConsole(app: TemplatedApp, dir: string, prefix = '/console') {
  const files = load(dir)
  const index = files.get('index.html')
  app.get(prefix, (res, _req) => new Reply(res).send(308, undefined, { Location: `${prefix}/`, ...SECURITY }))
  app.get(`${prefix}/*`, (res, req) => {
    const reply = new Reply(res)
    if (!index) {
      reply.send(503, 'The console is not built: run `make run` (or `npm run build:console`).', { 'Content-Type': 'text/plain; charset=utf-8', ...SECURITY })
      return
    }
    const path = req.getUrl().slice(prefix.length + 1)
    const asset = files.get(path)
    // Unknown paths under /console/ are views of the page (client routing): the page itself.
    const served = asset ?? (path.startsWith('assets/') ? undefined : index)
    if (!served) {
      reply.send(404, 'Not found', { 'Content-Type': 'text/plain; charset=utf-8', ...SECURITY })
      return
    }
    reply.send(200, served.body, {
      'Content-Type': served.type,
      'Cache-Control': served.immutable ? 'public, max-age=31536000, immutable' : 'no-cache',
      ...SECURITY,
    })
  })
}
