// The console's files at /console/ (gateway/static.ts), built from console/ by Vite as `make`
// does: same origin, strict CSP, nosniff, no third-party URL in the page, JS under 150 KB gzipped.
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { brotliDecompressSync, gunzipSync, gzipSync } from 'node:zlib'
import { request } from 'node:http'
import { fileURLToPath } from 'node:url'
import { ensureConsoleBuilt } from './build.js'
import { startTestService } from '../support/harness.js'

/** A GET with one Accept-Encoding and the body as sent (fetch would decode it). */
const raw = (url: string, acceptEncoding: string) =>
  new Promise<{ headers: Record<string, string | string[] | undefined>; body: Buffer }>((resolve, reject) => {
    request(url, { headers: { 'accept-encoding': acceptEncoding } }, res => {
      const chunks: Buffer[] = []
      res.on('data', c => chunks.push(c))
      res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }))
    })
      .on('error', reject)
      .end()
  })

const root = fileURLToPath(new URL('../../console/', import.meta.url))

t.test('the built console is served with its security headers, offline and small', async t => {
  await ensureConsoleBuilt()
  const svc = await startTestService(t)
  const page = await fetch(`${svc.base}/console/`)
  t.equal(page.status, 200)
  t.match(page.headers.get('content-type'), /^text\/html/)
  const csp = page.headers.get('content-security-policy') ?? ''
  t.match(csp, /script-src 'self'/)
  t.notMatch(csp, /unsafe-inline|unsafe-eval/, 'no inline script allowed')
  t.match(csp, /connect-src 'self'/)
  t.equal(page.headers.get('x-content-type-options'), 'nosniff')
  const html = await page.text()
  t.notMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script in the page')
  t.notMatch(html, /https?:\/\//, 'no third-party URL in the page')

  const scripts = [...html.matchAll(/src="([^"]+\.js)"/g)].map(m => m[1]!)
  t.ok(scripts.length >= 1)
  let gzipped = 0
  for (const src of scripts) {
    const res = await fetch(`${svc.base}${src}`)
    t.equal(res.status, 200, src)
    t.match(res.headers.get('content-type'), /^text\/javascript/)
    t.match(res.headers.get('cache-control'), /immutable/)
    const body = Buffer.from(await res.arrayBuffer())
    t.notMatch(body.toString(), /https?:\/\/(?!www\.w3\.org)[a-z]/i, `${src} requests nothing from another origin`)
    gzipped += gzipSync(body).length
  }
  t.ok(gzipped < 150 * 1024, `page JS ${gzipped} bytes gzipped (< 150 KB)`)
  t.comment(`console JS: ${gzipped} bytes gzipped`)

  // Precompressed on the wire: brotli when accepted, else gzip, else identity; Vary on all three.
  let wire = 0
  for (const src of [...scripts, '/console/']) {
    const identity = await raw(`${svc.base}${src}`, 'identity')
    const br = await raw(`${svc.base}${src}`, 'gzip, deflate, br')
    const gz = await raw(`${svc.base}${src}`, 'gzip;q=1, br;q=0')
    t.equal(br.headers['content-encoding'], 'br', `${src} as brotli`)
    t.equal(gz.headers['content-encoding'], 'gzip', `${src} as gzip when br is refused`)
    t.equal(identity.headers['content-encoding'], undefined, `${src} plain when nothing is accepted`)
    for (const r of [identity, br, gz]) t.equal(r.headers.vary, 'Accept-Encoding', `${src} varies on Accept-Encoding`)
    t.same(brotliDecompressSync(br.body), identity.body, `${src}: brotli decodes to the file`)
    t.same(gunzipSync(gz.body), identity.body, `${src}: gzip decodes to the file`)
    t.equal(br.headers['content-security-policy'], identity.headers['content-security-policy'], 'the same CSP')
    if (src.endsWith('.js')) wire += br.body.length
  }
  t.ok(wire < gzipped, `JS on the wire ${wire} bytes (brotli) below its gzip size`)
  t.comment(`console JS on the wire: ${wire} bytes (brotli)`)

  // Client routes are the page; a missing asset is a 404; /console redirects to /console/.
  t.equal((await fetch(`${svc.base}/console/sessions/x`)).status, 200)
  t.equal((await fetch(`${svc.base}/console/assets/nope.js`)).status, 404)
  const bare = await fetch(`${svc.base}/console`, { redirect: 'manual' })
  t.equal(bare.status, 308)
  t.equal(bare.headers.get('location'), '/console/')
  const files = readdirSync(`${root}dist/assets`)
  t.ok(files.some(f => f.endsWith('.css')))
  t.notMatch(readFileSync(`${root}dist/index.html`, 'utf8'), /apikey/i, 'no key in the page')
})
