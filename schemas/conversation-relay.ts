// ConversationRelay (Twilio's, and Telnyx's with the same frames): what the telephony platform
// sends us and what we answer, per the platforms' published WebSocket message formats. Frames
// in keep `additionalProperties` open: the platform adds fields over time, and a field we do not
// read must not end a call. Frame types we do not know are not validated here at all (they are
// ignored with a log, engine/streams/conversation-relay.ts).
import { nonEmptyString } from './common.js'
import { CONTEXT_BOUNDS, freeFormObject } from './free-form.js'
import { MESSAGE_MAX_LENGTH } from './channel.js'

const text = { type: 'string', maxLength: 1024 } as const

const frame = <const T extends string, const P extends Record<string, unknown>, const R extends readonly string[]>(type: T, properties: P, required: R) =>
  ({ type: 'object', required: ['type', ...required], properties: { type: { const: type }, ...properties } }) as const

/** The frame types the platform sends that the relay acts on. */
export const RELAY_FRAME_TYPES = ['setup', 'prompt', 'interrupt', 'dtmf', 'error'] as const
export type RelayFrameType = (typeof RELAY_FRAME_TYPES)[number]

export const conversationRelaySchemas = {
  /** The call, once the socket is open: opens the session (its arguments: the call's details). */
  'relay.setup': frame(
    'setup',
    {
      sessionId: text,
      callSid: text,
      parentCallSid: text,
      accountSid: text,
      from: text,
      to: text,
      forwardedFrom: text,
      callerName: text,
      direction: text,
      callType: text,
      callStatus: text,
      customParameters: freeFormObject(CONTEXT_BOUNDS, { maxProperties: 200 }),
    },
    [] as const,
  ),
  /** What the caller said; `last: false` is a partial transcript of an utterance still going on. */
  'relay.prompt': frame('prompt', { voicePrompt: { type: 'string', maxLength: MESSAGE_MAX_LENGTH }, lang: text, last: { type: 'boolean' } }, ['voicePrompt'] as const),
  /** The caller spoke over the reply: what they heard of it, and after how long. */
  'relay.interrupt': frame(
    'interrupt',
    { utteranceUntilInterrupt: { type: 'string', maxLength: MESSAGE_MAX_LENGTH }, durationUntilInterruptMs: { type: ['integer', 'string'], maxLength: 20 } },
    [] as const,
  ),
  /** A key the caller pressed. */
  'relay.dtmf': frame('dtmf', { digit: { ...nonEmptyString, maxLength: 8 } }, ['digit'] as const),
  /** Something went wrong on the platform's side (logged, cut to 1,000 characters; it may echo a whole frame). */
  'relay.error': frame('error', { description: { type: 'string' } }, [] as const),
  /** What we send: a piece of the reply to speak (`last: true` on the final one), or the end of the relay. */
  'relay.out': {
    oneOf: [
      {
        type: 'object',
        description: 'A token of the reply to speak; `last: true` ends the reply',
        required: ['type', 'token', 'last'],
        additionalProperties: false,
        properties: { type: { const: 'text' }, token: { type: 'string' }, last: { type: 'boolean' } },
      },
      {
        type: 'object',
        description: 'The relay ends (session handed off or closed); `handoffData` is a JSON string `{sessionId, reason, ...}`',
        required: ['type', 'handoffData'],
        additionalProperties: false,
        properties: { type: { const: 'end' }, handoffData: { type: 'string' } },
      },
    ],
  },
  /** A relay token: the crew its calls open sessions on, and optionally a life shorter than the maximum. */
  'channel.relayToken': {
    type: 'object',
    required: ['crewId'],
    additionalProperties: false,
    properties: { crewId: { ...nonEmptyString, maxLength: 200 }, ttlSeconds: { type: 'integer', minimum: 1, maximum: 365 * 24 * 3600 } },
    example: { crewId: 'demo' },
  },
  'channel.relayTokenIssued': {
    type: 'object',
    required: ['token', 'expiresAt', 'path'],
    properties: {
      token: { type: 'string' },
      expiresAt: { type: 'string', format: 'date-time' },
      path: { type: 'string', description: 'The endpoint; the platform connects to `wss://<host><path>?token=<token>`' },
      url: { type: 'string', description: 'The whole URL, when PUBLIC_BASE_URL is set' },
    },
  },
} as const
