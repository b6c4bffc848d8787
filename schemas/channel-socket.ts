// The assistant channel over a WebSocket: the frames a client sends (each validated against its
// schema before anything is done with it) and the frames it receives. Events keep the SSE
// channel's names, ids and payloads (`event.<name>` in schemas/channel.ts).
import { nonEmptyString } from './common.js'
import { CONTEXT_BOUNDS, freeFormObject } from './free-form.js'
import { channelSchemas, MESSAGE_MAX_LENGTH } from './channel.js'

/** The subprotocol a browser offers (with `ticket.<ticket>`); answered when offered. */
export const CHANNEL_SUBPROTOCOL = 'switchboard.channel.v1'

/** The client's id of a frame, echoed by its ack or error. */
const frameId = { type: ['string', 'integer'], minLength: 1, maxLength: 128, minimum: 0, maximum: Number.MAX_SAFE_INTEGER, 'x-expected': 'a string of 1-128 characters or a non-negative integer' } as const
const uuid = { type: 'string', format: 'uuid', maxLength: 36, 'x-expected': 'a UUID' } as const

const frame = <const T extends string, const P extends Record<string, unknown>, const R extends readonly string[]>(type: T, properties: P, required: R) =>
  ({
    type: 'object',
    required: ['type', ...required],
    additionalProperties: false,
    properties: { type: { const: type }, id: frameId, ...properties },
  }) as const

export const FRAME_TYPES = ['open', 'attach', 'message', 'interrupt', 'end'] as const
export type FrameType = (typeof FRAME_TYPES)[number]

export const channelSocketSchemas = {
  /** Opens a new session on a crew; the same body as `POST eventstream/{crewId}`. */
  'socket.open': frame('open', { crewId: { ...nonEmptyString, maxLength: 200 }, arguments: freeFormObject(CONTEXT_BOUNDS, { maxProperties: 200 }), outbound: channelSchemas['channel.create'].properties.outbound }, ['crewId'] as const),
  /** Attaches to a session as a consumer (`listen`); with `lastEventId`, what came after it is replayed first. */
  'socket.attach': frame('attach', { sessionId: uuid, consumerId: uuid, lastEventId: { type: 'integer', minimum: 0, maximum: 999_999_999_999_999 } }, ['sessionId'] as const),
  /** A user message (`PUT eventstream/{sessionId}/{consumerId}`). */
  'socket.message': frame('message', { message: { ...nonEmptyString, maxLength: MESSAGE_MAX_LENGTH } }, ['message'] as const),
  /** Barge-in: the reply being written stops here; `heard`, what the user heard of it (a voice bridge knows). */
  'socket.interrupt': frame('interrupt', { heard: { type: 'string', maxLength: MESSAGE_MAX_LENGTH } }, [] as const),
  /** Ends the session (`DELETE eventstream/{sessionId}`). */
  'socket.end': frame('end', { reason: channelSchemas['channel.destroy'].properties.reason }, [] as const),
  /** A ticket for one crew (to open a session on) or one session (to attach to). */
  'channel.socketTicket': {
    type: 'object',
    additionalProperties: false,
    properties: { crewId: { ...nonEmptyString, maxLength: 200 }, sessionId: uuid },
    oneOf: [{ required: ['crewId'] }, { required: ['sessionId'] }],
    'x-expected': 'exactly one of crewId and sessionId',
    example: { crewId: 'demo' },
  },
  'channel.socketTicketIssued': {
    type: 'object',
    required: ['ticket', 'expiresAt', 'path'],
    properties: { ticket: { type: 'string' }, expiresAt: { type: 'string', format: 'date-time' }, path: { type: 'string' } },
  },
  /** What the server sends: an event, the answer to a frame, or why a frame was refused. */
  'socket.out': {
    oneOf: [
      {
        type: 'object',
        description: 'A channel event: the same id, name and data as on SSE',
        required: ['type', 'id', 'event', 'data'],
        properties: { type: { const: 'event' }, id: { type: 'integer' }, event: { type: 'string' }, data: { type: 'object' } },
      },
      {
        type: 'object',
        description: "A frame done: `result` is what the HTTP call's success body carries",
        required: ['type', 'of', 'result'],
        properties: { type: { const: 'ack' }, id: frameId, of: { enum: FRAME_TYPES }, result: { type: 'object' } },
      },
      {
        type: 'object',
        description: "A frame refused: `status` is the HTTP call's, `error` its error body",
        required: ['type', 'status', 'error'],
        properties: { type: { const: 'error' }, id: frameId, of: { enum: FRAME_TYPES }, status: { type: 'integer' }, error: { $ref: 'error' } },
      },
    ],
  },
} as const
