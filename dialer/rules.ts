// Dialing rules (a batch's `rules`), as pure functions of (rules, contact, now): no I/O, so the
// scheduler, the "why is this contact not being dialed" answer and the tests agree on one
// reading. Calling windows and blocked dates are evaluated in the contact's own time zone
// (customFields.timeZone when it is a valid IANA name, else rules.timeZone, else UTC) with
// luxon, so a window of 09:00-21:00 is 09:00-21:00 on the wall clock on both sides of a
// daylight-saving change.
import { DateTime, IANAZone } from 'luxon'
import type { AddressDoc, ContactDoc } from './collections.js'
import { OUTCOMES } from '../schemas/dialer.js'

export { OUTCOMES }
export type Outcome = (typeof OUTCOMES)[number]

export const WEEKDAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const
export type Weekday = (typeof WEEKDAYS)[number]

export interface CallingWindow {
  days: Weekday[]
  /** HH:MM local time, inclusive. */
  start: string
  /** HH:MM local time, exclusive; at or before `start` the window runs past midnight. */
  end: string
}

export interface BatchRules {
  maxAttempts?: number
  maxAttemptsPerAddress?: number
  retryDelayMinutes?: Partial<Record<Outcome, number>>
  finalOutcomes?: Outcome[]
  callingWindows?: CallingWindow[]
  timeZone?: string
  /** YYYY-MM-DD, in the contact's time zone. */
  blockedDates?: string[]
  priorityOrder?: 'contactPriority' | 'scheduledAt'
  /** Attempts of this batch in flight at once (pacing); the account limit applies as well. */
  maxInFlight?: number
  /** Attempts of this batch started in any 60 s (sliding window); the account limit applies as well. */
  maxAttemptsPerMinute?: number
}

/** Whether a batch selects its due contacts by due time first (else by priority first). */
export const selectsByDueTime = (rules: Record<string, unknown> | undefined): boolean =>
  (rules as BatchRules | undefined)?.priorityOrder === 'scheduledAt'

export const DEFAULT_MAX_ATTEMPTS = 3
export const DEFAULT_FINAL_OUTCOMES: readonly Outcome[] = ['answered', 'delivered']
export const DEFAULT_RETRY_DELAY_MINUTES: Record<Outcome, number> = {
  answered: 0,
  delivered: 0,
  voicemail: 120,
  no_answer: 60,
  busy: 10,
  failed: 30,
}

export type NotDialableReason =
  | 'batch_not_running'
  | 'cancelled'
  | 'completed'
  | 'in_progress'
  | 'attempts_exhausted'
  | 'blocked'
  | 'scheduled_later'
  | 'blocked_date'
  | 'outside_window'

export type Dialability =
  | { dialable: true; reason: null; nextEligibleAt: number; address: AddressDoc }
  | { dialable: false; reason: NotDialableReason; nextEligibleAt: number | null; address: AddressDoc | null }

/** The contact fields the rules read. */
export type RuleContact = Pick<ContactDoc, 'addresses' | 'attempts' | 'addressAttempts' | 'nextAttemptAt' | 'customFields' | 'state'> & {
  doneReason?: string | null
}

// ---------------------------------------------------------------------------------------------
// Addresses

/**
 * The key of an address in `addressAttempts`. Store field names may not contain "." or start
 * with "$" (an e-mail address would become a nested path), so those are percent-encoded.
 */
export function addressKey(address: string): string {
  return address.replace(/%/g, '%25').replace(/\./g, '%2E').replace(/^\$/, '%24')
}

/** The account blocked list as the rules see it: `type|address`, addresses normalized. */
export const blockKey = (type: string, address: string) => `${type}|${type === 'email' ? address.trim().toLowerCase() : address.trim()}`

export const maxAttemptsOf = (rules: BatchRules) => rules.maxAttempts ?? DEFAULT_MAX_ATTEMPTS
export const maxPerAddressOf = (rules: BatchRules) => rules.maxAttemptsPerAddress ?? maxAttemptsOf(rules)

/** Addresses by priority (then list order), the ones still under their per-address cap. */
function usableAddresses(rules: BatchRules, contact: Pick<RuleContact, 'addresses' | 'addressAttempts'>): AddressDoc[] {
  const cap = maxPerAddressOf(rules)
  return contact.addresses
    .map((a, i) => ({ a, i }))
    .sort((x, y) => x.a.priority - y.a.priority || x.i - y.i)
    .map(x => x.a)
    .filter(a => (contact.addressAttempts?.[addressKey(a.address)] ?? 0) < cap)
}

/**
 * The address to use for the next attempt: the first by priority that has not reached
 * maxAttemptsPerAddress and is not blocked. `exhausted` when every address reached its cap,
 * `blocked` when the only ones left are blocked.
 */
export function nextAddress(
  rules: BatchRules,
  contact: Pick<RuleContact, 'addresses' | 'addressAttempts'>,
  blocked: ReadonlySet<string> = new Set(),
): { address: AddressDoc } | { address: null; why: 'attempts_exhausted' | 'blocked' } {
  const usable = usableAddresses(rules, contact)
  if (usable.length === 0) return { address: null, why: 'attempts_exhausted' }
  const open = usable.find(a => !blocked.has(blockKey(a.type, a.address)))
  return open ? { address: open } : { address: null, why: 'blocked' }
}

// ---------------------------------------------------------------------------------------------
// Time zones, windows and blocked dates

/** customFields.timeZone when a valid IANA name, else rules.timeZone when valid, else UTC. */
export function contactTimeZone(rules: BatchRules, contact: Pick<RuleContact, 'customFields'>): string {
  const own = contact.customFields?.timeZone
  if (typeof own === 'string' && IANAZone.isValidZone(own)) return own
  if (rules.timeZone && IANAZone.isValidZone(rules.timeZone)) return rules.timeZone
  return 'UTC'
}

const minutesOf = (hhmm: string) => {
  const [h, m] = hhmm.split(':').map(Number)
  return h! * 60 + m!
}

/**
 * A local wall-clock time on a local date. A time that does not exist (inside a spring-forward
 * gap) is the instant the clocks jump: a window from 02:30 opens at 03:00 on that day.
 */
function at(day: DateTime, minutes: number): DateTime {
  const t = day.set({ hour: Math.floor(minutes / 60), minute: minutes % 60, second: 0, millisecond: 0 })
  if (t.hour * 60 + t.minute === minutes) return t
  // luxon moved it forward by the gap; the transition lies within the gap before it.
  const zone = t.zone
  const after = t.offset
  let lo = t.toMillis() - 24 * 60 * 60_000
  let hi = t.toMillis()
  while (hi - lo > 60_000) {
    const mid = lo + Math.floor((hi - lo) / 120_000) * 60_000
    if (zone.offset(mid) === after) hi = mid
    else lo = mid
  }
  return DateTime.fromMillis(hi, { zone })
}

const isBlockedDate = (rules: BatchRules, t: DateTime) => (rules.blockedDates?.length ? rules.blockedDates.includes(t.toISODate()!) : false)

/** How far ahead the window search looks (a year of blocked dates plus a week). */
const SEARCH_DAYS = 380

/**
 * The earliest instant at or after `from` (ms) at which the rules allow a call in `zone`: inside
 * a calling window (none configured = any time) and not on a blocked date. null when there is
 * none within a year (every window day blocked, or no window days at all).
 */
export function nextAllowedTime(rules: BatchRules, zone: string, from: number): number | null {
  const windows = rules.callingWindows ?? []
  const origin = DateTime.fromMillis(from, { zone })
  if (windows.length === 0) {
    let t = origin
    for (let i = 0; i < SEARCH_DAYS && isBlockedDate(rules, t); i++) t = t.startOf('day').plus({ days: 1 })
    return isBlockedDate(rules, t) ? null : t.toMillis()
  }
  let best: number | null = null
  // Start a day early: yesterday's window may run past midnight into today.
  for (let i = -1; i < SEARCH_DAYS; i++) {
    const day = origin.startOf('day').plus({ days: i })
    const weekday = WEEKDAYS[day.weekday - 1]!
    for (const w of windows) {
      if (!w.days.includes(weekday)) continue
      const startMin = minutesOf(w.start)
      const endMin = minutesOf(w.end)
      const start = at(day, startMin)
      const end = endMin > startMin ? at(day, endMin) : at(day.plus({ days: 1 }), endMin)
      if (end.toMillis() <= from) continue
      let candidate = start.toMillis() > from ? start : origin
      // Skip blocked local dates inside the window (a window past midnight spans two dates).
      while (candidate.toMillis() < end.toMillis() && isBlockedDate(rules, candidate)) candidate = candidate.startOf('day').plus({ days: 1 })
      if (candidate.toMillis() >= end.toMillis()) continue
      if (best === null || candidate.toMillis() < best) best = candidate.toMillis()
    }
    // Later days' windows start after this day ends: nothing earlier can follow.
    if (best !== null && best < day.plus({ days: 1 }).toMillis()) return best
  }
  return best
}

// ---------------------------------------------------------------------------------------------
// May this contact be dialed now?

export interface DialabilityInput {
  rules: BatchRules
  batchStatus: string
  contact: RuleContact
  now: number
  /** blockKey()s of the account's blocked addresses among the contact's. */
  blocked?: ReadonlySet<string>
}

/**
 * Whether the contact may be dialed at `now`, with which address, and if not, why and when it
 * next may be (null: not without a change such as a restart, an unblock or a recontact).
 */
export function dialability({ rules, batchStatus, contact, now, blocked = new Set() }: DialabilityInput): Dialability {
  const no = (reason: NotDialableReason, nextEligibleAt: number | null = null, address: AddressDoc | null = null): Dialability => ({
    dialable: false,
    reason,
    nextEligibleAt,
    address,
  })
  if (contact.state === 'cancelled') return no('cancelled')
  if (contact.state === 'done') {
    const why = contact.doneReason
    return no(why === 'attempts_exhausted' || why === 'blocked' ? why : 'completed')
  }
  if (contact.attempts >= maxAttemptsOf(rules)) return no('attempts_exhausted')
  const pick = nextAddress(rules, contact, blocked)
  if (!pick.address) return no(pick.why)
  const address = pick.address
  if (contact.state === 'in_progress') return no('in_progress', null, address)

  const zone = contactTimeZone(rules, contact)
  const due = Math.max(now, new Date(contact.nextAttemptAt).getTime())
  const allowed = nextAllowedTime(rules, zone, due)
  if (batchStatus !== 'running') return no('batch_not_running', null, address)
  if (allowed === null) {
    return no(isBlockedDate(rules, DateTime.fromMillis(due, { zone })) ? 'blocked_date' : 'outside_window', null, address)
  }
  if (due > now) return no('scheduled_later', allowed, address)
  if (allowed > now) return no(isBlockedDate(rules, DateTime.fromMillis(now, { zone })) ? 'blocked_date' : 'outside_window', allowed, address)
  return { dialable: true, reason: null, nextEligibleAt: now, address }
}

// ---------------------------------------------------------------------------------------------
// After an attempt

export const isFinal = (rules: BatchRules, outcome: Outcome) => (rules.finalOutcomes ?? DEFAULT_FINAL_OUTCOMES).includes(outcome)

export const retryDelayMs = (rules: BatchRules, outcome: Outcome) =>
  (rules.retryDelayMinutes?.[outcome] ?? DEFAULT_RETRY_DELAY_MINUTES[outcome]) * 60_000

export type AfterOutcome =
  | { state: 'done'; doneReason: 'final_outcome' | 'attempts_exhausted'; nextAttemptAt: null }
  | { state: 'pending'; doneReason: null; nextAttemptAt: number }

/**
 * What becomes of the contact once an attempt on `address` ended with `outcome` at `endedAt`:
 * done (final outcome, or no attempts left on the contact or on any address), or pending again
 * at the retry time, moved to the next allowed instant (window, blocked dates).
 */
export function afterOutcome(
  rules: BatchRules,
  contact: Pick<RuleContact, 'addresses' | 'attempts' | 'addressAttempts' | 'customFields'>,
  address: string,
  outcome: Outcome,
  endedAt: number,
): AfterOutcome {
  if (isFinal(rules, outcome)) return { state: 'done', doneReason: 'final_outcome', nextAttemptAt: null }
  const attempts = contact.attempts + 1
  const key = addressKey(address)
  const addressAttempts = { ...contact.addressAttempts, [key]: (contact.addressAttempts?.[key] ?? 0) + 1 }
  if (attempts >= maxAttemptsOf(rules) || usableAddresses(rules, { addresses: contact.addresses, addressAttempts }).length === 0) {
    return { state: 'done', doneReason: 'attempts_exhausted', nextAttemptAt: null }
  }
  const retryAt = endedAt + retryDelayMs(rules, outcome)
  const allowed = nextAllowedTime(rules, contactTimeZone(rules, contact), retryAt)
  // No allowed time within a year: keep the retry time; dialability explains it.
  return { state: 'pending', doneReason: null, nextAttemptAt: allowed ?? retryAt }
}
