// Contact loads are validated off the event loop (a worker thread) when large, and answer
// exactly as when validated inline: the same 202 or the same 400, byte for byte.
import t from 'tap'
import { call, startTestService } from '../support/harness.js'
import { parseContactsBody } from '../../dialer/contact-input.js'
import { validateContacts, validationCounts } from '../../dialer/contact-validation.js'
import { ApiError } from '../../gateway/errors.js'

function contacts(n: number, broken: (i: number) => boolean = () => false) {
  return Array.from({ length: n }, (_, i) => ({
    identifier: `id-${i}`,
    name: broken(i) && i % 3 === 0 ? '' : `Contact ${i}`,
    addresses: [{ address: broken(i) && i % 3 === 1 ? `+34${600000000 + i}` : String(34600000000 + i), type: 'phone', priority: 1 }],
    ...(broken(i) && i % 3 === 2 ? { scheduledAt: '2001-01-01T00:00:00Z' } : {}),
    customFields: { n: i },
  }))
}

const bodies: [string, unknown][] = [
  ['1000 valid contacts', { contacts: contacts(1000) }],
  ['1000 contacts, every 7th broken in one of three ways', { contacts: contacts(1000, i => i % 7 === 0) }],
  ['1001 contacts', { contacts: contacts(1001) }],
  ['a large single contact', { ...contacts(1)[0], customFields: { notes: 'n'.repeat(20_000) } }],
  ['contacts is not an array', { contacts: 'x'.repeat(20_000) }],
  ['an empty list', { contacts: [], pad: 'x'.repeat(20_000) }],
]

t.test('the worker answers exactly what inline validation answers', async t => {
  const now = Date.now()
  const before = validationCounts.offLoop
  for (const [name, body] of bodies) {
    const bytes = Buffer.from(JSON.stringify(body))
    const inline = await Promise.resolve()
      .then(() => parseContactsBody(JSON.parse(bytes.toString()), now))
      .then(c => ({ ok: c.length }), (e: ApiError) => ({ status: e.status, body: e.body() }))
    const offLoop = await validateContacts(bytes, () => JSON.parse(bytes.toString()), now, 1).then(
      c => ({ ok: c.length }),
      (e: ApiError) => ({ status: e.status, body: e.body() }),
    )
    t.same(offLoop, inline, name)
  }
  t.equal(validationCounts.offLoop - before, bodies.length, 'every one of them was validated by the worker thread')
  // Not JSON at all: the request's own parser answers (INVALID_JSON), as inline.
  const garbage = Buffer.from('{"contacts": [' + 'x'.repeat(20_000))
  await t.rejects(
    validateContacts(garbage, () => {
      throw new ApiError(400, 'INVALID_JSON', 'The request body is not valid JSON')
    }, now, 1),
    { code: 'INVALID_JSON' },
  )
})

t.test('over HTTP: the same answers with the worker and inline (DIALER_VALIDATION_THREADS=0)', async t => {
  const withWorker = await startTestService(t)
  const inline = await startTestService(t, { env: { DIALER_VALIDATION_THREADS: '0' } })
  const batchOf = async (base: string) => (await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'b', channel: 'phone', duplicateStrategy: 'merge' } })).json.batchId
  const [a, b] = [await batchOf(withWorker.base), await batchOf(inline.base)]
  for (const [name, body] of bodies) {
    const x = await call(withWorker.base, 'POST', `/dialer/v1/batches/${a}/contacts`, { body })
    const y = await call(inline.base, 'POST', `/dialer/v1/batches/${b}/contacts`, { body })
    t.equal(x.status, y.status, `${name}: ${x.status}`)
    const strip = (json: any) => (json && typeof json === 'object' ? { ...json, operationId: undefined, operationUrl: undefined } : json)
    t.same(strip(x.json), strip(y.json), name)
  }
})
