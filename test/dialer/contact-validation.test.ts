// Contact loads are validated and chunked off the event loop (a worker thread) when large, and
// answer exactly as when handled inline: the same chunks and 202, or the same 400 byte for byte.
import t from 'tap'
import { call, startTestService } from '../support/harness.js'
import { validateLoad, validationCounts } from '../../dialer/contact-validation.js'
import { loadFromBody } from '../../dialer/load-chunks.js'
import { httpError } from '../../platform/http.js'

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
  const rules = { now: Date.now(), maxJsonDepth: 8, chunkSize: 300 }
  const before = validationCounts.offLoop
  const deep = { contacts: contacts(200), pad: JSON.parse('['.repeat(9) + ']'.repeat(9)) }
  const cases: [string, Buffer][] = [
    ...bodies.map(([name, body]): [string, Buffer] => [name, Buffer.from(JSON.stringify(body))]),
    ['nested deeper than MAX_JSON_DEPTH', Buffer.from(JSON.stringify(deep))],
    ['not JSON at all', Buffer.from('{"contacts": [' + 'x'.repeat(20_000))],
  ]
  const answer = (p: Promise<unknown>) => p.then(load => ({ load }), (e: unknown) => ({ status: httpError(e)?.status, body: httpError(e)?.body(), headers: httpError(e)?.headers }))
  for (const [name, bytes] of cases) {
    const inline = await answer(Promise.resolve().then(() => loadFromBody(bytes, rules)))
    const offLoop = await answer(validateLoad(bytes, rules, 1))
    t.same(offLoop, inline, name)
  }
  t.equal(validationCounts.offLoop - before, cases.length, 'every one of them was handled by the worker thread')
  const valid = (await validateLoad(Buffer.from(JSON.stringify(bodies[0]![1])), rules, 1))
  t.equal(valid.count, 1000)
  t.same(valid.chunks.map(c => JSON.parse(c).length), [300, 300, 300, 100], 'chunks of chunkSize, as JSON text')
  t.match(JSON.parse(valid.chunks[3]!)[99], { identifier: 'id-999', identifierGenerated: false, name: 'Contact 999' })
  const errors = await Promise.all(cases.slice(-2).map(([, bytes]) => answer(validateLoad(bytes, rules, 1))))
  t.match(errors, [{ status: 400, body: { code: 'JSON_TOO_DEEP' } }, { status: 400, body: { code: 'INVALID_JSON' } }])
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
