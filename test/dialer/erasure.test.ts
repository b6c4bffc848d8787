// Erasing one person over HTTP, on both stores: contacts in every batch (found by address, by
// identifier, and by the addresses of those), their attempts, blocked addresses (kept, without
// the address), live sessions that name them (closed), session records' last messages, load
// errors and stored idempotent answers. Then every collection and database of the store is read
// generically: nothing of the person is left but what another account holds at the same address,
// which is untouched, and the operation's counts say what went.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { call, eventually, KEYS, STORES } from '../support/harness.js'
import { SESSION_RECORDS } from '../../reports/index.js'
import { createBatch, load, startBatch, startDialingService, waitForOperation } from '../support/dialer.js'
import { ADMIN, CHANNEL, createSession } from '../support/sse.js'
import { allPlaces, placesHolding } from '../support/store-places.js'
import { PersonMatcher } from '../../dialer/erasure.js'

const PHONE = '34611223344'
/** The person's second address: only on one of their contacts, found through the others. */
const EMAIL = 'ana.second@example.org'
/** A work phone only on the contact found by identifier. */
const WORK = '34699999999'
const ID = 'crm-4711'
const NAME = 'Ana Erasable'
/** Every way the person shows up in what the test writes (written "+34 611 22 33 44" in one message). */
const TRACES = [PHONE, EMAIL, WORK, ID, NAME, '611 22 33 44']

const person = (extra: Record<string, unknown>) => ({ name: NAME, ...extra })
const phone = (address: string, priority = 1) => ({ address, type: 'phone', priority })

for (const store of STORES) {
  t.test(`erasing a person on the ${store} store`, async t => {
    const { base, service, cycle, mongoUrl } = await startDialingService(t, store, { DIALER_SIM_OUTCOMES: 'answered=100', ENGINE_RECORD_FLUSH_MS: '0' })
    const places = () => placesHolding(service, mongoUrl, TRACES)

    /** A live session of `key`'s account with these arguments and one user message, answered. */
    const session = async (key: string, args: Record<string, unknown>, message: string) => {
      const s = await createSession(base, { key, body: { arguments: args } })
      await s.stream.next('crew.status.waiting')
      t.equal((await call(base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { key, body: { message } })).status, 201)
      const reply = await s.stream.next('assistant.message')
      t.teardown(() => s.stream.close())
      // Its report record has the reply as its last message: nothing of it is still being written.
      const records = service.platform.store.collection(SESSION_RECORDS)
      await eventually(() => records.findOne({ _id: s.sessionId }), r => r?.last_message?.text === reply.data.text)
      return s.sessionId
    }

    // Another account with the same phone and e-mail: a contact dialed, a block, a live session.
    const theirs = await createBatch(base, {}, KEYS.globex)
    await load(base, theirs, { contacts: [{ identifier: 'gx-1', name: 'Globex Customer', addresses: [phone(PHONE)] }] }, KEYS.globex)
    await startBatch(base, theirs, KEYS.globex)
    await cycle()
    await call(base, 'POST', '/dialer/v1/blocked-addresses', { key: KEYS.globex, body: { address: PHONE, addressType: 'phone', reason: `DNC, also ${EMAIL}` } })
    const theirSession = await session(KEYS.globex, { phone: PHONE, customer: ID }, `write to ${EMAIL}`)
    const before = allPlaces(await places())
    t.ok(before.length > 0, 'the other account holds the same address')

    // The person in this account: four contacts in four batches, one dialed.
    const dialed = await createBatch(base)
    await load(base, dialed, {
      contacts: [
        person({ identifier: ID, addresses: [phone(PHONE), { address: EMAIL, type: 'email', priority: 2 }] }),
        { identifier: 'q-1', name: 'Quentin Other', addresses: [phone('34600000077')] },
      ],
    })
    const byEmail = await createBatch(base)
    await load(base, byEmail, { contacts: [person({ addresses: [{ address: EMAIL.toUpperCase(), type: 'email', priority: 1 }] })] })
    const skipping = await createBatch(base, { duplicateStrategy: 'skip' })
    await load(base, skipping, { contacts: [person({ identifier: ID, addresses: [phone(PHONE)] })] })
    const duplicate = await load(base, skipping, { contacts: [person({ identifier: ID, addresses: [phone(PHONE)] })] })
    t.match(duplicate.errors, [{ identifier: ID }], 'a load error names the identifier')
    const byIdentifier = await createBatch(base)
    await load(base, byIdentifier, { contacts: [person({ identifier: ID, addresses: [phone(WORK)] })] })
    await startBatch(base, dialed)
    await cycle()
    const attempts = (await call(base, 'GET', `/dialer/v1/batches/${dialed}/attempts`)).json.data
    t.equal(attempts.filter((a: any) => a.address === PHONE).length, 1, 'the person was dialed once')
    const contactId = (await call(base, 'GET', `/dialer/v1/batches/${dialed}/contacts?identifier=${ID}`)).json.data[0].contactId
    const scheduledAt = new Date(service.platform.clock.now() + 86_400_000).toISOString()
    const rescheduled = await call(base, 'POST', `/dialer/v1/batches/${dialed}/contacts/${contactId}/reschedule`, { body: { scheduledAt }, headers: { 'Idempotency-Key': randomUUID() } })
    t.equal(rescheduled.status, 200, 'an idempotent answer that holds the contact is stored')
    await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: { address: PHONE, addressType: 'phone', reason: `asked by ${NAME}` } })
    await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: { address: '34655555555', addressType: 'phone', reason: 'same household as +34 611 22 33 44' } })
    // Sessions naming them: by an address in the arguments, an identifier as an argument, an
    // address in a message (another spelling); one closed already (its record names the customer
    // by another spelling of the address); one that does not.
    const named = [
      await session(KEYS.acme, { name: NAME, phone: PHONE }, 'hello'),
      await session(KEYS.acme, { customer: ID }, 'hi there'),
      await session(KEYS.acme, {}, 'my mail is Ana.Second@Example.ORG'),
    ]
    const closedEarlier = await session(KEYS.acme, { name: NAME, telefono: '+34 611 22 33 44' }, 'call me at +34 611 22 33 44')
    t.equal((await call(base, 'DELETE', `${ADMIN}/${closedEarlier}`, { headers: { UserId: randomUUID() } })).status, 204)
    const unrelated = await session(KEYS.acme, { name: 'Someone Else' }, 'hello')
    t.ok(allPlaces(await places()).length > before.length, 'the person is in the store')

    const requested = await call(base, 'POST', '/dialer/v1/erasures', { body: { addresses: [{ address: PHONE, type: 'phone' }], identifiers: [ID] } })
    t.equal(requested.status, 202)
    t.match(requested.json, { operationId: String, status: 'queued' })
    t.equal(requested.headers.get('location'), requested.json.operationUrl)
    const op = await waitForOperation(base, requested.json.operationId)

    t.test('the operation says what it erased', async t => {
      t.match(op, { kind: 'person.erasure', type: 'person.erase', status: 'succeeded', error: null, completedAt: String })
      t.same(op.counts, {
        contacts: 4,
        attempts: 1,
        blockedAddresses: 2,
        sessions: 3,
        sessionRecords: 4,
        importErrors: 0,
        operationErrors: 1,
        webhookReports: 0,
        idempotencyRecords: 1,
      })
      t.notOk('batchId' in op, 'an erasure is the account`s, not a batch`s')
      t.equal((await call(base, 'GET', `/dialer/v1/batches/operations/${op.operationId}`, { key: KEYS.globex })).status, 404, 'nor another account`s to read')
    })

    t.test('nothing of the person is left anywhere in the store but the other account`s data', async t => {
      const after = await places()
      t.same(allPlaces(after), before, 'every place that holds any trace of the person held it before they were loaded here')
      for (const trace of [EMAIL, WORK, ID, NAME]) t.same([...after.get(trace)!].filter(p => !before.includes(p)), [], `no ${trace}`)
    })

    t.test('the person is gone from every answer; the rest of the account is not', async t => {
      for (const batchId of [dialed, byEmail, skipping, byIdentifier]) {
        const contacts = (await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts`)).json
        t.same(contacts.data.map((c: any) => c.identifier), batchId === dialed ? ['q-1'] : [])
        t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.totalContacts, batchId === dialed ? 1 : 0, 'the batch totals follow')
      }
      t.same((await call(base, 'GET', `/dialer/v1/batches/${dialed}/attempts`)).json.data.map((a: any) => a.address), ['34600000077'])
      for (const sessionId of named) {
        const history = await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: { UserId: randomUUID() } })
        t.equal(history.status, 404, 'a session naming them is closed')
      }
      t.equal((await call(base, 'GET', `${ADMIN}/${unrelated}/history`, { headers: { UserId: randomUUID() } })).status, 200, 'another session lives on')
      const blocks = (await call(base, 'GET', '/dialer/v1/blocked-addresses')).json.data
      t.match(
        blocks.map((b: any) => [b.address, b.reason]).sort(),
        [['34655555555', null], [/^erased:[0-9a-f-]{36}$/, null]],
        'the block stays without its address or reason; another block loses the reason naming them',
      )
      t.equal((await call(base, 'GET', `/dialer/v1/blocked-addresses?addressType=phone&address=${PHONE}`)).json.total, 1, 'whoever holds the address still finds its block')
    })

    t.test('the other account keeps everything at the same address', async t => {
      const contacts = (await call(base, 'GET', `/dialer/v1/batches/${theirs}/contacts`, { key: KEYS.globex })).json.data
      t.match(contacts, [{ identifier: 'gx-1', addresses: [{ address: PHONE }] }])
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${theirs}/attempts`, { key: KEYS.globex })).json.total, 1)
      t.match((await call(base, 'GET', '/dialer/v1/blocked-addresses', { key: KEYS.globex })).json.data, [{ address: PHONE, reason: `DNC, also ${EMAIL}` }])
      const history = await call(base, 'GET', `${ADMIN}/${theirSession}/history`, { key: KEYS.globex, headers: { UserId: randomUUID() } })
      t.equal(history.status, 200)
      t.ok(JSON.stringify(history.json.data).includes(EMAIL), 'its session and its history are whole')
    })

    t.test('the kept block still refuses the address: a contact loaded at it later is never dialed', async t => {
      const later = await createBatch(base)
      await load(base, later, { contacts: [{ identifier: 'new-1', name: 'Someone', addresses: [phone(PHONE)] }] })
      await startBatch(base, later)
      await cycle()
      const [contact] = (await call(base, 'GET', `/dialer/v1/batches/${later}/contacts`)).json.data
      const detail = (await call(base, 'GET', `/dialer/v1/batches/${later}/contacts/${contact.contactId}`)).json
      t.match(detail, { state: 'done', doneReason: 'blocked', attempts: 0 })
      t.same((await call(base, 'DELETE', '/dialer/v1/blocked-addresses', { body: { address: PHONE, addressType: 'phone' } })).json, { unblocked: 1 }, 'and unblocking the address removes it')
    })
  })
}

t.test('an erasure names at least one address or identifier, each valid', async t => {
  const { base } = await startDialingService(t, 'memory')
  for (const body of [{}, { addresses: [] }, { identifiers: [] }, { addresses: [{ address: '+34 611', type: 'phone' }] }, { addresses: [{ address: 'x', type: 'email' }] }, { name: NAME }]) {
    const res = await call(base, 'POST', '/dialer/v1/erasures', { body })
    t.equal(res.status, 400, JSON.stringify(body))
    t.equal(res.json.code, 'VALIDATION_FAILED')
  }
  const openapi = (await call(base, 'GET', '/openapi.json', { key: null })).json
  t.match(openapi.paths['/dialer/v1/erasures'].post, {
    requestBody: { content: { 'application/json': { schema: { $ref: '#/components/schemas/dialer.erasure.create' } } } },
    responses: { '202': { content: { 'application/json': { schema: { $ref: '#/components/schemas/dialer.erasure.accepted' } } } } },
  })
  t.match(openapi.components.schemas['dialer.operation'].properties.kind.enum, ['contacts.load', 'batch.lifecycle', 'person.erasure'])
})

t.test('what names a person: an address however it is written, an identifier only as an argument of a session', async t => {
  const person = new PersonMatcher([PHONE, 'ana@example.com'], ['general'])
  for (const text of ['34611223344', 'call +34 611 22 33 44 now', '(0034) 611-223-344', 'mail ANA@Example.com please']) t.ok(person.text(text), text)
  for (const text of ['611 22 33 44', '346112233445', '1734611223344', 'ana@example.co']) t.notOk(person.text(text), `${text}: not without its country code, nor inside a longer number`)
  t.ok(person.session({ conversation: { arguments: { who: 'general' } } }), 'an identifier as an argument')
  t.notOk(person.session({ control: { context: { agentId: 'general' } } }), 'not as any other value (an agent`s id)')
  t.ok(person.session({ type: 'message.user', text: 'ana@example.com' }))
  t.notOk(person.session({ type: 'message.user', at: 34611223344 }), 'numbers are not texts')
  t.ok(person.value({ body: { identifier: 'general' } }), 'a stored answer names it as any value')
})
