// Parsing and validating the body of POST /batches/{id}/contacts (spec 2.1, 4.1, 7). Format
// rules run before anything is queued; one invalid contact rejects the whole request and the
// 400 lists every problem found.
import { Invalid } from '../platform/errors.js'
import { schemas, type ValidationIssue } from '../schemas/index.js'
import type { AddressDoc } from './collections.js'

export const MAX_CONTACTS_PER_REQUEST = 1000
const SCHEDULE_HORIZON_MS = 30 * 24 * 60 * 60 * 1000

export interface ContactInput {
  identifier?: string
  name: string
  addresses: AddressDoc[]
  scheduledAt?: string
  contactPriority?: number
  customFields?: Record<string, unknown>
  onDuplicate?: 'recontact'
  resetAttempts?: boolean
}

export interface ContactDetail extends ValidationIssue {
  index: number | null
  error: string
}

const indexOf = (field: string): number | null => {
  const m = /^contacts\[(\d+)\]/.exec(field)
  return m ? Number(m[1]) : null
}

export function toDetails(issues: ValidationIssue[]): ContactDetail[] {
  return issues.map(issue => ({ index: indexOf(issue.field), ...issue, error: issue.reason }))
}

/**
 * scheduledAt: future, UTC, within 30 days (format is checked by the schema). Runs on bodies
 * the schema may have refused, so an item can be anything JSON holds (null included): such an
 * item has its schema issue already and is skipped here.
 */
function scheduleIssues(contacts: unknown[], now: number): ValidationIssue[] {
  const issues: ValidationIssue[] = []
  contacts.forEach((item, i) => {
    if (item === null || typeof item !== 'object') return
    const contact = item as { scheduledAt?: unknown }
    if (typeof contact.scheduledAt !== 'string') return
    const at = Date.parse(contact.scheduledAt)
    if (Number.isNaN(at)) return
    const field = `contacts[${i}].scheduledAt`
    const expected = 'a UTC date-time in the future and within 30 days'
    if (at <= now) {
      issues.push({ field, code: 'SCHEDULED_AT_IN_PAST', reason: `${field} must be in the future`, meta: { received: contact.scheduledAt, expected } })
    } else if (at > now + SCHEDULE_HORIZON_MS) {
      issues.push({ field, code: 'SCHEDULED_AT_TOO_FAR', reason: `${field} must be within the next 30 days`, meta: { received: contact.scheduledAt, expected } })
    }
  })
  return issues
}

/**
 * The problems an error carries: as many as an error body keeps of a list (gateway/errors.ts).
 * A body can hold hundreds of thousands; the validation thread hands its error to the loop by
 * copy, and the loop would spend seconds reading them back only to cut them.
 */
const MAX_DETAILS = 1000

function validationFailed(issues: ValidationIssue[]): Invalid {
  const contactsAffected = new Set(issues.map(issue => indexOf(issue.field)).filter(i => i !== null)).size
  return new Invalid(
    'VALIDATION_FAILED',
    `Validation failed: ${issues.length} problem(s) in ${contactsAffected} contact(s); nothing was queued`,
    { details: toDetails(issues.slice(0, MAX_DETAILS)) },
  )
}

/**
 * A contact at the root of more keys and elements than this is refused at its first problem: one
 * contact holds a few hundred values at most, and listing each of a 5 MB object's keys took
 * seconds on a busy machine (a load's rows, each its own problems, are still listed in full).
 */
const ONE_CONTACT_EVERY_PROBLEM_UP_TO = 2000

/**
 * Accepts a single contact at the root or `{contacts: [...]}` (1..1000). Field paths always
 * use the `contacts[i]` form, so a single root contact is `contacts[0]`.
 */
export function parseContactsBody(body: unknown, now: number): ContactInput[] {
  if (body === undefined || body === null || (typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length === 0)) {
    throw new Invalid('NO_CONTACTS', 'The request contains no contact: send one contact object or { "contacts": [ ... ] } with 1 to 1000 contacts', { details: [] })
  }
  if (typeof body !== 'object' || Array.isArray(body)) {
    throw new Invalid('INVALID_BODY', 'The body must be a contact object or { "contacts": [ ... ] }', { details: [] })
  }
  const multi = 'contacts' in body
  if (multi) {
    const list = (body as { contacts: unknown }).contacts
    if (Array.isArray(list) && list.length === 0) {
      throw new Invalid('NO_CONTACTS', 'contacts is empty: send 1 to 1000 contacts', { details: [] })
    }
    if (Array.isArray(list) && list.length > MAX_CONTACTS_PER_REQUEST) {
      throw new Invalid('TOO_MANY_CONTACTS', `Received ${list.length} contacts; at most ${MAX_CONTACTS_PER_REQUEST} are accepted per request`, {
        details: [`received ${list.length} contacts, the maximum per request is ${MAX_CONTACTS_PER_REQUEST}`],
      })
    }
  }
  const issues = multi ? schemas.validate('dialer.contacts.insert', body) : schemas.validate('dialer.contact', body, 'contacts[0]', { everyProblemUpTo: ONE_CONTACT_EVERY_PROBLEM_UP_TO })
  const contacts: unknown = multi ? (body as { contacts: unknown }).contacts : [body]
  if (Array.isArray(contacts)) {
    // Time rules only for values whose format is already valid.
    const flagged = new Set(issues.map(i => i.field))
    issues.push(...scheduleIssues(contacts, now).filter(i => !flagged.has(i.field)))
  }
  if (issues.length > 0) throw validationFailed(issues)
  return contacts as ContactInput[]
}

/** The contacts of a body parseContactsBody has already accepted (a single root contact is one). */
export function contactsOf(body: unknown): ContactInput[] {
  return body !== null && typeof body === 'object' && 'contacts' in body ? (body as { contacts: ContactInput[] }).contacts : [body as ContactInput]
}

/** Per-row validation for CSV imports: returns the problems of one contact. */
export function contactIssues(contact: unknown, now: number): ValidationIssue[] {
  const issues = schemas.validate('dialer.contact', contact, 'contacts[0]')
  if (issues.length === 0) issues.push(...scheduleIssues([contact], now))
  return issues
}
