// Query parameters, responses and the report-definition file of the reports API (spec 2.8, 4.4).
// Query values arrive as strings; the reports module turns all-digit values into numbers before
// validating, so integer parameters are described (and published) as integers.

/** Largest `pageSize` either report endpoint accepts. */
export const REPORTS_MAX_PAGE_SIZE = 1000
export const GROUP_BY_TIME = ['hour', 'day', 'week', 'month'] as const
export const SESSION_STATUSES = ['active', 'paused', 'completed', 'abandoned', 'transferred_to_human', 'error'] as const
/** Numeric session-record fields a report metric may aggregate. */
export const METRIC_FIELDS = ['duration', 'messages', 'user_messages', 'assistant_messages', 'tool_calls', 'transfers'] as const
/** Session-record fields a metric may filter on (`where`). */
export const WHERE_FIELDS = ['status', 'agent_id', 'end_reason'] as const
export const METRIC_OPS = ['count', 'sum', 'avg', 'min', 'max', 'percentile', 'ratio'] as const

const unixMs = (what: string) => ({
  type: 'integer',
  minimum: 1_000_000_000_000,
  maximum: 9_999_999_999_999,
  description: `${what}, Unix time in milliseconds (13 digits)`,
  'x-expected': 'a 13-digit Unix time in milliseconds',
})

const crewId = {
  type: 'string',
  minLength: 1,
  maxLength: 200,
  description: 'Crew (assistant) id',
  'x-expected': 'a crew id of 1 to 200 characters',
}

const page = {
  type: 'integer',
  minimum: 0,
  maximum: 1_000_000_000,
  description: 'Page number, the first page is 0',
  'x-expected': 'an integer from 0',
}

const pageSize = {
  type: 'integer',
  minimum: 1,
  maximum: REPORTS_MAX_PAGE_SIZE,
  description: `Rows per page, 1 to ${REPORTS_MAX_PAGE_SIZE}`,
  'x-expected': `an integer from 1 to ${REPORTS_MAX_PAGE_SIZE}`,
}

const range = {
  crew_id: crewId,
  start_ts: unixMs('Start of the range (inclusive), on the session start time'),
  end_ts: unixMs('End of the range (exclusive), on the session start time; greater than start_ts'),
  page,
  pageSize,
}

const pagination = {
  type: 'object',
  required: ['page', 'pageSize', 'total', 'hasMore'],
  properties: {
    page: { type: 'integer' },
    pageSize: { type: 'integer' },
    total: { type: 'integer' },
    hasMore: { type: 'boolean' },
  },
} as const

const whereValue = {
  anyOf: [
    { type: 'string', minLength: 1 },
    { type: 'array', minItems: 1, items: { type: 'string', minLength: 1 } },
  ],
}

const metric = {
  type: 'object',
  required: ['op'],
  additionalProperties: false,
  properties: {
    op: { type: 'string', enum: METRIC_OPS },
    field: { type: 'string', enum: METRIC_FIELDS },
    where: {
      type: 'object',
      minProperties: 1,
      additionalProperties: false,
      properties: Object.fromEntries(WHERE_FIELDS.map(f => [f, whereValue])),
    },
    p: { type: 'number', exclusiveMinimum: 0, maximum: 100 },
    of: { type: 'array', minItems: 2, maxItems: 2, items: { type: 'string', minLength: 1 } },
    description: { type: 'string' },
  },
  allOf: [
    { if: { properties: { op: { enum: ['sum', 'avg', 'min', 'max', 'percentile'] } } }, then: { required: ['field'] } },
    { if: { properties: { op: { const: 'percentile' } } }, then: { required: ['p'] } },
    { if: { properties: { op: { const: 'ratio' } } }, then: { required: ['of'], not: { required: ['where'] } } },
  ],
} as const

export const reportsSchemas = {
  'reports.error': {
    type: 'object',
    required: ['code', 'message'],
    properties: {
      code: { type: 'string' },
      message: { type: 'string' },
      parameter: { type: 'string', description: 'The first bad query parameter' },
      retainedFrom: { type: 'integer', description: 'DATA_EXPIRED: the first instant (Unix ms) still kept for this parameter' },
      details: {
        type: 'array',
        items: {
          type: 'object',
          required: ['parameter', 'code', 'message'],
          properties: { parameter: { type: 'string' }, code: { type: 'string' }, message: { type: 'string' } },
        },
      },
    },
  },
  'reports.sessionsDetail.query': {
    type: 'object',
    required: ['crew_id', 'start_ts', 'end_ts', 'page', 'pageSize'],
    properties: {
      ...range,
      asOf: {
        ...unixMs('Snapshot bound: only sessions that started at or before it. Send back pagination.asOf of the first page'),
        'x-expected': 'a 13-digit Unix time in milliseconds (pagination.asOf of the first page)',
      },
      cursor: {
        type: 'string',
        minLength: 1,
        maxLength: 512,
        description: 'Opaque position from pagination.nextCursor of the previous page (keyset paging; optional)',
        'x-expected': 'the pagination.nextCursor value of the previous page',
      },
    },
  },
  'reports.executeReport.query': {
    type: 'object',
    required: ['crew_id', 'start_ts', 'end_ts', 'page', 'pageSize', 'timeZone'],
    properties: {
      ...range,
      timeZone: {
        type: 'string',
        minLength: 1,
        maxLength: 64,
        description: 'IANA time zone name (e.g. Europe/Madrid, URL-encoded as Europe%2FMadrid)',
        'x-expected': 'an IANA time zone name such as Europe/Madrid',
      },
      groupByTime: {
        type: 'string',
        enum: GROUP_BY_TIME,
        description: 'hour, day, week (ISO, Monday) or month in timeZone; empty or absent: one row for the whole range',
        'x-expected': 'hour, day, week, month or empty',
      },
    },
  },
  'reports.sessionRow': {
    type: 'object',
    required: ['session_id', 'agent_id', 'start_time', 'end_time', 'duration', 'status'],
    properties: {
      session_id: { type: 'string' },
      agent_id: { type: 'string', description: 'Agent in charge at the end (now, for a live session)' },
      agents: { type: 'array', items: { type: 'string' }, description: 'Every agent the session passed through, in order' },
      crew_id: { type: 'string' },
      start_time: { type: 'integer' },
      end_time: { type: ['integer', 'null'], description: 'null while the session is live' },
      duration: { type: 'integer', description: 'Milliseconds; for a live session, elapsed so far' },
      status: { type: 'string', enum: SESSION_STATUSES },
      messages: { type: 'integer' },
      user_messages: { type: 'integer' },
      assistant_messages: { type: 'integer' },
      tool_calls: { type: 'integer' },
      transfers: { type: 'integer' },
      end_reason: { type: ['string', 'null'] },
    },
  },
  'reports.sessionsDetail.page': {
    type: 'object',
    required: ['data', 'pagination'],
    properties: {
      data: { type: 'array', items: { $ref: 'reports.sessionRow' } },
      pagination: {
        ...pagination,
        properties: {
          ...pagination.properties,
          asOf: { type: 'integer', description: 'Snapshot bound of this walk; send it back with the next pages' },
          nextCursor: { type: 'string', description: 'Pass as cursor with page+1 for keyset paging; absent on the last page' },
        },
      },
    },
  },
  'reports.report.page': {
    type: 'object',
    required: ['reportId', 'data', 'pagination'],
    properties: {
      reportId: { type: 'string' },
      timeZone: { type: 'string' },
      groupByTime: { type: ['string', 'null'] },
      data: {
        type: 'array',
        items: {
          type: 'object',
          required: ['date', 'metrics'],
          properties: {
            date: { type: 'string', description: 'Bucket start in timeZone, ISO 8601 with offset' },
            metrics: { type: 'object', additionalProperties: { type: ['number', 'null'] } },
          },
        },
      },
      pagination,
    },
  },
  'reports.definitions': {
    type: 'object',
    required: ['data'],
    properties: {
      data: {
        type: 'array',
        items: {
          type: 'object',
          required: ['id', 'metrics'],
          properties: {
            id: { type: 'string' },
            title: { type: 'string' },
            description: { type: 'string' },
            metrics: { type: 'object', additionalProperties: { $ref: 'reports.metric' } },
          },
        },
      },
    },
  },
  'reports.metric': metric,
  /** The shape of config/reports.json. */
  'reports.definitionsFile': {
    type: 'object',
    required: ['reports'],
    additionalProperties: false,
    properties: {
      $comment: { type: 'string' },
      reports: {
        type: 'array',
        items: {
          type: 'object',
          required: ['id', 'metrics'],
          additionalProperties: false,
          properties: {
            id: { type: 'string', pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$' },
            title: { type: 'string' },
            description: { type: 'string' },
            accounts: { type: 'array', minItems: 1, items: { type: 'string', minLength: 1 } },
            metrics: {
              type: 'object',
              minProperties: 1,
              propertyNames: { pattern: '^[A-Za-z][A-Za-z0-9_]{0,63}$' },
              additionalProperties: { $ref: 'reports.metric' },
            },
          },
        },
      },
    },
  },
} as const
