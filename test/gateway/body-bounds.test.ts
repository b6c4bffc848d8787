// Each route refuses a body past what its schema can take before parsing it (schemas/body-bounds.ts,
// gateway/validation.ts): its bytes at the door, its values and longest string in one scan. No
// valid body is ever refused by them (property-based, written compact, pretty and with every
// character escaped); an oversized one costs the loop next to nothing (black-box, real HTTP).
import t from 'tap'
import fc from 'fast-check'
import { schemas } from '../../schemas/index.js'
import { bodyLimitsOf, EVERY_PROBLEM_UP_TO } from '../../gateway/validation.js'
import { jsonShapeBreaks } from '../../gateway/request.js'
import type { Route } from '../../platform/http.js'
import { call, startTestService } from '../support/harness.js'

const EDGE = { maxBodyBytes: 5 * 1024 * 1024, maxJsonDepth: 64 }
const limitsOf = (requestSchema: string) => bodyLimitsOf({ requestSchema } as Route, EDGE)

/** JSON as the most verbose client writes it: every character outside ASCII letters and digits escaped. */
const escapedJson = (value: unknown) => JSON.stringify(value).replace(/[^A-Za-z0-9{}[\]:,"\\]/g, c => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)

// Strings whose every code point is as long as it can be written: astral (two UTF-16 units), quotes, controls.
const nastyText = (max: number) => fc.string({ unit: fc.constantFrom('💥', '"', '\\', '\u0001', 'ñ', 'a', '\u2028'), minLength: 1, maxLength: max })
const phone = fc.integer({ min: 1000000, max: 999999999999999 }).map(String)
const context = (max: number) => fc.array(fc.record({ author: fc.constantFrom('system', 'assistant', 'user', 'agent'), text: nastyText(40) }), { minLength: 1, maxLength: max })

const VALID: Array<[string, fc.Arbitrary<unknown>]> = [
  ['channel.message', fc.record({ message: nastyText(16_000) })],
  ['admin.whisper', fc.record({ text: nastyText(16_000) })],
  ['admin.append', fc.record({ context: context(500) })],
  ['dialer.blocked-addresses.block', fc.record({ addresses: fc.array(phone, { minLength: 1, maxLength: 10_000 }), addressType: fc.constant('phone'), reason: nastyText(500) })],
  [
    'dialer.batch.create',
    fc.record({
      name: nastyText(200),
      channel: fc.constantFrom('phone', 'email', 'whatsapp'),
      duplicateStrategy: fc.constantFrom('skip', 'merge', 'replace'),
      rules: fc.record({
        maxAttempts: fc.integer({ min: 1, max: 100 }),
        retryDelayMinutes: fc.dictionary(fc.constantFrom('answered', 'busy', 'no_answer', 'failed'), fc.integer({ min: 0, max: 43200 })),
        callingWindows: fc.array(fc.record({ days: fc.uniqueArray(fc.constantFrom('mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'), { minLength: 1 }), start: fc.constant('09:00'), end: fc.constant('17:00') }), { maxLength: 50 }),
        blockedDates: fc.array(fc.constant('2030-01-31'), { maxLength: 366 }),
        timeZone: fc.constant('America/Argentina/ComodRivadavia'),
        outboundText: nastyText(2000),
      }),
    }),
  ],
]

t.test('no valid body breaks its route bounds, however it is written', async t => {
  for (const [id, arbitrary] of VALID) {
    const limits = limitsOf(id)
    let valid = 0
    fc.assert(
      fc.property(arbitrary, value => {
        if (schemas.validate(id, value).length > 0) return true // the generator strayed; not this property's case
        valid++
        for (const text of [JSON.stringify(value), JSON.stringify(value, null, 2), escapedJson(value)]) {
          const bytes = Buffer.from(text)
          if (bytes.length > limits.bytes || jsonShapeBreaks(bytes, limits.json)) return false
        }
        return true
      }),
      { numRuns: 40 },
    )
    t.ok(valid >= 30, `${id}: ${valid} of 40 valid, each within ${limits.bytes} bytes, ${limits.json.maxValues} values, strings of ${limits.json.maxStringBytes} bytes`)
  }
  // The tightest case by hand: 200 astral characters, each escaped as a pair of \uXXXX (12 bytes).
  const name = '💥'.repeat(200)
  const text = Buffer.from(escapedJson({ name, channel: 'phone', duplicateStrategy: 'merge' }))
  t.equal(jsonShapeBreaks(text, limitsOf('dialer.batch.create').json), undefined, 'the longest name, fully escaped')
})

t.test('every route with a schema is bounded below MAX_BODY_BYTES, or takes it whole for a reason', async t => {
  const { base } = await startTestService(t)
  const doc = await (await fetch(`${base}/openapi.json`)).json()
  const ids = new Set<string>()
  for (const item of Object.values<any>(doc.paths)) {
    for (const op of Object.values<any>(item)) {
      const ref = op?.requestBody?.content?.['application/json']?.schema?.$ref as string | undefined
      if (ref) ids.add(ref.split('/').pop()!)
    }
  }
  t.ok(ids.size >= 15, `${ids.size} request schemas in /openapi.json`)
  const bounded: Record<string, number> = {}
  for (const id of ids) {
    const { bytes, json } = limitsOf(id)
    t.ok(Number.isFinite(json.maxValues!) && Number.isFinite(json.maxStringBytes!), `${id}: values and strings bounded`)
    if (bytes < EDGE.maxBodyBytes) bounded[id] = bytes
  }
  // What may legitimately approach 5 MiB: 1,000 contacts, 10,000 addresses, 500 messages of 16,000 characters, 200 whispered ones.
  const whole = ['dialer.contacts.insert', 'dialer.blocked-addresses.block', 'dialer.blocked-addresses.unblock', 'admin.append', 'admin.override', 'channel.create']
  for (const id of ids) if (!whole.includes(id)) t.ok(bounded[id], `${id}: ${bounded[id]} bytes`)
  for (const id of whole) t.notOk(bounded[id], `${id}: MAX_BODY_BYTES`)
  t.equal(bodyLimitsOf({} as Route, EDGE).bytes, 64 * 1024, 'a route without a schema reads no body: 64 KiB of one is let by')
})

t.test('oversized bodies are refused before parsing, and cost the loop nothing', async t => {
  const { base } = await startTestService(t)
  const health = async () => {
    const started = Date.now()
    await fetch(`${base}/healthz`)
    return Date.now() - started
  }
  const batchLimit = limitsOf('dialer.batch.create').bytes
  const big = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'x'.repeat(4_000_000), channel: 'phone', duplicateStrategy: 'merge' } })
  t.match(big, { status: 413, json: { code: 'PAYLOAD_TOO_LARGE', maxBytes: batchLimit } }, `a 4 MB batch: 413 at ${batchLimit} bytes, the route's limit`)

  const values = `{"context":[${Array(1_000_000).fill('{}').join(',')}]}` // 3 MB, a million values
  const [refused, meanwhile] = await Promise.all([call(base, 'PUT', '/engine/api/administration/session/00000000-0000-4000-8000-000000000000/append', { raw: values, headers: { 'content-type': 'application/json', userid: 'sup-1' } }), health()])
  t.match(refused, { status: 413, json: { code: 'PAYLOAD_TOO_LARGE', maxValues: limitsOf('admin.append').json.maxValues } }, 'a million values: 413 unparsed')
  t.ok(meanwhile < 5000, `/healthz answered meanwhile (${meanwhile} ms)`)

  const long = await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: { address: 'a'.repeat(100_000), addressType: 'phone' } })
  t.match(long, { status: 413, json: { code: 'PAYLOAD_TOO_LARGE', maxStringBytes: limitsOf('dialer.blocked-addresses.block').json.maxStringBytes } }, 'a string no route field takes: 413 unparsed')

  const fit = await call(base, 'POST', '/dialer/v1/batches', { raw: escapedJson({ name: '💥'.repeat(200), channel: 'phone', duplicateStrategy: 'merge' }), headers: { 'content-type': 'application/json' } })
  t.match(fit, { status: 201, json: { name: '💥'.repeat(200) } }, 'the longest valid name, every character escaped, is taken')
})

t.test('an invalid body lists every problem up to its bound, and its first past it', async t => {
  const { base } = await startTestService(t)
  const bad = (n: number) => ({ addresses: Array.from({ length: n }, (_, i) => `${'9'.repeat(300)}${i}`), addressType: 'phone' })
  const few = await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: bad(500) })
  t.equal(few.status, 400)
  t.equal(few.json.details.length, 500, 'every problem of a body within the bound')
  const many = await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: bad(EVERY_PROBLEM_UP_TO + 1000) })
  t.match(many, { status: 400, json: { code: 'VALIDATION_FAILED', details: [{ field: 'addresses[0]' }] } })
  t.equal(many.json.details.length, 1, 'the first problem of a larger one')
})

t.test('a contact load names every problem in its message and carries the first 1,000', async t => {
  const { base } = await startTestService(t)
  const batch = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'b', channel: 'phone', duplicateStrategy: 'merge' } })
  const contacts = Array.from({ length: 1000 }, () => ({ name: '', addresses: [{ address: 'x', type: 'phone', priority: 1 }] }))
  const res = await call(base, 'POST', `/dialer/v1/batches/${batch.json.batchId}/contacts`, { body: { contacts } })
  t.match(res, { status: 400, json: { code: 'VALIDATION_FAILED', message: /^Validation failed: 2000 problem\(s\) in 1000 contact\(s\)/ } })
  // 1,000 details are more than an error body keeps (256 KiB): it keeps code and message then.
  t.ok(res.json.truncated === true || res.json.details.length === 1000, 'at most 1,000 details')
})
