// Issue 10's domain findings, over real HTTP on both stores: client keys that reach a prototype
// or read as update-path syntax, the blocked-address e-mail check on long input (it once
// backtracked for seconds), and unbounded free-form fields.
import t from 'tap'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { contact, createBatch, load, waitForOperation } from '../support/dialer.js'

const prototypeClean = () => Object.getOwnPropertyNames(Object.prototype).filter(name => !(name in Object.getPrototypeOf({}) && typeof (Object.prototype as any)[name] === 'function') && name !== '__proto__')

for (const store of STORES) {
  t.test(`hostile input on the ${store} store`, async t => {
    const { base } = await startTestService(t, { store })
    const before = prototypeClean()

    t.test('customFields keys that reach a prototype or read as paths are refused; nothing is polluted', async t => {
      const batchId = await createBatch(base, { duplicateStrategy: 'merge' })
      for (const key of ['__proto__.x-request-id', '__proto__', 'constructor', 'prototype', '$where', 'a.b', '.']) {
        // Raw JSON: JSON.stringify would drop a literal __proto__ key.
        const raw = `{"contacts":[${JSON.stringify(contact(1))},${JSON.stringify(contact(1)).slice(0, -1)},"customFields":{${JSON.stringify(key)}:"x"}}]}`
        const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { raw, headers: { 'content-type': 'application/json' } })
        t.equal(res.status, 400, `key ${key}`)
        t.match(res.json, { code: 'VALIDATION_FAILED', details: [{ index: 1, field: 'contacts[1].customFields', code: 'INVALID_FIELD_NAME' }] }, `key ${key}`)
      }
      t.same(prototypeClean(), before, 'Object.prototype has no new property')
      t.equal(({} as any)['x-request-id'], undefined)
      // Another account's next request works (prom-client once died on the polluted prototype).
      const other = await call(base, 'POST', '/dialer/v1/batches', { key: KEYS.globex, body: { name: 'after', channel: 'phone', duplicateStrategy: 'merge' } })
      t.equal(other.status, 201)
      // A merge with ordinary keys still lands.
      const ok = await load(base, batchId, { contacts: [contact(2, { customFields: { plan: 'gold' } }), contact(2, { customFields: { 'región': 'sur' } })] })
      t.match(await waitForOperation(base, ok.operationId), { status: 'succeeded' })
      const listed = (await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts?limit=10`)).json
      t.match(listed.data.find((c: any) => c.identifier === 'c2'), { customFields: { plan: 'gold', 'región': 'sur' } })
    })

    t.test('a CSV column mapped into customFields cannot name a prototype key', async t => {
      const res = await call(base, 'POST', '/dialer/v1/batches', {
        body: { name: 'csv', channel: 'phone', duplicateStrategy: 'merge', tempCsvKey: 'csv_x', columnMapping: { name: 'name', phone: ['phone'], customFields: ['__proto__'] } },
      })
      t.equal(res.status, 400)
      t.match(res.json, { code: 'VALIDATION_FAILED', details: [{ field: 'columnMapping.customFields[0]', code: 'INVALID_FIELD_NAME' }] })
    })

    t.test('a long e-mail address is refused at once, and the loop stays free', async t => {
      for (const size of [100_000, 4_000_000]) {
        const address = `a@${'a.'.repeat(size / 2)}!`
        const health = (async () => {
          await new Promise(r => setTimeout(r, 5))
          const started = Date.now()
          await fetch(`${base}/healthz`)
          return Date.now() - started
        })()
        const res = await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: { addresses: [address], addressType: 'email' } })
        // Longer than any string the route takes (an address is at most 254 characters): refused
        // before the body is parsed.
        t.equal(res.status, 413, `${size} characters`)
        t.match(res.json, { code: 'PAYLOAD_TOO_LARGE' })
        t.ok(res.text.length < 10_000, 'the error does not echo the whole address')
        // Generous: a pattern that backtracks over millions of characters takes far longer.
        t.ok((await health) < 15_000, '/healthz answered meanwhile')
      }
      const near = `${'a'.repeat(60)}@${'b.'.repeat(90)}c`
      const fine = await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: { address: near, addressType: 'email' } })
      t.match(fine, { status: 200, json: { blocked: 1 } }, 'a long but legal address is blocked')
    })

    t.test('free-form values are bounded in depth, nodes and size by their schemas', async t => {
      let deep: unknown = 'leaf'
      for (let i = 0; i < 40; i++) deep = { d: deep }
      const cases: Array<[string, string, unknown, string]> = [
        ['POST', '/assistants-channel/api/v1/channel/api/eventstream/demo', { arguments: { deep } }, 'arguments'],
        ['POST', '/assistants-channel/api/v1/channel/api/eventstream/demo', { arguments: { big: 'x'.repeat(100_000) } }, 'arguments'],
        ['POST', '/assistants-channel/api/v1/channel/api/eventstream/demo', { arguments: { many: Array.from({ length: 5000 }, (_, i) => i) } }, 'arguments'],
      ]
      for (const [method, path, body, field] of cases) {
        const res = await call(base, method, path, { body })
        t.equal(res.status, 400, `${field}: ${JSON.stringify(body).slice(0, 40)}`)
        t.match(res.json, { code: 'VALIDATION_FAILED', details: [{ field, code: 'VALUE_TOO_LARGE' }] })
      }
      const batch = await call(base, 'POST', '/dialer/v1/batches', { body: { name: 'tz', channel: 'phone', duplicateStrategy: 'merge', rules: { timeZone: 'A'.repeat(10_000) } } })
      t.equal(batch.status, 400, 'rules.timeZone is bounded')
      const custom = await call(base, 'POST', `/dialer/v1/batches/${await createBatch(base)}/contacts`, { body: contact(3, { customFields: { note: 'x'.repeat(10_000) } }) })
      t.equal(custom.status, 400, 'customFields values are bounded')
    })
  })
}
