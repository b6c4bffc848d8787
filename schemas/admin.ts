// Request bodies of session administration (spec 4.3).
import { nonEmptyString } from './common.js'
import { MESSAGE_MAX_LENGTH } from './channel.js'
import { CONTEXT_BOUNDS, TOOL_RESULT_BOUNDS, freeFormObject, freeFormValue } from './free-form.js'

const text = { ...nonEmptyString, maxLength: MESSAGE_MAX_LENGTH }

const contextMessage = {
  type: 'object',
  required: ['author', 'text'],
  additionalProperties: false,
  properties: {
    author: { type: 'string', enum: ['system', 'assistant', 'user', 'agent'], 'x-code': 'INVALID_AUTHOR' },
    text,
  },
} as const

export const adminSchemas = {
  'admin.append': {
    type: 'object',
    required: ['context'],
    additionalProperties: false,
    properties: { context: { type: 'array', minItems: 1, maxItems: 500, items: contextMessage, 'x-code': 'REQUIRED' } },
  },
  'admin.override': {
    type: 'object',
    required: ['context'],
    additionalProperties: false,
    properties: {
      // The whole replacement conversation; [] clears it.
      context: { type: 'array', maxItems: 500, items: contextMessage },
      // Optional replacement of the session arguments (the context variables of the crew).
      arguments: freeFormObject(CONTEXT_BOUNDS, { maxProperties: 200 }),
    },
  },
  'admin.whisper': { type: 'object', required: ['text'], additionalProperties: false, properties: { text } },
  'admin.impersonate': {
    type: 'object',
    required: ['text'],
    additionalProperties: false,
    properties: { text, applyModifiers: { type: 'boolean' } },
  },
  'admin.toolinject': {
    type: 'object',
    required: ['tool'],
    additionalProperties: false,
    properties: { tool: { ...nonEmptyString, maxLength: 200 }, args: freeFormObject(CONTEXT_BOUNDS) },
  },
  'admin.transfer': {
    type: 'object',
    required: ['target'],
    additionalProperties: false,
    properties: { target: { ...nonEmptyString, maxLength: 200 }, reason: { type: 'string', maxLength: 500 } },
  },
  'admin.pause': { type: 'object', additionalProperties: false, properties: { reason: { type: 'string', maxLength: 500 } } },
  /** The body of PUT .../external/{correlationUUID}: the tool's final result, any JSON value. */
  'admin.external.result': freeFormValue(TOOL_RESULT_BOUNDS),
  'admin.toolResult': {
    type: 'object',
    required: ['tool', 'callId', 'status'],
    properties: {
      tool: { type: 'string' },
      callId: { type: 'string' },
      status: { enum: ['completed', 'pending'] },
      result: {},
      correlationId: { type: 'string', format: 'uuid' },
      deadline: { type: 'string', format: 'date-time' },
    },
  },
  'admin.history': {
    type: 'object',
    required: ['sessionId', 'data', 'hasMore'],
    properties: {
      sessionId: { type: 'string' },
      state: { type: 'string' },
      logPosition: { type: 'integer' },
      hasMore: { type: 'boolean' },
      data: {
        type: 'array',
        items: { type: 'object', required: ['seq', 'at', 'type'], properties: { seq: { type: 'integer' }, at: { type: 'string' }, type: { type: 'string' }, userId: { type: 'string' } } },
      },
    },
  },
  'admin.snapshot': {
    type: 'object',
    required: ['data'],
    properties: {
      data: {
        type: 'object',
        required: ['snapshot'],
        properties: {
          snapshot: {
            type: 'object',
            required: ['sessionId', 'configuration', 'memory'],
            properties: {
              configuration: {
                type: 'object',
                required: ['context'],
                properties: { context: { type: 'object', required: ['ResumenConversacion'], properties: { ResumenConversacion: { type: 'string' } } } },
              },
            },
          },
        },
      },
    },
  },
} as const
