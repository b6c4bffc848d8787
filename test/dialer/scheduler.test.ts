// The dialing scheduler end to end over HTTP, with a manual clock (no real waiting for retry
// delays) and selection cycles run one at a time: retries and completion, blocked at dial time,
// windows and the why-not-dialed answer, atomic claims with two schedulers, pacing, stop with
// attempts in flight, reschedule and cancel.
import t from 'tap'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { contact, createBatch, extraScheduler, load, phone, startBatch, startDialingService, stopBatch } from '../support/dialer.js'
import type { AttemptRequest, AttemptResult, Provider } from '../../dialer/providers/index.js'
import type { Outcome } from '../../dialer/rules.js'

const MIN = 60_000

/** A provider whose attempts end when the test says so. */
class GatedProvider implements Provider {
  readonly name = 'gated'
  readonly waiting: { request: AttemptRequest; end: (r: AttemptResult) => void }[] = []
  dial(request: AttemptRequest) {
    return new Promise<AttemptResult>(end => this.waiting.push({ request, end }))
  }
  releaseAll(outcome: Outcome) {
    for (const w of this.waiting.splice(0)) w.end({ outcome })
  }
}

async function contactsOf(base: string, batchId: string) {
  const res = await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts?limit=1000`)
  return new Map<string, any>(res.json.data.map((c: any) => [c.identifier, c]))
}

const detail = async (base: string, batchId: string, contactId: string) => (await call(base, 'GET', `/dialer/v1/batches/${batchId}/contacts/${contactId}`)).json

for (const store of STORES) {
  t.test(`dialing on the ${store} store`, async t => {
    const { base, service, clock, cycle } = await startDialingService(t, store)

    t.test('retries after the delay per outcome, exhausts attempts, completes the batch', async t => {
      const batchId = await createBatch(base, { rules: { maxAttempts: 3, retryDelayMinutes: { busy: 5, no_answer: 30 } } })
      await load(base, batchId, {
        contacts: [
          contact(1, { customFields: { simulatedOutcomes: 'answered' } }),
          contact(2, { customFields: { simulatedOutcomes: 'busy,busy,answered' } }),
          contact(3, { customFields: { simulatedOutcomes: 'no_answer' } }),
        ],
      })
      t.equal((await cycle()).claimed, 0, 'created, not started: nothing dialed')
      await startBatch(base, batchId)
      const t0 = clock.now()

      t.equal((await cycle()).claimed, 3)
      let contacts = await contactsOf(base, batchId)
      t.match(contacts.get('c1'), { state: 'done', attempts: 1 })
      t.match(contacts.get('c2'), { state: 'pending', attempts: 1, nextAttemptAt: new Date(t0 + 5 * MIN).toISOString() })
      t.match(contacts.get('c3'), { state: 'pending', attempts: 1, nextAttemptAt: new Date(t0 + 30 * MIN).toISOString() })
      t.equal((await cycle()).claimed, 0, 'nothing due before the retry delay')

      clock.advance(5 * MIN)
      t.equal((await cycle()).claimed, 1, 'c2 after 5 minutes')
      clock.advance(5 * MIN)
      t.equal((await cycle()).claimed, 1, 'c2 again, answered')
      clock.advance(20 * MIN)
      t.equal((await cycle()).claimed, 1, 'c3 after 30 minutes')
      clock.advance(29 * MIN)
      t.equal((await cycle()).claimed, 0)
      clock.advance(1 * MIN)
      const last = await cycle()
      t.equal(last.claimed, 1, 'c3 third attempt')
      contacts = await contactsOf(base, batchId)
      t.match(contacts.get('c2'), { state: 'done', attempts: 3 })
      t.match(contacts.get('c3'), { state: 'done', attempts: 3 })

      // Completed by this cycle, or already by the previous one if its attempt ended quickly.
      const completed = await cycle()
      t.ok(completed.completed.includes(batchId) || last.completed.includes(batchId), 'completed once nothing is left')
      const batch = await call(base, 'GET', `/dialer/v1/batches/${batchId}`)
      t.equal(batch.json.status, 'completed')
      t.same(batch.json.progress, { pending: 0, inProgress: 0, done: 3, cancelled: 0, byOutcome: { answered: 2, no_answer: 1 } })
      const logs = await call(base, 'GET', `/dialer/v1/batches/${batchId}/logs`)
      t.match(logs.json.data[0], { operation: 'completed', performedBy: 'system', details: { reason: 'nothing_left_to_dial' } })
      t.equal(logs.json.data[0].user, undefined)

      const all = await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts`)
      t.equal(all.json.total, 7)
      t.match(all.json.data[0], { batchId, identifier: 'c3', address: phone(3), type: 'phone', outcome: 'no_answer', provider: 'simulated', attemptNumber: 3 })
      const busy = await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts?outcome=busy&limit=1`)
      t.equal(busy.json.total, 2)
      t.equal(busy.json.data.length, 1)
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts?outcome=maybe`)).status, 400)

      const c3 = await detail(base, batchId, contacts.get('c3').contactId)
      t.same(c3.attemptHistory.map((a: any) => a.outcome), ['no_answer', 'no_answer', 'no_answer'])
      t.same(c3.attemptHistory.map((a: any) => a.attemptNumber), [1, 2, 3])
      t.match(c3, { attempts: 3, lastOutcome: 'no_answer', doneReason: 'attempts_exhausted', addressAttempts: { [phone(3)]: 3 } })
      t.match(c3.dialability, { dialable: false, reason: 'attempts_exhausted', nextEligibleAt: null })
      t.equal((await cycle()).claimed, 0, 'a completed batch is not dialed')
    })

    t.test('a batch whose load is still being applied is not completed early', async t => {
      const batchId = await createBatch(base)
      await load(base, batchId, contact(41, { customFields: { simulatedOutcomes: 'answered' } }))
      await startBatch(base, batchId)
      // Another load of this batch is queued (its chunks not applied yet).
      const ops = service.platform.store.collection('dialer_operations')
      const at = new Date(clock.now())
      await ops.insertOne({
        _id: `pending-load-${batchId}`,
        kind: 'contacts.load',
        accountId: 'acme',
        batchId,
        status: 'running',
        createdAt: at,
        expiresAt: new Date(clock.now() + 6 * 60 * MIN),
      })
      await cycle()
      await cycle()
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status, 'running', 'waits for the load')
      await ops.updateOne({ _id: `pending-load-${batchId}` }, { $set: { status: 'succeeded' } })
      await cycle()
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status, 'completed')
    })

    t.test('recontact puts a dialed contact back; resetAttempts resets its counters', async t => {
      const batchId = await createBatch(base, { duplicateStrategy: 'skip', rules: { maxAttempts: 1 } })
      const pinned = { customFields: { simulatedOutcomes: 'no_answer' } }
      await load(base, batchId, { contacts: [contact(61, pinned), contact(62, pinned)] })
      await startBatch(base, batchId)
      t.equal((await cycle()).claimed, 2)
      let rows = await contactsOf(base, batchId)
      t.match(rows.get('c61'), { state: 'done', attempts: 1 })
      // Default treatment: counted as duplicate, not put back into dialing.
      const plain = await load(base, batchId, contact(61, pinned))
      t.equal(plain.duplicateCount, 1)
      t.equal((await contactsOf(base, batchId)).get('c61').state, 'done')
      // recontact: back to pending with its attempts kept (so maxAttempts 1 ends it again);
      // recontact + resetAttempts: counters reset, dialed once more.
      const back = await load(base, batchId, {
        contacts: [contact(61, { ...pinned, onDuplicate: 'recontact' }), contact(62, { ...pinned, onDuplicate: 'recontact', resetAttempts: true })],
      })
      t.equal(back.recontactedCount, 2)
      rows = await contactsOf(base, batchId)
      t.match(rows.get('c61'), { state: 'pending', attempts: 1 })
      t.match(rows.get('c62'), { state: 'pending', attempts: 0 })
      if ((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status === 'completed') await startBatch(base, batchId)
      t.equal((await cycle()).claimed, 1, 'only the reset contact is dialed again')
      rows = await contactsOf(base, batchId)
      t.match(rows.get('c61'), { state: 'done', attempts: 1 })
      t.match(rows.get('c62'), { state: 'done', attempts: 1 })
    })

    t.test('the blocked list is checked at dial time', async t => {
      const batchId = await createBatch(base)
      await load(base, batchId, {
        contacts: [contact(11), contact(12, { addresses: [{ address: phone(12), type: 'phone', priority: 1 }, { address: 'Ana@Example.com', type: 'email', priority: 2 }] })],
      })
      await startBatch(base, batchId)
      // Blocked after the load, before the cycle.
      t.equal((await call(base, 'POST', '/dialer/v1/blocked-addresses', { body: { addresses: [phone(11), phone(12)], addressType: 'phone' } })).status, 200)
      const contacts = await contactsOf(base, batchId)
      const before = await detail(base, batchId, contacts.get('c11').contactId)
      t.match(before.dialability, { dialable: false, reason: 'blocked', nextEligibleAt: null })
      t.match((await detail(base, batchId, contacts.get('c12').contactId)).dialability, { dialable: true, address: { type: 'email' } }, 'next address')

      const report = await cycle()
      t.equal(report.skipped.blocked, 1)
      const attempts = await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts`)
      t.same(attempts.json.data.map((a: any) => [a.identifier, a.address]), [['c12', 'Ana@Example.com']], 'only the unblocked address is dialed')
      const c11 = await detail(base, batchId, contacts.get('c11').contactId)
      t.match(c11, { state: 'done', doneReason: 'blocked', attempts: 0, attemptHistory: [] })
      t.match(c11.dialability, { reason: 'blocked' })
      const batch = await call(base, 'GET', `/dialer/v1/batches/${batchId}`)
      t.match(batch.json.progress.byOutcome, { blocked: 1 })
      await call(base, 'DELETE', '/dialer/v1/blocked-addresses', { body: { addresses: [phone(11), phone(12)], addressType: 'phone' } })
      await cycle()
      if (batch.json.status === 'running') await stopBatch(base, batchId).catch(() => undefined)
    })

    t.test('calling windows in the contact\'s zone; why a contact is not being dialed', async t => {
      clock.set('2036-03-03T10:30:00Z') // Monday: 11:30 in Madrid, 05:30 in New York
      const batchId = await createBatch(base, {
        rules: { timeZone: 'Europe/Madrid', callingWindows: [{ days: ['mon', 'tue', 'wed', 'thu', 'fri'], start: '09:00', end: '17:00' }], maxAttempts: 1 },
      })
      await load(base, batchId, { contacts: [contact(21), contact(22, { customFields: { timeZone: 'America/New_York' } })] })
      const contacts = await contactsOf(base, batchId)
      const ny = contacts.get('c22').contactId
      t.match((await detail(base, batchId, ny)).dialability, { dialable: false, reason: 'batch_not_running' })
      await startBatch(base, batchId)
      t.match((await detail(base, batchId, ny)).dialability, { dialable: false, reason: 'outside_window', nextEligibleAt: '2036-03-03T14:00:00.000Z' })
      t.match((await detail(base, batchId, contacts.get('c21').contactId)).dialability, { dialable: true, reason: null })

      const report = await cycle()
      t.equal(report.skipped.outside_window, 1)
      const attempts = await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts`)
      t.same(attempts.json.data.map((a: any) => a.identifier), ['c21'])
      const skipped = await detail(base, batchId, ny)
      t.match(skipped, { state: 'pending', nextAttemptAt: '2036-03-03T14:00:00.000Z' })
      t.match(skipped.dialability, { reason: 'scheduled_later', nextEligibleAt: '2036-03-03T14:00:00.000Z' })

      clock.set('2036-03-03T14:00:00Z')
      t.equal((await cycle()).claimed, 1, 'dialed when its window opens')
      await cycle()
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status, 'completed')
    })

    t.test('two schedulers racing on one store dial each contact once', async t => {
      const batchId = await createBatch(base, { rules: { maxAttempts: 1 } })
      await load(base, batchId, { contacts: Array.from({ length: 60 }, (_, i) => contact(100 + i)) })
      await startBatch(base, batchId)
      const a = extraScheduler(service.platform, 'worker-a')
      const b = extraScheduler(service.platform, 'worker-b')
      const [ra, rb] = await Promise.all([a.runCycle(), b.runCycle()])
      await Promise.all([a.drain(), b.drain()])
      const [ra2, rb2] = await Promise.all([a.runCycle(), b.runCycle()])
      await Promise.all([a.drain(), b.drain()])
      t.equal(ra.claimed + rb.claimed + ra2.claimed + rb2.claimed, 60, `claims: ${ra.claimed} + ${rb.claimed} + ${ra2.claimed} + ${rb2.claimed}`)
      const attempts = await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts?limit=1000`)
      t.equal(attempts.json.total, 60)
      t.equal(new Set(attempts.json.data.map((x: any) => x.contactId)).size, 60, 'no contact twice')
      // The cycle after the last attempts were recorded completes the batch.
      t.equal((await a.runCycle()).claimed, 0)
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status, 'completed')
    })

    t.test('pacing per batch and per account; stop lets attempts in flight finish', async t => {
      const gate = new GatedProvider()
      const s = extraScheduler(service.platform, 'gated', { provider: gate, dialer: { maxInFlightPerAccount: 3 } })
      const one = await createBatch(base, { rules: { maxInFlight: 2, maxAttempts: 5, retryDelayMinutes: { busy: 1 } } })
      clock.advance(1000) // batches are served oldest first
      const two = await createBatch(base, { rules: { maxAttempts: 5 } })
      await load(base, one, { contacts: [contact(201), contact(202), contact(203)] })
      await load(base, two, { contacts: [contact(204), contact(205), contact(206)] })
      await startBatch(base, one)
      await startBatch(base, two)

      const first = await s.runCycle()
      t.equal(first.claimed, 3, 'the account limit')
      t.equal(gate.waiting.filter(w => w.request.batchId === one).length, 2, 'the batch limit')
      t.equal((await s.runCycle()).claimed, 0, 'no room while they are in flight')
      const inFlight = await call(base, 'GET', `/dialer/v1/batches/${one}`)
      t.match(inFlight.json.progress, { inProgress: 2, pending: 1 })
      const running = await call(base, 'GET', `/dialer/v1/batches/${one}/attempts`)
      t.same(running.json.data.map((a: any) => a.outcome), [null, null], 'recorded as in flight')

      await stopBatch(base, one)
      await stopBatch(base, two)
      const stopping = s.stop()
      gate.releaseAll('busy')
      await stopping
      const ended = await call(base, 'GET', `/dialer/v1/batches/${one}/attempts`)
      t.same(ended.json.data.map((a: any) => a.outcome), ['busy', 'busy'], 'finished and recorded after the stop')
      t.ok(ended.json.data.every((a: any) => a.endedAt !== null))
      const progress = (await call(base, 'GET', `/dialer/v1/batches/${one}`)).json.progress
      t.match(progress, { inProgress: 0, pending: 3 })

      clock.advance(MIN)
      const again = extraScheduler(service.platform, 'gated-2', { provider: gate })
      t.equal((await again.runCycle()).claimed, 0, 'stopped batches are not dialed')
      const c = (await contactsOf(base, one)).get('c203')
      t.match((await detail(base, one, c.contactId)).dialability, { reason: 'batch_not_running' })
      await startBatch(base, one)
      t.equal((await again.runCycle()).claimed, 2, 'restarted: dialed again (batch limit 2)')
      gate.releaseAll('answered')
      await again.drain()
      await cycle() // leaves nothing running behind for the next tests
      await cycle()
      await stopBatch(base, one).catch(() => undefined)
    })

    t.test('a claim held past DIALER_CLAIM_TIMEOUT_MS by a scheduler that still beats is released and dialed again', async t => {
      const gate = new GatedProvider()
      const lost = extraScheduler(service.platform, 'lost', { provider: gate })
      const batchId = await createBatch(base, { rules: { maxAttempts: 3 } })
      await load(base, batchId, contact(601, { customFields: { simulatedOutcomes: 'answered' } }))
      await startBatch(base, batchId)
      t.equal((await lost.runCycle()).claimed, 1)
      const id = (await contactsOf(base, batchId)).get('c601').contactId
      t.match(await detail(base, batchId, id), { state: 'in_progress', dialability: { reason: 'in_progress' } })
      clock.advance(59 * MIN + 45_000)
      t.equal((await lost.runCycle()).claimed, 0, 'its scheduler cycles (and beats), its attempt still in flight')
      t.equal((await cycle()).claimed, 0, 'still within the claim timeout')
      clock.advance(30_000)
      t.equal((await cycle()).claimed, 1, 'past the timeout: released and dialed by another scheduler')
      const attempts = await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts`)
      t.same(attempts.json.data.map((a: any) => a.outcome).sort(), ['answered', 'failed'])
      t.match(attempts.json.data.find((a: any) => a.outcome === 'failed'), { detail: /claim expired/ })
      // The lost scheduler's attempt ends late: counted, but it changes nothing else.
      gate.releaseAll('busy')
      await lost.drain()
      t.match(await detail(base, batchId, id), { state: 'done', lastOutcome: 'answered', attempts: 2 })
      await cycle()
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status, 'completed')
    })

    t.test('the claims of a scheduler that stopped beating (its process died) are dialed again after DIALER_SCHEDULER_DEAD_AFTER_MS, not after the claim timeout', async t => {
      // What a kill -9 of a process leaves: its contacts in flight, counted against the batch's
      // room (here all of it), and no scheduler to settle them.
      const gate = new GatedProvider()
      const dead = extraScheduler(service.platform, 'dead', { provider: gate })
      const batchId = await createBatch(base, { rules: { maxAttempts: 3, maxInFlight: 2 } })
      await load(base, batchId, { contacts: [contact(611, { customFields: { simulatedOutcomes: 'answered' } }), contact(612, { customFields: { simulatedOutcomes: 'answered' } }), contact(613, { customFields: { simulatedOutcomes: 'answered' } })] })
      await startBatch(base, batchId)
      t.equal((await dead.runCycle()).claimed, 2, 'the batch room, taken by the scheduler about to die')
      clock.advance(40_000)
      t.equal((await cycle()).claimed, 0, 'its last beat is 40 s old: alive, its claims hold the room')
      // Lost claims are looked for every 30 s (half the dead-after time).
      clock.advance(31_000)
      const report = await cycle()
      t.equal(report.claimed, 2, 'silent for 71 s (more than 60): its two claims are released and dialed again')
      await cycle()
      const attempts = await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts?limit=100`)
      const failed = attempts.json.data.filter((a: any) => a.outcome === 'failed')
      t.equal(failed.length, 2, 'its attempts are closed as failed')
      t.ok(failed.every((a: any) => /scheduler lost/.test(a.detail)), failed.map((a: any) => a.detail).join('; '))
      t.equal(attempts.json.data.filter((a: any) => a.outcome === 'answered').length, 3, 'every contact dialed and answered')
      await cycle()
      t.equal((await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status, 'completed')
      gate.releaseAll('busy')
      await dead.drain()
    })

    t.test('reschedule and cancel a contact', async t => {
      const batchId = await createBatch(base, { rules: { maxAttempts: 2 } })
      await load(base, batchId, { contacts: [contact(301), contact(302), contact(303, { customFields: { simulatedOutcomes: 'answered' } })] })
      const contacts = await contactsOf(base, batchId)
      const [c1, c2, c3] = ['c301', 'c302', 'c303'].map(id => contacts.get(id).contactId)
      const path = (id: string, action: string) => `/dialer/v1/batches/${batchId}/contacts/${id}/${action}`
      const now = clock.now()

      const past = await call(base, 'POST', path(c1, 'reschedule'), { body: { scheduledAt: new Date(now - MIN).toISOString() } })
      t.match(past, { status: 400, json: { code: 'VALIDATION_FAILED', details: [{ field: 'scheduledAt', code: 'SCHEDULED_AT_IN_PAST' }] } })
      const far = await call(base, 'POST', path(c1, 'reschedule'), { body: { scheduledAt: new Date(now + 31 * 24 * 60 * MIN).toISOString() } })
      t.match(far.json.details, [{ code: 'SCHEDULED_AT_TOO_FAR' }])
      const local = await call(base, 'POST', path(c1, 'reschedule'), { body: { scheduledAt: '2026-03-10T10:00:00+01:00' } })
      t.match(local.json.details, [{ field: 'scheduledAt', code: 'INVALID_SCHEDULED_AT' }], 'UTC only')
      t.equal((await call(base, 'POST', path('nope', 'reschedule'), { body: { scheduledAt: new Date(now + MIN).toISOString() } })).status, 404)

      const at = new Date(now + 60 * MIN).toISOString()
      const rescheduled = await call(base, 'POST', path(c1, 'reschedule'), { body: { scheduledAt: at }, headers: { 'Idempotency-Key': `r-${store}` } })
      t.equal(rescheduled.status, 200)
      t.match(rescheduled.json, { contactId: c1, state: 'pending', scheduledAt: at, nextAttemptAt: at })
      const replay = await call(base, 'POST', path(c1, 'reschedule'), { body: { scheduledAt: at }, headers: { 'Idempotency-Key': `r-${store}` } })
      t.equal(replay.headers.get('idempotency-replayed'), 'true')
      t.same(replay.json, rescheduled.json)

      const cancelled = await call(base, 'POST', path(c2, 'cancel'))
      t.match(cancelled, { status: 200, json: { state: 'cancelled', dialability: { dialable: false, reason: 'cancelled' } } })
      t.equal((await call(base, 'POST', path(c2, 'cancel'))).status, 200, 'cancelling twice is fine')

      await startBatch(base, batchId)
      t.match((await detail(base, batchId, c1)).dialability, { reason: 'scheduled_later', nextEligibleAt: at })
      const report = await cycle()
      t.equal(report.claimed, 1, 'only c303: c301 is scheduled later, c302 cancelled')
      t.match(await detail(base, batchId, c3), { state: 'done', lastOutcome: 'answered' })
      const done = await call(base, 'POST', path(c3, 'cancel'))
      t.match(done, { status: 409, json: { code: 'CONTACT_DONE', state: 'done' } })

      clock.advance(60 * MIN)
      t.equal((await cycle()).claimed, 1, 'c301 at its new time')
      const progress = (await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.progress
      t.equal(progress.cancelled, 1)

      // A cancelled contact can be put back with a reschedule.
      const back = await call(base, 'POST', path(c2, 'reschedule'), { body: { scheduledAt: new Date(clock.now() + MIN).toISOString() } })
      t.match(back.json, { state: 'pending' })
      clock.advance(MIN)
      await cycle()
      t.match(await detail(base, batchId, c2), { attempts: 1 })
      await cycle()
      await cycle()
      clock.advance(24 * 60 * MIN)
      await cycle()
      await cycle()
      const status = (await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json.status
      if (status === 'running') await stopBatch(base, batchId)
    })

    t.test('order: contactPriority (lower first, unset last) then nextAttemptAt, or the other way round', async t => {
      for (const priorityOrder of ['contactPriority', 'scheduledAt'] as const) {
        const batchId = await createBatch(base, { rules: { maxInFlight: 1, priorityOrder } })
        const pinned = { customFields: { simulatedOutcomes: 'answered' } }
        await load(base, batchId, {
          contacts: [
            contact(501, pinned),
            contact(502, { ...pinned, contactPriority: 5 }),
            contact(503, { ...pinned, contactPriority: 1 }),
            contact(504, { ...pinned, contactPriority: 5, scheduledAt: new Date(clock.now() + MIN).toISOString() }),
          ],
        })
        clock.advance(2 * MIN)
        await startBatch(base, batchId)
        for (let i = 0; i < 4; i++) {
          clock.advance(1000) // distinct startedAt: the attempts list is ordered by it
          t.equal((await cycle()).claimed, 1, 'one at a time (maxInFlight 1)')
        }
        const attempts = await call(base, 'GET', `/dialer/v1/batches/${batchId}/attempts`)
        const order = attempts.json.data.map((a: any) => a.identifier).reverse()
        t.same(order, priorityOrder === 'contactPriority' ? ['c503', 'c502', 'c504', 'c501'] : ['c503', 'c502', 'c501', 'c504'], priorityOrder)
        await cycle()
      }
    })

    t.test('rules are validated at batch creation', async t => {
      const bad = await call(base, 'POST', '/dialer/v1/batches', {
        body: { name: 'x', channel: 'phone', duplicateStrategy: 'merge', rules: { retryDelayMinutes: { busy: 5, engaged: 3 }, finalOutcomes: ['maybe'], maxInFlight: 0 } },
      })
      t.equal(bad.status, 400)
      t.same(bad.json.details.map((d: any) => d.field).sort(), ['rules.finalOutcomes[0]', 'rules.maxInFlight', 'rules.retryDelayMinutes'].sort())
    })

    t.test('another account sees none of it', async t => {
      const batchId = await createBatch(base)
      await load(base, batchId, contact(400))
      const id = (await contactsOf(base, batchId)).get('c400').contactId
      for (const [method, path] of [
        ['GET', `/dialer/v1/batches/${batchId}/attempts`],
        ['GET', `/dialer/v1/batches/${batchId}/contacts/${id}`],
        ['POST', `/dialer/v1/batches/${batchId}/contacts/${id}/cancel`],
      ] as const) {
        t.equal((await call(base, method, path, { key: KEYS.globex })).status, 404, `${method} ${path}`)
      }
    })
  })
}

t.test('worker processes run cycles on a timer (DIALER_CYCLE_MS) with the system clock', async t => {
  const { base } = await startTestService(t, { env: { DIALER_CYCLE_MS: '20', DIALER_SIM_LATENCY_MS: '5', DIALER_SIM_OUTCOMES: 'answered=1' } })
  const batchId = await createBatch(base)
  await load(base, batchId, { contacts: Array.from({ length: 20 }, (_, i) => contact(700 + i)) })
  await startBatch(base, batchId)
  const deadline = Date.now() + 15_000
  let batch: any
  while (Date.now() < deadline) {
    batch = (await call(base, 'GET', `/dialer/v1/batches/${batchId}`)).json
    if (batch.status === 'completed') break
    await new Promise(r => setTimeout(r, 25))
  }
  t.match(batch, { status: 'completed', progress: { done: 20, pending: 0, inProgress: 0, byOutcome: { answered: 20 } } })
})
