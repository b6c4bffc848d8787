// Static files of the operator console (console/dist, built by `make run`) at /console/, from
// the same origin as the API. Read once into memory at start (a few small files); every answer
// carries a strict Content-Security-Policy (no inline script, nothing from another origin) and
// nosniff. An unbuilt console answers 503 saying how to build it, and never ends the process.
// The build writes brotli and gzip copies beside each text file (console/vite.config.mjs): they
// are sent as the browser's Accept-Encoding allows, so nothing is compressed per request.
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
  /** Precompressed copies (file.br, file.gz) when the build wrote them. */
  br?: Buffer
  gzip?: Buffer
}

/** Whether Accept-Encoding allows a coding (listed without q=0, or `*`). */
export function accepts(header: string, coding: string): boolean {
  let star = false
  for (const part of header.toLowerCase().split(',')) {
    const [name, ...params] = part.trim().split(';')
    const q = params.map(p => p.trim()).find(p => p.startsWith('q='))
    const allowed = q === undefined || Number(q.slice(2)) > 0
    if (name === coding) return allowed
    if (name === '*') star = allowed
  }
  return star
}

function load(dir: string): Map<string, Asset> {
  const files = new Map<string, Asset>()
  if (!existsSync(dir)) return files
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const full = join(d, name)
      if (statSync(full).isDirectory()) walk(full)
      else if (!name.endsWith('.br') && !name.endsWith('.gz')) {
        const path = relative(dir, full).split(sep).join('/')
        // Hashed bundle names (assets/index-abc123.js) never change content: cache them for good.
        const asset: Asset = { body: readFileSync(full), type: TYPES[extname(name)] ?? 'application/octet-stream', immutable: path.startsWith('assets/') }
        if (existsSync(`${full}.br`)) asset.br = readFileSync(`${full}.br`)
        if (existsSync(`${full}.gz`)) asset.gzip = readFileSync(`${full}.gz`)
        files.set(path, asset)
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
    const headers: Record<string, string> = {
      'Content-Type': served.type,
      'Cache-Control': served.immutable ? 'public, max-age=31536000, immutable' : 'no-cache',
      ...SECURITY,
    }
    let body = served.body
    if (served.br || served.gzip) {
      // The answer depends on Accept-Encoding: caches must key on it.
      headers.Vary = 'Accept-Encoding'
      const acceptEncoding = req.getHeader('accept-encoding')
      if (served.br && accepts(acceptEncoding, 'br')) {
        body = served.br
        headers['Content-Encoding'] = 'br'
      } else if (served.gzip && accepts(acceptEncoding, 'gzip')) {
        body = served.gzip
        headers['Content-Encoding'] = 'gzip'
      }
    }
    reply.send(200, body, headers)
  })
}
