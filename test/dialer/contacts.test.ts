// POST /dialer/v1/batches/{id}/contacts and the contacts.load operation, over real HTTP, on
// both stores.
import t from 'tap'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { contact, createBatch, load, phone, waitForOperation } from '../support/dialer.js'

const DAY = 24 * 60 * 60 * 1000

for (const store of STORES) {
  t.test(`contacts on the ${store} store`, async t => {
    const { base } = await startTestService(t, { store, env: { DIALER_CHUNK_SIZE: '100' } })
    const contactsOf = async (batchId: string) =>
      (await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts?limit=1000`)).json

    t.test('a single contact at the root is accepted and acknowledged with every field', async t => {
      const batchId = await createBatch(base)
      const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: contact(1) })
      t.equal(res.status, 202)
      t.match(res.json, {
        operationId: /^[0-9a-f-]{36}$/,
        operationUrl: `/dialer/v1/batches/operations/${res.json.operationId}`,
        status: 'queued',
        contactsReceived: 1,
        chunksPublished: 1,
        message: 'Contacts queued for processing',
      })
      t.equal(res.headers.get('location'), res.json.operationUrl)
      const op = await waitForOperation(base, res.json.operationId)
      t.match(op, {
        kind: 'contacts.load',
        batchId,
        type: 'contacts.insert',
        status: 'succeeded',
        requestedCount: 1,
        totalChunks: 1,
        chunksCompleted: 1,
        insertedCount: 1,
        invalidCount: 0,
        duplicateCount: 0,
        updatedCount: 0,
        recontactedCount: 0,
        errors: [],
      })
      t.type(op.completedAt, 'string')
      const listed = await contactsOf(batchId)
      t.equal(listed.total, 1)
      t.match(listed.data[0], { identifier: 'c1', name: 'Contact 1', state: 'pending', identifierGenerated: false })
      const batch = await call(base, 'GET', `/dialer/v1/batches/${batchId}`)
      t.equal(batch.json.totalContacts, 1)
    })

    t.test('1000 contacts are split into chunks and all counted', async t => {
      const batchId = await createBatch(base)
      const contacts = Array.from({ length: 1000 }, (_, i) => contact(i))
      const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: { contacts } })
      t.equal(res.status, 202)
      t.equal(res.json.contactsReceived, 1000)
      t.equal(res.json.chunksPublished, 10)
      const op = await waitForOperation(base, res.json.operationId)
      t.match(op, { status: 'succeeded', totalChunks: 10, chunksCompleted: 10, insertedCount: 1000 })
      t.equal((await contactsOf(batchId)).total, 1000)
    })

    t.test('two identifiers that differ only after U+0000 are two contacts, both stored', async t => {
      const batchId = await createBatch(base)
      const long = 'P'.repeat(70)
      const op = await load(base, batchId, { contacts: [contact(1, { identifier: `${long}\0tail` }), contact(2, { identifier: long })] })
      t.equal(op.insertedCount, 2, 'both inserted')
      const listed = await contactsOf(batchId)
      t.same(listed.data.map((c: { identifier: string }) => c.identifier).sort(), [long, `${long}\0tail`], 'both stored')
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.totalContacts, 2, 'and counted')
    })

    t.test('a contact without identifier gets a generated one', async t => {
      const batchId = await createBatch(base)
      const { identifier: _omit, ...anonymous } = contact(5)
      const op = await load(base, batchId, anonymous)
      t.equal(op.insertedCount, 1)
      const [row] = (await contactsOf(batchId)).data
      t.equal(row.identifierGenerated, true)
      t.match(row.identifier, /^[0-9a-f-]{36}$/)
    })

    t.test('every validation problem is listed and nothing is queued', async t => {
      const batchId = await createBatch(base)
      const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, {
        body: {
          contacts: [
            contact(1),
            { identifier: 'bad1', name: '', addresses: [{ address: '+34600111222', type: 'phone', priority: 1 }] },
            { identifier: 'bad2', addresses: [{ address: '123', type: 'phone', priority: 0 }, { address: 'nope', type: 'email', priority: 2 }] },
          ],
        },
      })
      t.equal(res.status, 400)
      t.equal(res.json.code, 'VALIDATION_FAILED')
      t.type(res.json.message, 'string')
      const byField = Object.fromEntries(res.json.details.map((d: any) => [d.field, d]))
      t.match(byField['contacts[1].name'], { index: 1, code: 'REQUIRED' })
      t.match(byField['contacts[1].addresses[0].address'], {
        index: 1,
        code: 'INVALID_PHONE_FORMAT',
        meta: { received: '+34600111222' },
      })
      t.match(byField['contacts[2].name'], { index: 2, code: 'REQUIRED' })
      t.match(byField['contacts[2].addresses[0].address'], { index: 2, code: 'INVALID_PHONE_FORMAT', meta: { received: '123' } })
      t.match(byField['contacts[2].addresses[0].priority'], { index: 2, code: 'INVALID_PRIORITY' })
      t.match(byField['contacts[2].addresses[1].address'], { index: 2, code: 'INVALID_EMAIL_FORMAT' })
      for (const detail of res.json.details) t.equal(detail.error, detail.reason, 'error repeats reason')
      t.equal((await contactsOf(batchId)).total, 0, 'the valid contact was not queued either')
    })

    t.test('a single root contact reports paths as contacts[0]', async t => {
      const batchId = await createBatch(base)
      const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, {
        body: { name: 'X', addresses: [{ address: '+1555', type: 'phone', priority: 1 }] },
      })
      t.equal(res.status, 400)
      t.match(res.json.details, [{ index: 0, field: 'contacts[0].addresses[0].address', code: 'INVALID_PHONE_FORMAT' }])
    })

    t.test('scheduledAt must be UTC, in the future and within 30 days', async t => {
      const batchId = await createBatch(base)
      const at = (ms: number) => new Date(Date.now() + ms).toISOString()
      const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, {
        body: {
          contacts: [
            contact(1, { scheduledAt: at(-60_000) }),
            contact(2, { scheduledAt: at(31 * DAY) }),
            contact(3, { scheduledAt: '2030-01-01T10:00:00+02:00' }),
            contact(4, { scheduledAt: 'tomorrow' }),
            contact(5, { scheduledAt: at(DAY) }),
          ],
        },
      })
      t.equal(res.status, 400)
      const codes = Object.fromEntries(res.json.details.map((d: any) => [d.index, d.code]))
      t.same(codes, { 0: 'SCHEDULED_AT_IN_PAST', 1: 'SCHEDULED_AT_TOO_FAR', 2: 'INVALID_SCHEDULED_AT', 3: 'INVALID_SCHEDULED_AT' })

      const ok = await load(base, batchId, contact(5, { scheduledAt: at(DAY) }))
      t.equal(ok.insertedCount, 1)
      const [row] = (await contactsOf(batchId)).data
      t.equal(row.scheduledAt, row.nextAttemptAt, 'scheduledAt sets the first attempt')
    })

    t.test('empty and oversized requests', async t => {
      const batchId = await createBatch(base)
      const empty = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: { contacts: [] } })
      t.equal(empty.status, 400)
      t.same(empty.json.details, [])
      t.type(empty.json.message, 'string')
      const none = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`)
      t.equal(none.status, 400)
      t.same(none.json.details, [])
      const many = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, {
        body: { contacts: Array.from({ length: 1001 }, (_, i) => contact(i)) },
      })
      t.equal(many.status, 400)
      t.match(many.json.details[0], /1001/)
      t.match(many.json.message, /1001/)
    })

    t.test('malformed JSON is a 400', async t => {
      const batchId = await createBatch(base)
      const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { raw: '{"contacts": [', headers: { 'content-type': 'application/json' } })
      t.equal(res.status, 400)
      t.equal(res.json.code, 'INVALID_JSON')
    })

    t.test('a list item that is not a contact object (null, a number, text, a list) is a 400 naming the item, not a 500', async t => {
      const batchId = await createBatch(base)
      const valid = JSON.stringify(contact(1))
      // Raw JSON, so a repeated key reaches the server as sent (the last value wins in JSON.parse).
      const cases: Array<[string, Array<{ index: number; field: string }>]> = [
        ['{"contacts":[null]}', [{ index: 0, field: 'contacts[0]' }]],
        ['{"contacts":[null,null]}', [{ index: 0, field: 'contacts[0]' }, { index: 1, field: 'contacts[1]' }]],
        [`{"contacts":[${valid}],"contacts":[null]}`, [{ index: 0, field: 'contacts[0]' }]],
        [`{"contacts":[${valid},null]}`, [{ index: 1, field: 'contacts[1]' }]],
        ['{"contacts":[1]}', [{ index: 0, field: 'contacts[0]' }]],
        ['{"contacts":["x"]}', [{ index: 0, field: 'contacts[0]' }]],
        ['{"contacts":[[]]}', [{ index: 0, field: 'contacts[0]' }]],
        ['{"contacts":[{"name":"A","addresses":[null]}]}', [{ index: 0, field: 'contacts[0].addresses[0]' }]],
        // Large enough to be checked by the validation thread rather than inline.
        [JSON.stringify({ contacts: [...Array.from({ length: 300 }, (_, i) => contact(i)), null] }), [{ index: 300, field: 'contacts[300]' }]],
      ]
      for (const [raw, expected] of cases) {
        const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { raw, headers: { 'content-type': 'application/json' } })
        const label = raw.length > 80 ? `${raw.slice(0, 40)}…${raw.slice(-20)}` : raw
        t.equal(res.status, 400, label)
        t.equal(res.json?.code, 'VALIDATION_FAILED', label)
        t.match(res.json?.details, expected.map(e => ({ ...e, code: 'INVALID_TYPE', reason: String, error: String })), label)
        t.equal(res.json?.details?.length, expected.length, `${label}: one problem per item`)
      }
      t.equal((await contactsOf(batchId)).total, 0, 'nothing was queued')
    })

    t.test('another account\'s batch answers 404 like a missing one', async t => {
      const batchId = await createBatch(base)
      const foreign = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { key: KEYS.globex, body: contact(1) })
      const missing = await call(base, 'POST', `/dialer/v1/batches/00000000-0000-4000-8000-000000000000/contacts`, { body: contact(1) })
      t.equal(foreign.status, 404)
      t.equal(missing.status, 404)
      t.same(foreign.json, missing.json)
      const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: contact(1) })
      const op = await call(base, 'GET', res.json.operationUrl, { key: KEYS.globex })
      t.equal(op.status, 404, 'nor can it read the operation')
    })

    t.test('duplicateStrategy skip discards repeats: partial, counted, sampled', async t => {
      const batchId = await createBatch(base, { duplicateStrategy: 'skip' })
      await load(base, batchId, { contacts: [contact(1), contact(2)] })
      const op = await load(base, batchId, { contacts: [contact(1, { name: 'Changed' }), contact(2), contact(3)] })
      t.match(op, { status: 'partial', insertedCount: 1, duplicateCount: 2, updatedCount: 0 })
      t.equal(op.errors.length, 2)
      t.match(op.errors[0], { identifier: 'c1', reason: /DUPLICATE/ })
      const rows = (await contactsOf(batchId)).data
      t.equal(rows.find((r: any) => r.identifier === 'c1').name, 'Contact 1', 'existing data kept')
    })

    t.test('duplicateStrategy merge applies sent fields and keeps the rest', async t => {
      const batchId = await createBatch(base, { duplicateStrategy: 'merge' })
      await load(base, batchId, contact(1, { contactPriority: 3, customFields: { plan: 'gold', city: 'Madrid' } }))
      const op = await load(base, batchId, contact(1, { name: 'Renamed', customFields: { plan: 'silver' } }))
      t.match(op, { status: 'succeeded', updatedCount: 1, insertedCount: 0, duplicateCount: 0 })
      const [row] = (await contactsOf(batchId)).data
      t.equal(row.name, 'Renamed')
      t.equal(row.contactPriority, 3)
      t.same(row.customFields, { plan: 'silver', city: 'Madrid' })
      t.equal(row.state, 'pending')
    })

    t.test('duplicateStrategy replace overwrites the contact', async t => {
      const batchId = await createBatch(base, { duplicateStrategy: 'replace' })
      await load(base, batchId, contact(1, { contactPriority: 3, customFields: { plan: 'gold' } }))
      const op = await load(base, batchId, contact(1, { name: 'Replaced' }))
      t.equal(op.updatedCount, 1)
      const [row] = (await contactsOf(batchId)).data
      t.equal(row.name, 'Replaced')
      t.equal(row.contactPriority, null)
      t.same(row.customFields, {})
    })

    t.test('onDuplicate recontact puts contacts back; resetAttempts resets counters; unknown ones are inserted', async t => {
      const batchId = await createBatch(base, { duplicateStrategy: 'skip' })
      await load(base, batchId, { contacts: [contact(1), contact(2)] })
      // Mix per-contact treatment in one request: recontact, recontact+reset, default, new.
      const op = await load(base, batchId, {
        contacts: [
          contact(1, { onDuplicate: 'recontact' }),
          contact(2, { onDuplicate: 'recontact', resetAttempts: true }),
          contact(3, { onDuplicate: 'recontact' }),
          contact(1),
        ],
      })
      t.match(op, { recontactedCount: 2, insertedCount: 1, duplicateCount: 1, status: 'partial' })
      const rows = (await contactsOf(batchId)).data
      t.equal(rows.length, 3)
      t.ok(rows.every((r: any) => r.state === 'pending' && r.attempts === 0))
    })

    t.test('duplicates inside one request resolve in order', async t => {
      const batchId = await createBatch(base, { duplicateStrategy: 'merge' })
      // c7 appears at positions 0 and 150 (different chunks by position): kept in one chunk.
      const contacts = Array.from({ length: 150 }, (_, i) => contact(1000 + i))
      contacts.unshift(contact(7))
      contacts.push(contact(7, { name: 'Second' }))
      const op = await load(base, batchId, { contacts })
      t.match(op, { insertedCount: 151, updatedCount: 1, status: 'succeeded', requestedCount: 152 })
      const c7 = await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts?identifier=c7`)
      t.equal(c7.json.data[0].name, 'Second')
    })

    t.test('the errors sample is capped at 20 while counters stay exact', async t => {
      const batchId = await createBatch(base, { duplicateStrategy: 'skip' })
      const contacts = Array.from({ length: 60 }, (_, i) => contact(i))
      await load(base, batchId, { contacts })
      const op = await load(base, batchId, { contacts })
      t.equal(op.duplicateCount, 60)
      t.equal(op.errors.length, 20)
    })

    t.test('archived batches refuse contacts with 409', async t => {
      const batchId = await createBatch(base)
      const archive = await call(base, 'POST', `/dialer/v1/batches/${batchId}/archive`)
      t.equal(archive.status, 202)
      const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, { body: contact(1) })
      t.equal(res.status, 409)
      t.equal(res.json.code, 'BATCH_NOT_WRITABLE')
    })

    t.test('phone numbers: 7 to 15 digits', async t => {
      const batchId = await createBatch(base)
      const bad = ['123456', '1234567890123456', '34 600 111 222', '3460011122a']
      const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, {
        body: { contacts: bad.map((address, i) => ({ identifier: `p${i}`, name: 'P', addresses: [{ address, type: 'phone', priority: 1 }] })) },
      })
      t.equal(res.status, 400)
      t.equal(res.json.details.filter((d: any) => d.code === 'INVALID_PHONE_FORMAT').length, 4)
      const ok = await load(base, batchId, { contacts: [contact(1, { addresses: [{ address: '1234567', type: 'phone', priority: 1 }, { address: phone(9), type: 'whatsapp', priority: 2 }] })] })
      t.equal(ok.insertedCount, 1)
    })
  })

  t.test(`account contact cap on the ${store} store`, async t => {
    const { base } = await startTestService(t, { store, env: { DIALER_MAX_ACTIVE_CONTACTS: '10' } })
    const batchId = await createBatch(base)
    await load(base, batchId, { contacts: Array.from({ length: 8 }, (_, i) => contact(i)) })
    const res = await call(base, 'POST', `/dialer/v1/batches/${batchId}/contacts`, {
      body: { contacts: Array.from({ length: 5 }, (_, i) => contact(100 + i)) },
    })
    t.equal(res.status, 400)
    t.match(res.json, { code: 'CONTACT_LIMIT_EXCEEDED', maxContacts: 10, currentActive: 8, attempting: 5, exceededBy: 3 })
    t.match(res.json.message, /at most 2 more/)
    const other = await createBatch(base, {}, KEYS.globex)
    const globex = await call(base, 'POST', `/dialer/v1/batches/${other}/contacts`, {
      key: KEYS.globex,
      body: { contacts: Array.from({ length: 5 }, (_, i) => contact(i)) },
    })
    t.equal(globex.status, 202, 'the cap is per account')
  })
}
