// Success bodies of the dialer routes the spec describes (2.2, 2.3, 2.5, 2.6), published in
// /openapi.json; the fuzz suite validates every such answer it receives against them.
const uuid = { type: 'string', format: 'uuid' } as const
const dateTime = { type: 'string', format: 'date-time' } as const
const count = { type: 'integer', minimum: 0 } as const

const list = (item: Record<string, unknown>) => ({ type: 'object', required: ['data', 'total'], properties: { data: { type: 'array', items: item }, total: count } }) as const

const contactView = {
  type: 'object',
  required: ['contactId', 'batchId', 'identifier', 'name', 'addresses', 'state'],
  properties: {
    contactId: uuid,
    batchId: uuid,
    identifier: { type: 'string' },
    identifierGenerated: { type: 'boolean' },
    name: { type: 'string' },
    addresses: { type: 'array', items: { type: 'object', required: ['address', 'type', 'priority'] } },
    scheduledAt: { type: ['string', 'null'] },
    contactPriority: { type: ['integer', 'null'] },
    customFields: { type: 'object' },
    state: { type: 'string' },
    nextAttemptAt: { type: 'string' },
    attempts: count,
  },
} as const

const attemptView = {
  type: 'object',
  required: ['attemptId', 'batchId', 'contactId', 'provider', 'outcome', 'startedAt'],
  properties: {
    attemptId: uuid,
    batchId: uuid,
    contactId: uuid,
    identifier: { type: 'string' },
    address: { type: 'string' },
    type: { type: 'string' },
    attemptNumber: { type: 'integer' },
    provider: { type: 'string' },
    outcome: { type: ['string', 'null'] },
    detail: { type: ['string', 'null'] },
    startedAt: dateTime,
    endedAt: { type: ['string', 'null'] },
  },
} as const

export const dialerResponseSchemas = {
  'dialer.insert.accepted': {
    type: 'object',
    required: ['operationId', 'operationUrl', 'status', 'contactsReceived', 'chunksPublished'],
    properties: {
      operationId: uuid,
      operationUrl: { type: 'string' },
      status: { const: 'queued' },
      contactsReceived: count,
      chunksPublished: count,
      message: { type: 'string' },
    },
  },
  'dialer.operation': {
    type: 'object',
    required: ['kind', 'operationId', 'status'],
    properties: {
      kind: { enum: ['contacts.load', 'batch.lifecycle', 'person.erasure'] },
      operationId: uuid,
      batchId: uuid,
      status: { type: 'string' },
      type: { type: 'string' },
      requestedCount: count,
      totalChunks: count,
      chunksCompleted: count,
      insertedCount: count,
      invalidCount: count,
      duplicateCount: count,
      updatedCount: count,
      recontactedCount: count,
      errors: { type: 'array', maxItems: 20, items: { type: 'object', required: ['identifier', 'reason'], properties: { identifier: { type: 'string' }, reason: { type: 'string' } } } },
      createdAt: dateTime,
      completedAt: { type: ['string', 'null'] },
      counts: {
        type: 'object',
        description: 'person.erasure: what it removed (blockedAddresses and sessionRecords: kept, without the person)',
        required: ['contacts', 'attempts', 'blockedAddresses', 'sessions', 'sessionRecords', 'importErrors', 'operationErrors', 'webhookReports', 'idempotencyRecords'],
        properties: {
          contacts: count,
          attempts: count,
          blockedAddresses: count,
          sessions: count,
          sessionRecords: count,
          importErrors: count,
          operationErrors: count,
          webhookReports: count,
          idempotencyRecords: count,
        },
      },
      error: { type: ['string', 'null'] },
    },
    // A batch's operations name their batch; an erasure is the account's.
    if: { properties: { kind: { enum: ['contacts.load', 'batch.lifecycle'] } } },
    then: { required: ['batchId'] },
  },
  'dialer.erasure.accepted': {
    type: 'object',
    required: ['operationId', 'operationUrl', 'status'],
    properties: { operationId: uuid, operationUrl: { type: 'string' }, status: { const: 'queued' } },
  },
  'dialer.batch': {
    type: 'object',
    required: ['batchId', 'status', 'source', 'name', 'channel', 'duplicateStrategy'],
    properties: {
      batchId: uuid,
      status: { type: 'string' },
      source: { enum: ['api', 'csv'] },
      name: { type: 'string' },
      channel: { enum: ['phone', 'email', 'whatsapp'] },
      duplicateStrategy: { enum: ['skip', 'merge', 'replace'] },
      rules: { type: 'object' },
      totalContacts: count,
      finishedAt: { type: ['string', 'null'], description: 'When it completed, was archived or deleted: its retention counts from here' },
    },
  },
  'dialer.batch.list': list({ $ref: 'dialer.batch' }),
  'dialer.upload-url': {
    type: 'object',
    required: ['uploadUrl', 'tempCsvKey', 'expiresAt'],
    properties: { uploadUrl: { type: 'string' }, tempCsvKey: { type: 'string' }, method: { const: 'PUT' }, headers: { type: 'object' }, expiresAt: dateTime },
  },
  'dialer.upload.stored': { type: 'object', required: ['tempCsvKey', 'size'], properties: { tempCsvKey: { type: 'string' }, size: count } },
  'dialer.lifecycle.accepted': {
    type: 'object',
    required: ['operationId', 'operationUrl', 'status', 'batchId'],
    properties: { operationId: uuid, operationUrl: { type: 'string' }, status: { const: 'queued' }, batchId: uuid, batchStatus: { type: 'string' } },
  },
  'dialer.contact.view': contactView,
  'dialer.contact.list': list(contactView),
  'dialer.attempt.list': list(attemptView),
  'dialer.attempt.reported': {
    type: 'object',
    required: ['attemptId', 'outcome', 'status'],
    properties: { attemptId: uuid, outcome: { type: 'string' }, detail: { type: ['string', 'null'] }, status: { const: 'accepted' } },
  },
  'dialer.import-errors': list({ type: 'object', required: ['row', 'field', 'code', 'reason'], properties: { row: { type: 'integer' }, identifier: { type: ['string', 'null'] }, field: { type: 'string' }, code: { type: 'string' }, reason: { type: 'string' } } }),
  'dialer.blocked.list': list({
    type: 'object',
    required: ['address', 'addressType', 'createdAt'],
    properties: {
      address: { type: 'string', description: 'The address; erased:<digest> once its person was erased (the block still applies to it)' },
      addressType: { type: 'string' },
      reason: { type: ['string', 'null'] },
      blockedBy: { type: 'string' },
      createdAt: dateTime,
      erasedAt: { ...dateTime, description: 'When its person was erased' },
    },
  }),
  'dialer.blocked.result': { type: 'object', required: ['blocked', 'skipped'], properties: { blocked: count, skipped: count } },
  'dialer.unblocked.result': { type: 'object', required: ['unblocked'], properties: { unblocked: count } },
  'dialer.batch.logs': {
    type: 'object',
    required: ['data', 'total'],
    properties: {
      total: count,
      data: {
        type: 'array',
        items: {
          type: 'object',
          required: ['id', 'batchId', 'operation', 'performedBy', 'createdAt'],
          properties: { id: uuid, batchId: uuid, operation: { type: 'string' }, performedBy: { type: 'string' }, details: { type: ['object', 'null'] }, createdAt: dateTime, updatedAt: dateTime },
        },
      },
    },
  },
} as const
