// Supervisor APIs the operator console stands on: the account's session listing.
const SESSION_STATES = ['active', 'paused', 'completed', 'abandoned', 'transferred_to_human', 'error']
const LISTING_STATES = ['live', 'active', 'paused', 'closed', 'completed', 'abandoned', 'transferred_to_human', 'error']
const id = { type: 'string', minLength: 1, maxLength: 128 }

export const supervisionSchemas = {
  'supervision.sessions.query': {
    type: 'object',
    properties: {
      crewId: { ...id, description: 'Only this crew' },
      agentId: { ...id, description: 'Only sessions whose agent in charge is this one' },
      state: {
        type: 'string',
        enum: LISTING_STATES,
        description: 'live: active or paused; closed: any ended state; absent: live plus those closed in the last hour',
      },
      limit: { type: 'integer', minimum: 1, maximum: 500, description: 'Page size (default 100)' },
      cursor: { type: 'string', minLength: 1, maxLength: 512, description: 'nextCursor of the previous page' },
    },
  },
  'supervision.session': {
    type: 'object',
    required: ['sessionId', 'crewId', 'agentId', 'state', 'live', 'startTime', 'endTime', 'age', 'messages'],
    properties: {
      sessionId: { type: 'string' },
      crewId: { type: 'string' },
      agentId: { type: 'string', description: 'Agent in charge now (or at the end)' },
      agents: { type: 'array', items: { type: 'string' }, description: 'Every agent the session passed through, in order' },
      state: { type: 'string', enum: SESSION_STATES },
      live: { type: 'boolean' },
      startTime: { type: 'integer', description: 'Unix ms' },
      endTime: { type: ['integer', 'null'], description: 'Unix ms; null while live' },
      age: { type: 'integer', description: 'Milliseconds since the start (to the end once closed)' },
      messages: { type: 'integer' },
      userMessages: { type: 'integer' },
      assistantMessages: { type: 'integer' },
      toolCalls: { type: 'integer' },
      transfers: { type: 'integer' },
      endReason: { type: ['string', 'null'] },
      watchers: { type: 'array', items: { type: 'string' }, description: 'UserIds of the supervisors watching it (open watch streams on the answering gateway)' },
      lastActivity: { type: 'integer', description: 'Unix ms of the last recorded activity (a turn, a transfer, a pause, the close)' },
      phase: { type: 'string', enum: ['awaiting_user', 'awaiting_assistant', 'awaiting_tool', 'paused', 'closed'], description: "Whose move it is" },
      lastMessage: {
        type: ['object', 'null'],
        required: ['author', 'text', 'at'],
        properties: { author: { type: 'string', enum: ['user', 'assistant'] }, text: { type: 'string', description: 'Clipped to 200 characters' }, at: { type: 'integer' } },
      },
      awaitingReplySince: { type: ['integer', 'null'], description: 'Unix ms of the user message still without an assistant reply' },
      attention: { type: 'array', items: { $ref: 'supervision.attention.flag' }, description: 'Why the session needs a human now; empty when it does not' },
      customer: {
        type: ['object', 'null'],
        description: "Who the session is with, from its arguments: the first of name, customerName, customer_name, fullName, full_name, nombre, and of phone, email, whatsapp, address, msisdn, telefono, identifier (200 characters each); null when they name nobody",
        properties: { name: { type: 'string' }, address: { type: 'string' } },
      },
    },
  },
  'supervision.attention.flag': {
    type: 'object',
    required: ['reason', 'since', 'acknowledged'],
    properties: {
      reason: {
        type: 'string',
        enum: ['guardrail', 'assistant_error', 'tool_result_awaited', 'human_requested', 'no_reply'],
        description:
          "guardrail: a guardrail redacted a message (detail: its id); assistant_error: no reply could be produced; tool_result_awaited: an external tool call waits (detail: the tool; cleared by its result); human_requested: the user asked for a person (the crew's attention.humanRequestPhrases); no_reply: a user message without reply for the crew's attention.noReplySeconds (default 30)",
      },
      since: { type: 'integer', description: 'Unix ms of the latest occurrence' },
      detail: { type: 'string' },
      acknowledged: { type: 'boolean' },
      acknowledgedBy: { type: 'string', description: 'UserId of the supervisor who acknowledged it' },
      acknowledgedAt: { type: 'integer' },
    },
  },
  'supervision.sessions.page': {
    type: 'object',
    required: ['data'],
    properties: {
      data: { type: 'array', items: { $ref: 'supervision.session' } },
      nextCursor: { type: 'string', description: 'Pass as cursor for the next page; absent on the last page' },
    },
  },
  'supervision.feed.event': {
    type: 'object',
    required: ['kind'],
    description:
      'text/event-stream; event: session.created | session.changed | session.closed, id: Unix ms of the change (send it back as Last-Event-ID), data: this object. A resumed feed may repeat the changes of its last seconds: apply them by sessionId. Event session.presence ({kind: presence, sessionId, watchers}) tells who watches a session whenever that changes on this gateway; it is not replayed on resume (the listing has `watchers`).',
    properties: {
      kind: { type: 'string', enum: ['created', 'changed', 'closed', 'presence'] },
      session: { $ref: 'supervision.session' },
      sessionId: { type: 'string', description: 'session.presence only' },
      watchers: { type: 'array', items: { type: 'string' }, description: 'session.presence only: the UserIds watching it now' },
    },
  },
  /** Frames of the supervisor watch stream (x-events: each event name to its data). */
  'supervision.watch.stream': {
    description: 'Server-Sent Events: watch.ready first, then history entries (id = their seq) and the live channel events',
    type: 'string',
    'x-events': {
      'watch.ready': { type: 'object', required: ['sessionId', 'after'], properties: { sessionId: { type: 'string' }, after: { type: 'integer' }, watchers: { type: 'array', items: { type: 'string' } } } },
      presence: { type: 'object', required: ['watchers'], properties: { watchers: { type: 'array', items: { type: 'string' }, description: 'UserIds watching the session now, sent when that changes' } } },
      history: { type: 'object', required: ['seq', 'at', 'type'], properties: { seq: { type: 'integer' }, at: { type: 'string' }, type: { type: 'string' }, userId: { type: 'string' } } },
      channel: { type: 'object', description: 'A channel event as a listener sees it (kind, name, data)' },
      'session.gone': { type: 'object' },
      hearthbeat: { $ref: 'event.hearthbeat' },
    },
  },
} as const
