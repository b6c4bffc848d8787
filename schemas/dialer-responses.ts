// Success bodies of the dialer routes the spec describes (2.2, 2.3, 2.5, 2.6), published in
// /openapi.json; the fuzz suite validates every such answer it receives against them.
const uuid = { type: 'string', format: 'uuid' } as const
const dateTime = { type: 'string', format: 'date-time' } as const
const count = { type: 'integer', minimum: 0 } as const

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
    required: ['kind', 'operationId', 'batchId', 'status'],
    properties: {
      kind: { enum: ['contacts.load', 'batch.lifecycle'] },
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
    },
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
    },
  },
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
