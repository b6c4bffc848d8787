// Request bodies and event payloads of the assistant channel (spec 4.2, 6).
import { nonEmptyString } from './common.js'
import { CONTEXT_BOUNDS, freeFormObject } from './free-form.js'

export const MESSAGE_MAX_LENGTH = 16_000

const whisperedMessage = {
  type: 'object',
  required: ['text', 'author'],
  additionalProperties: false,
  properties: {
    text: { ...nonEmptyString, maxLength: MESSAGE_MAX_LENGTH },
    author: { type: 'string', enum: ['system', 'agent', 'user'], 'x-code': 'INVALID_AUTHOR' },
  },
} as const

const outbound = {
  type: 'object',
  required: ['type', 'parameters'],
  additionalProperties: false,
  properties: {
    type: { type: 'string', enum: ['static', 'dynamic'], 'x-code': 'INVALID_OUTBOUND_TYPE' },
    parameters: {
      type: 'object',
      additionalProperties: false,
      properties: {
        text: { ...nonEmptyString, maxLength: MESSAGE_MAX_LENGTH },
        applyModifiers: { type: 'boolean' },
        previousWhisperedMessages: { type: 'array', maxItems: 200, items: whisperedMessage },
      },
    },
  },
  allOf: [
    {
      if: { properties: { type: { const: 'static' } }, required: ['type'] },
      then: { properties: { parameters: { type: 'object', required: ['text'] } } },
    },
    {
      if: { properties: { type: { const: 'dynamic' } }, required: ['type'] },
      then: { properties: { parameters: { type: 'object', required: ['previousWhisperedMessages'] } } },
    },
  ],
} as const

const sessionEvent = (properties: Record<string, unknown>, required: string[]) => ({
  type: 'object',
  required: ['sessionId', ...required],
  properties: { sessionId: { type: 'string' }, ...properties },
})

export const channelSchemas = {
  'channel.create': {
    type: 'object',
    additionalProperties: false,
    properties: {
      arguments: freeFormObject(CONTEXT_BOUNDS, { maxProperties: 200 }),
      outbound,
    },
    example: { arguments: { name: 'Ana', plan: 'gold' }, outbound: { type: 'static', parameters: { text: 'Hi Ana!', applyModifiers: true } } },
  },
  'channel.message': {
    type: 'object',
    required: ['message'],
    additionalProperties: false,
    properties: { message: { ...nonEmptyString, maxLength: MESSAGE_MAX_LENGTH } },
  },
  'channel.destroy': {
    type: 'object',
    additionalProperties: false,
    properties: { reason: { type: 'string', minLength: 1, maxLength: 200, pattern: '^[A-Za-z0-9_.:-]+$', 'x-expected': 'a reason code such as user_closed' } },
  },
  'channel.accepted': {
    type: 'object',
    required: ['sessionId', 'consumerId', 'status'],
    properties: { sessionId: { type: 'string' }, consumerId: { type: 'string' }, status: { const: 'accepted' } },
  },
  'channel.destroyed': {
    type: 'object',
    required: ['sessionId', 'status', 'reason'],
    properties: { sessionId: { type: 'string' }, status: { const: 'destroyed' }, reason: { type: 'string' } },
  },
  // Event payloads (the `data:` line of each SSE event), published for clients.
  'event.Initialized': sessionEvent({ consumerId: { type: 'string' } }, ['consumerId']),
  'event.session.consumer.attached': sessionEvent(
    { consumerId: { type: 'string' }, resumed: { type: 'boolean' }, lastEventId: { type: 'integer' } },
    ['consumerId'],
  ),
  'event.hearthbeat': { type: 'object', required: ['minutes'], properties: { minutes: { type: 'number' } } },
  'event.reconnect_required': sessionEvent(
    {
      consumerId: { type: 'string' },
      reason: { enum: ['slow_consumer', 'shutdown'] },
      listen: { type: 'object', properties: { method: { type: 'string' }, path: { type: 'string' } } },
    },
    ['consumerId', 'reason'],
  ),
  'event.stream.gap': sessionEvent(
    { consumerId: { type: 'string' }, reason: { enum: ['replay_buffer_exceeded', 'unknown_consumer'] }, lastEventId: { type: 'integer' }, resumedAfter: { type: 'integer' } },
    ['consumerId', 'reason', 'lastEventId'],
  ),
  'event.crew.status.writing': sessionEvent({ agentId: { type: 'string' }, turnId: { type: 'integer' } }, ['agentId', 'turnId']),
  'event.assistant.response': sessionEvent(
    { messageId: { type: 'string' }, turnId: { type: 'integer' }, index: { type: 'integer' }, delta: { type: 'string' } },
    ['messageId', 'turnId', 'index', 'delta'],
  ),
  'event.assistant.message': sessionEvent(
    { messageId: { type: 'string' }, turnId: { type: 'integer' }, agentId: { type: 'string' }, text: { type: 'string' }, at: { type: 'integer' } },
    ['messageId', 'agentId', 'text'],
  ),
  'event.assistant.interrupted': sessionEvent(
    { messageId: { type: 'string' }, turnId: { type: 'integer' }, agentId: { type: 'string' }, chunks: { type: 'integer' }, text: { type: 'string' } },
    ['messageId', 'turnId', 'chunks', 'text'],
  ),
  'event.crew.status.waiting': sessionEvent({ agentId: { type: 'string' } }, ['agentId']),
  'event.assistant.error': sessionEvent({ turnId: { type: 'integer' }, code: { type: 'string' }, message: { type: 'string' } }, ['code', 'message']),
  'event.session.transferred': sessionEvent({ from: { type: 'string' }, agentId: { type: 'string' } }, ['from', 'agentId']),
  'event.session.paused': sessionEvent({}, []),
  'event.session.resumed': sessionEvent({}, []),
  'event.session.closed': sessionEvent({ reason: { type: 'string' } }, ['reason']),
  /**
   * What a channel stream carries: frames `id: <seq>`, `event: <name>`, `data: <JSON>`; the data
   * of each event name is the schema `event.<name>` (x-events maps them).
   */
  'channel.stream': {
    description: 'Server-Sent Events; each frame has id (the session event sequence), event (a name in x-events) and data (JSON, the schema x-events names)',
    type: 'string',
    'x-events': Object.fromEntries(
      [
        'Initialized', 'session.consumer.attached', 'hearthbeat', 'reconnect_required', 'stream.gap', 'crew.status.writing', 'assistant.response',
        'assistant.message', 'assistant.interrupted', 'crew.status.waiting', 'assistant.error', 'session.transferred', 'session.paused', 'session.resumed', 'session.closed',
      ].map(name => [name, { $ref: `event.${name}` }]),
    ),
  },
} as const
