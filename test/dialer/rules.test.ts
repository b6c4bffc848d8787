// Dialing rules as pure functions: windows in the contact's time zone (across daylight-saving
// changes), blocked dates, address order and caps, retry delays and final outcomes, and the
// "why is this contact not being dialed" answer.
import t from 'tap'
import {
  addressKey,
  afterOutcome,
  blockKey,
  type BatchRules,
  contactTimeZone,
  dialability,
  nextAddress,
  nextAllowedTime,
  type RuleContact,
} from '../../dialer/rules.js'

const ms = (iso: string) => Date.parse(iso)
const iso = (n: number | null) => (n === null ? null : new Date(n).toISOString())
const everyDay = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const
const window = (start: string, end: string, days: readonly string[] = everyDay) => ({ days: [...days], start, end }) as NonNullable<BatchRules['callingWindows']>[number]

function contact(extra: Partial<RuleContact> = {}): RuleContact {
  return {
    addresses: [
      { address: '34600000001', type: 'phone', priority: 1 },
      { address: '34600000002', type: 'phone', priority: 2 },
    ],
    attempts: 0,
    addressAttempts: {},
    nextAttemptAt: new Date(0),
    customFields: {},
    state: 'pending',
    ...extra,
  }
}

t.test('time zone: the contact\'s own when valid, else the batch default, else UTC', async t => {
  t.equal(contactTimeZone({ timeZone: 'Europe/Madrid' }, { customFields: { timeZone: 'America/New_York' } }), 'America/New_York')
  t.equal(contactTimeZone({ timeZone: 'Europe/Madrid' }, { customFields: { timeZone: 'Mars/Olympus' } }), 'Europe/Madrid')
  t.equal(contactTimeZone({ timeZone: 'Nowhere/Else' }, { customFields: {} }), 'UTC')
  t.equal(contactTimeZone({}, { customFields: { timeZone: 42 } }), 'UTC')
})

t.test('no windows, no blocked dates: any time', async t => {
  t.equal(iso(nextAllowedTime({}, 'UTC', ms('2026-03-02T03:00:00Z'))), '2026-03-02T03:00:00.000Z')
})

t.test('windows across daylight-saving changes stay on the local wall clock', async t => {
  const rules: BatchRules = { callingWindows: [window('09:00', '10:00')] }
  // Europe/Madrid springs forward on Sunday 2026-03-29 (02:00 CET -> 03:00 CEST).
  t.equal(iso(nextAllowedTime(rules, 'Europe/Madrid', ms('2026-03-28T07:59:00Z'))), '2026-03-28T08:00:00.000Z', 'Saturday 09:00 CET = 08:00Z')
  t.equal(iso(nextAllowedTime(rules, 'Europe/Madrid', ms('2026-03-28T09:30:00Z'))), '2026-03-29T07:00:00.000Z', 'Sunday 09:00 CEST = 07:00Z')
  t.equal(iso(nextAllowedTime(rules, 'Europe/Madrid', ms('2026-03-29T07:30:00Z'))), '2026-03-29T07:30:00.000Z', 'inside the window: now')
  t.equal(iso(nextAllowedTime(rules, 'Europe/Madrid', ms('2026-03-29T08:00:00Z'))), '2026-03-30T07:00:00.000Z', '10:00 CEST is the (exclusive) end')
  // Falls back on Sunday 2026-10-25 (03:00 CEST -> 02:00 CET).
  t.equal(iso(nextAllowedTime(rules, 'Europe/Madrid', ms('2026-10-24T08:30:00Z'))), '2026-10-25T08:00:00.000Z', 'Sunday 09:00 CET = 08:00Z')
  t.equal(iso(nextAllowedTime(rules, 'Europe/Madrid', ms('2026-10-25T07:30:00Z'))), '2026-10-25T08:00:00.000Z', '08:30 CET is before the window')
  // America/New_York springs forward on Sunday 2026-03-08 (02:00 EST -> 03:00 EDT).
  const ny: BatchRules = { callingWindows: [window('09:00', '17:00')] }
  t.equal(iso(nextAllowedTime(ny, 'America/New_York', ms('2026-03-07T13:00:00Z'))), '2026-03-07T14:00:00.000Z', 'Saturday 09:00 EST = 14:00Z')
  t.equal(iso(nextAllowedTime(ny, 'America/New_York', ms('2026-03-07T23:00:00Z'))), '2026-03-08T13:00:00.000Z', 'Sunday 09:00 EDT = 13:00Z')
  t.equal(iso(nextAllowedTime(ny, 'America/New_York', ms('2026-03-08T21:00:00Z'))), '2026-03-09T13:00:00.000Z', '17:00 EDT = 21:00Z is the end')
})

t.test('a window starting inside the spring-forward gap opens when the clocks jump', async t => {
  const rules: BatchRules = { callingWindows: [window('02:30', '04:00', ['sun'])] }
  // 02:30 does not exist in Madrid on 2026-03-29; the window opens at 03:00 CEST (01:00Z).
  t.equal(iso(nextAllowedTime(rules, 'Europe/Madrid', ms('2026-03-29T00:30:00Z'))), '2026-03-29T01:00:00.000Z')
  t.equal(iso(nextAllowedTime(rules, 'Europe/Madrid', ms('2026-03-29T02:00:00Z'))), '2026-04-05T00:30:00.000Z', '04:00 CEST closes it; next Sunday 02:30 CEST')
})

t.test('weekdays, several windows and windows past midnight', async t => {
  const rules: BatchRules = {
    callingWindows: [window('09:00', '13:00', ['mon', 'tue', 'wed', 'thu', 'fri']), window('16:00', '19:00', ['mon', 'tue', 'wed', 'thu', 'fri']), window('22:00', '02:00', ['fri'])],
  }
  // 2026-03-06 is a Friday.
  t.equal(iso(nextAllowedTime(rules, 'UTC', ms('2026-03-06T13:30:00Z'))), '2026-03-06T16:00:00.000Z', 'between two windows')
  t.equal(iso(nextAllowedTime(rules, 'UTC', ms('2026-03-06T20:00:00Z'))), '2026-03-06T22:00:00.000Z')
  t.equal(iso(nextAllowedTime(rules, 'UTC', ms('2026-03-07T01:00:00Z'))), '2026-03-07T01:00:00.000Z', 'Saturday 01:00 is inside Friday\'s window')
  t.equal(iso(nextAllowedTime(rules, 'UTC', ms('2026-03-07T02:00:00Z'))), '2026-03-09T09:00:00.000Z', 'then Monday')
})

t.test('blocked dates are dates in the contact\'s zone', async t => {
  const rules: BatchRules = { timeZone: 'Europe/Madrid', callingWindows: [window('09:00', '17:00')], blockedDates: ['2026-03-03'] }
  t.equal(iso(nextAllowedTime(rules, 'Europe/Madrid', ms('2026-03-03T09:30:00Z'))), '2026-03-04T08:00:00.000Z')
  // No windows: 2026-03-02T20:00Z is already 2026-03-03 in Auckland (UTC+13).
  const holidays: BatchRules = { blockedDates: ['2026-03-03'] }
  t.equal(iso(nextAllowedTime(holidays, 'Pacific/Auckland', ms('2026-03-02T20:00:00Z'))), '2026-03-03T11:00:00.000Z', 'midnight after the holiday, local')
  t.equal(iso(nextAllowedTime(holidays, 'UTC', ms('2026-03-02T20:00:00Z'))), '2026-03-02T20:00:00.000Z', 'still the 2nd in UTC')
  const d = dialability({ rules, batchStatus: 'running', contact: contact(), now: ms('2026-03-03T09:30:00Z') })
  t.match(d, { dialable: false, reason: 'blocked_date', nextEligibleAt: ms('2026-03-04T08:00:00Z') })
  t.equal(nextAllowedTime({ callingWindows: [window('09:00', '10:00', ['mon'])], blockedDates: [] }, 'UTC', 0) !== null, true)
})

t.test('address order: priority, skipping capped and blocked addresses', async t => {
  const c = contact({
    addresses: [
      { address: 'ana@example.com', type: 'email', priority: 3 },
      { address: '34600000002', type: 'phone', priority: 2 },
      { address: '34600000001', type: 'phone', priority: 1 },
    ],
  })
  const rules: BatchRules = { maxAttempts: 10, maxAttemptsPerAddress: 2 }
  t.equal(nextAddress(rules, c).address?.address, '34600000001')
  t.equal(nextAddress(rules, { ...c, addressAttempts: { '34600000001': 2 } }).address?.address, '34600000002', 'first reached its cap')
  t.equal(nextAddress(rules, c, new Set([blockKey('phone', '34600000001')])).address?.address, '34600000002', 'first blocked')
  const allPhonesUsed = { ...c, addressAttempts: { '34600000001': 2, '34600000002': 2 } }
  t.equal(nextAddress(rules, allPhonesUsed).address?.address, 'ana@example.com')
  t.same(nextAddress(rules, allPhonesUsed, new Set([blockKey('email', 'Ana@Example.com')])), { address: null, why: 'blocked' })
  t.same(nextAddress(rules, { ...allPhonesUsed, addressAttempts: { ...allPhonesUsed.addressAttempts, [addressKey('ana@example.com')]: 2 } }), { address: null, why: 'attempts_exhausted' })
  t.equal(addressKey('ana@example.com'), 'ana@example%2Ecom', 'no dots in stored keys')
})

t.test('retry delay per outcome; final outcomes; attempts exhausted', async t => {
  const endedAt = ms('2026-03-02T10:00:00Z')
  const c = contact()
  t.same(afterOutcome({}, c, '34600000001', 'answered', endedAt), { state: 'done', doneReason: 'final_outcome', nextAttemptAt: null })
  t.same(afterOutcome({}, c, '34600000001', 'delivered', endedAt), { state: 'done', doneReason: 'final_outcome', nextAttemptAt: null })
  t.equal(iso(afterOutcome({}, c, '34600000001', 'busy', endedAt).nextAttemptAt), '2026-03-02T10:10:00.000Z', 'default busy: 10 min')
  const rules: BatchRules = { maxAttempts: 3, retryDelayMinutes: { busy: 5, no_answer: 90, failed: 1, voicemail: 240 } }
  t.equal(iso(afterOutcome(rules, c, '34600000001', 'busy', endedAt).nextAttemptAt), '2026-03-02T10:05:00.000Z')
  t.equal(iso(afterOutcome(rules, c, '34600000001', 'no_answer', endedAt).nextAttemptAt), '2026-03-02T11:30:00.000Z')
  t.equal(iso(afterOutcome(rules, c, '34600000001', 'voicemail', endedAt).nextAttemptAt), '2026-03-02T14:00:00.000Z')
  t.match(afterOutcome(rules, { ...c, attempts: 2 }, '34600000001', 'failed', endedAt), { state: 'done', doneReason: 'attempts_exhausted' })
  // Per-address caps: the last usable address exhausted ends the contact.
  const perAddress: BatchRules = { maxAttempts: 10, maxAttemptsPerAddress: 1 }
  t.match(afterOutcome(perAddress, c, '34600000001', 'busy', endedAt), { state: 'pending' })
  t.match(afterOutcome(perAddress, { ...c, addressAttempts: { '34600000001': 1 } }, '34600000002', 'busy', endedAt), { state: 'done', doneReason: 'attempts_exhausted' })
  // Voicemail final, answered then retryable (finalOutcomes replaces the default list).
  const custom: BatchRules = { finalOutcomes: ['voicemail'] }
  t.match(afterOutcome(custom, c, '34600000001', 'voicemail', endedAt), { state: 'done', doneReason: 'final_outcome' })
  t.match(afterOutcome(custom, c, '34600000001', 'answered', endedAt), { state: 'pending' })
  // The retry time is moved into the next window, in the contact's zone.
  const windowed: BatchRules = { retryDelayMinutes: { busy: 10 }, timeZone: 'Europe/Madrid', callingWindows: [window('09:00', '17:00')] }
  const late = afterOutcome(windowed, c, '34600000001', 'busy', ms('2026-03-02T15:55:00Z')) // 16:55 CET
  t.equal(iso(late.nextAttemptAt), '2026-03-03T08:00:00.000Z')
})

t.test('why a contact is (not) dialable now', async t => {
  const now = ms('2026-03-02T09:30:00Z') // Monday
  const rules: BatchRules = { timeZone: 'Europe/Madrid', callingWindows: [window('09:00', '17:00')], maxAttempts: 3 }
  const ok = dialability({ rules, batchStatus: 'running', contact: contact(), now })
  t.match(ok, { dialable: true, reason: null, nextEligibleAt: now, address: { address: '34600000001' } })
  t.match(dialability({ rules, batchStatus: 'stopped', contact: contact(), now }), { dialable: false, reason: 'batch_not_running', nextEligibleAt: null })
  t.match(dialability({ rules, batchStatus: 'running', contact: contact({ attempts: 3 }), now }), { reason: 'attempts_exhausted', nextEligibleAt: null })
  t.match(dialability({ rules, batchStatus: 'running', contact: contact({ state: 'cancelled' }), now }), { reason: 'cancelled' })
  t.match(dialability({ rules, batchStatus: 'running', contact: contact({ state: 'done', doneReason: 'final_outcome' }), now }), { reason: 'completed' })
  t.match(dialability({ rules, batchStatus: 'running', contact: contact({ state: 'done', doneReason: 'blocked' }), now }), { reason: 'blocked' })
  t.match(dialability({ rules, batchStatus: 'running', contact: contact({ state: 'in_progress' }), now }), { reason: 'in_progress' })
  const blocked = new Set([blockKey('phone', '34600000001'), blockKey('phone', '34600000002')])
  t.match(dialability({ rules, batchStatus: 'running', contact: contact(), now, blocked }), { reason: 'blocked', nextEligibleAt: null })
  // New York contact: 04:30 local, the window opens at 09:00 EST (14:00Z).
  const nyContact = contact({ customFields: { timeZone: 'America/New_York' } })
  t.match(dialability({ rules, batchStatus: 'running', contact: nyContact, now }), { reason: 'outside_window', nextEligibleAt: ms('2026-03-02T14:00:00Z') })
  // Scheduled later, and that time itself outside the window: the next allowed time after it.
  const later = contact({ nextAttemptAt: new Date('2026-03-02T18:00:00Z') })
  t.match(dialability({ rules, batchStatus: 'running', contact: later, now }), { reason: 'scheduled_later', nextEligibleAt: ms('2026-03-03T08:00:00Z') })
  // Windows that never open (no window day) leave no next time.
  t.match(dialability({ rules: { callingWindows: [] as never, blockedDates: [] }, batchStatus: 'running', contact: contact(), now }), { dialable: true })
})
