// Request bodies of the dialer API (spec 2.1, 2.4, 2.5, 4.1).
import { nonEmptyString, safeFieldName } from './common.js'

const PHONE_PATTERN = '^[0-9]{7,15}$'
const PHONE_EXPECTED = 'country code included, digits only, 7 to 15 characters, no + sign'

export const ADDRESS_TYPES = ['phone', 'email', 'whatsapp'] as const
export const DUPLICATE_STRATEGIES = ['skip', 'merge', 'replace'] as const
export const CHANNELS = ['phone', 'email', 'whatsapp'] as const
/** Attempt providers (dialer/providers/). */
export const PROVIDERS = ['simulated', 'webhook', 'assistant'] as const
/** Attempt outcomes (dialer/rules.ts). */
export const OUTCOMES = ['answered', 'delivered', 'voicemail', 'no_answer', 'busy', 'failed'] as const

const address = {
  type: 'object',
  required: ['address', 'type', 'priority'],
  additionalProperties: false,
  properties: {
    // Bounded before any format check runs on it (254: the longest e-mail address, RFC 5321).
    address: { ...nonEmptyString, maxLength: 254 },
    type: { type: 'string', enum: ADDRESS_TYPES, 'x-code': 'INVALID_ADDRESS_TYPE' },
    priority: { type: 'integer', minimum: 1, 'x-code': 'INVALID_PRIORITY', 'x-expected': 'an integer >= 1 (1 is the first)' },
  },
  allOf: [
    {
      if: { properties: { type: { enum: ['phone', 'whatsapp'] } }, required: ['type'] },
      then: {
        properties: {
          address: { type: 'string', pattern: PHONE_PATTERN, 'x-code': 'INVALID_PHONE_FORMAT', 'x-expected': PHONE_EXPECTED },
        },
      },
    },
    {
      if: { properties: { type: { const: 'email' } }, required: ['type'] },
      then: {
        properties: {
          address: { type: 'string', format: 'email', 'x-code': 'INVALID_EMAIL_FORMAT', 'x-expected': 'an e-mail address' },
        },
      },
    },
  ],
} as const

export const contact = {
  type: 'object',
  required: ['name', 'addresses'],
  additionalProperties: false,
  properties: {
    identifier: { type: 'string', minLength: 1, maxLength: 255, 'x-code': 'INVALID_IDENTIFIER' },
    name: { ...nonEmptyString, maxLength: 500 },
    addresses: { type: 'array', minItems: 1, maxItems: 20, items: address, 'x-code': 'REQUIRED' },
    scheduledAt: {
      type: 'string',
      maxLength: 40,
      format: 'date-time',
      pattern: '(Z|z|[+-]00:00)$',
      'x-code': 'INVALID_SCHEDULED_AT',
      'x-expected': 'a UTC date-time (ISO 8601 ending in Z), in the future and within 30 days',
    },
    contactPriority: { type: 'integer', 'x-code': 'INVALID_PRIORITY' },
    customFields: {
      type: 'object',
      maxProperties: 100,
      propertyNames: safeFieldName,
      additionalProperties: { type: ['string', 'number', 'boolean', 'null'], maxLength: 2000 },
    },
    onDuplicate: { type: 'string', enum: ['recontact'], 'x-code': 'INVALID_ON_DUPLICATE' },
    resetAttempts: { type: 'boolean' },
  },
} as const

const weekday = { type: 'string', enum: ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] } as const
const clockTime = { type: 'string', maxLength: 5, pattern: '^([01][0-9]|2[0-3]):[0-5][0-9]$', 'x-expected': 'HH:MM (24 h)' } as const

export const batchRules = {
  type: 'object',
  additionalProperties: false,
  properties: {
    maxAttempts: { type: 'integer', minimum: 1, maximum: 100 },
    maxAttemptsPerAddress: { type: 'integer', minimum: 1, maximum: 100 },
    retryDelayMinutes: {
      type: 'object',
      propertyNames: { enum: OUTCOMES, 'x-code': 'INVALID_OUTCOME', 'x-expected': OUTCOMES.join(', ') },
      additionalProperties: { type: 'integer', minimum: 0, maximum: 43200 },
    },
    callingWindows: {
      type: 'array',
      maxItems: 50,
      items: {
        type: 'object',
        required: ['days', 'start', 'end'],
        additionalProperties: false,
        properties: { days: { type: 'array', minItems: 1, maxItems: 7, uniqueItems: true, items: weekday }, start: clockTime, end: clockTime },
      },
    },
    timeZone: { type: 'string', minLength: 1, maxLength: 64, 'x-expected': 'an IANA time-zone name' },
    blockedDates: { type: 'array', maxItems: 366, items: { type: 'string', maxLength: 10, format: 'date' } },
    priorityOrder: { type: 'string', enum: ['contactPriority', 'scheduledAt'] },
    finalOutcomes: { type: 'array', uniqueItems: true, maxItems: OUTCOMES.length, items: { type: 'string', enum: OUTCOMES } },
    provider: { type: 'string', enum: PROVIDERS, 'x-expected': 'simulated, webhook or assistant (assistant: phone and whatsapp batches)' },
    crewId: { type: 'string', minLength: 1, maxLength: 100 },
    outboundText: { type: 'string', minLength: 1, maxLength: 2000 },
    maxInFlight: { type: 'integer', minimum: 1, maximum: 10000 },
    maxAttemptsPerMinute: { type: 'integer', minimum: 1, maximum: 1000000 },
  },
} as const

const columnName = { ...nonEmptyString, maxLength: 200 } as const
const columnList = { type: 'array', minItems: 1, maxItems: 50, items: columnName } as const

export const columnMapping = {
  type: 'object',
  required: ['name'],
  additionalProperties: false,
  properties: {
    identifier: columnName,
    name: columnName,
    phone: columnList,
    email: columnList,
    whatsapp: columnList,
    scheduledAt: columnName,
    contactPriority: columnName,
    // CSV column names become customFields keys.
    customFields: { type: 'array', minItems: 1, maxItems: 100, items: safeFieldName },
  },
  anyOf: [{ required: ['phone'] }, { required: ['email'] }, { required: ['whatsapp'] }],
} as const

/** An e-mail address is at most 254 characters (RFC 5321); a phone number 15 digits. */
const blockedAddress = { ...nonEmptyString, maxLength: 254 } as const

/** One address of the person to erase: as a contact's, without a priority. */
const erasureAddress = {
  type: 'object',
  required: ['address', 'type'],
  additionalProperties: false,
  properties: { address: address.properties.address, type: address.properties.type },
  allOf: address.allOf,
} as const

export const dialerSchemas = {
  'dialer.contact': contact,
  'dialer.contacts.insert': {
    type: 'object',
    required: ['contacts'],
    additionalProperties: false,
    properties: { contacts: { type: 'array', minItems: 1, maxItems: 1000, items: { $ref: 'dialer.contact' } } },
  },
  'dialer.batch.create': {
    type: 'object',
    required: ['name', 'channel', 'duplicateStrategy'],
    additionalProperties: false,
    properties: {
      source: { type: 'string', enum: ['api', 'csv'] },
      name: { ...nonEmptyString, maxLength: 200 },
      channel: { type: 'string', enum: CHANNELS },
      duplicateStrategy: {
        type: 'string',
        enum: DUPLICATE_STRATEGIES,
        'x-expected': 'skip (keep the existing contact), merge (apply sent fields) or replace (overwrite the contact)',
      },
      rules: batchRules,
      tempCsvKey: { ...nonEmptyString, maxLength: 512 },
      columnMapping,
    },
    dependentRequired: { tempCsvKey: ['columnMapping'], columnMapping: ['tempCsvKey'] },
    // The assistant provider opens voice/messaging sessions: not for e-mail batches.
    if: { type: 'object', properties: { rules: { type: 'object', properties: { provider: { const: 'assistant' } }, required: ['provider'] } }, required: ['rules'] },
    then: { properties: { channel: { enum: ['phone', 'whatsapp'], 'x-code': 'INVALID_PROVIDER', 'x-expected': 'phone or whatsapp with rules.provider assistant' } } },
  },
  'dialer.attempt.outcome': {
    type: 'object',
    required: ['outcome'],
    additionalProperties: false,
    properties: {
      outcome: { type: 'string', enum: OUTCOMES, 'x-code': 'INVALID_OUTCOME', 'x-expected': OUTCOMES.join(', ') },
      detail: { type: 'string', maxLength: 1000 },
    },
  },
  'dialer.contact.reschedule': {
    type: 'object',
    required: ['scheduledAt'],
    additionalProperties: false,
    properties: { scheduledAt: contact.properties.scheduledAt },
  },
  'dialer.upload-url.create': {
    type: 'object',
    required: ['fileName', 'fileType'],
    additionalProperties: false,
    properties: {
      fileName: { ...nonEmptyString, maxLength: 255 },
      fileType: { type: 'string', const: 'text/csv' },
    },
  },
  'dialer.blocked-addresses.block': {
    type: 'object',
    required: ['addressType'],
    additionalProperties: false,
    properties: {
      addresses: { type: 'array', minItems: 1, maxItems: 10000, items: blockedAddress },
      address: blockedAddress,
      addressType: { type: 'string', enum: ADDRESS_TYPES },
      reason: { type: 'string', maxLength: 500 },
    },
  },
  'dialer.erasure.create': {
    type: 'object',
    additionalProperties: false,
    description: 'The person to erase from the account: their addresses, their contact identifiers, or both',
    properties: {
      addresses: { type: 'array', minItems: 1, maxItems: 20, items: erasureAddress },
      identifiers: { type: 'array', minItems: 1, maxItems: 20, items: { type: 'string', minLength: 1, maxLength: 255, 'x-code': 'INVALID_IDENTIFIER' } },
    },
    anyOf: [{ required: ['addresses'] }, { required: ['identifiers'] }],
    example: { addresses: [{ address: '34600111222', type: 'phone' }, { address: 'ana@example.com', type: 'email' }], identifiers: ['crm-4711'] },
  },
  'dialer.blocked-addresses.unblock': {
    type: 'object',
    required: ['addressType'],
    additionalProperties: false,
    properties: {
      addresses: { type: 'array', minItems: 1, maxItems: 10000, items: blockedAddress },
      address: blockedAddress,
      addressType: { type: 'string', enum: ADDRESS_TYPES },
    },
  },
} as const
