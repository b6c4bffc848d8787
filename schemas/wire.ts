// JSON Schemas of every message that crosses NATS (docs/deploy.md, "Wire protocol"), one per
// message and protocol version, compiled once. Version 1 is what builds before the protocol was
// versioned wrote (no `v` field; errors carried an HTTP status); version 2 adds `v` to every
// message and carries errors as a domain error's kind; version 3 lets one message on a session's
// event subject carry several of its events, in order (`kind: 'batch'`). Readers check what they decode against
// the schema of the version the message says it is (platform/wire.ts).
//
// Envelopes are closed (an unknown field is a malformed message); what a client or a tool put
// inside (a tool's arguments, an event's data, a command's result) stays free-form: it was
// validated where it entered the service.
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js'
import type { JsonSchema } from './validator.js'
import { ERROR_KINDS } from '../platform/errors.js'

export const WIRE_VERSIONS = [1, 2, 3] as const
export type WireVersion = (typeof WIRE_VERSIONS)[number]

const text = { type: 'string', minLength: 1 } as const
const count = { type: 'integer', minimum: 0 } as const
const anyObject = { type: 'object' } as const
const closed = (properties: Record<string, unknown>, required: string[]): JsonSchema => ({ type: 'object', properties, required, additionalProperties: false })

const target = closed({ sessionId: text, accountId: { type: 'string' } }, ['sessionId', 'accountId'])
const contextMessages = { type: 'array', items: anyObject }
const command = (type: string, properties: Record<string, unknown> = {}, required: string[] = []) =>
  closed({ type: { const: type }, ...properties }, ['type', ...required])

/** engine/transport.ts, SessionCommand. */
const sessionCommand: JsonSchema = {
  type: 'object',
  required: ['type'],
  discriminator: { propertyName: 'type' },
  oneOf: [
    command('user.message', { consumerId: text, text: { type: 'string' } }, ['consumerId', 'text']),
    command('consumer.attach', { consumerId: text }, ['consumerId']),
    command('user.interrupt', { consumerId: text, heard: { type: 'string' } }, ['consumerId']),
    command('admin.append', { userId: text, messages: contextMessages }, ['userId', 'messages']),
    command('admin.override', { userId: text, messages: contextMessages, arguments: anyObject }, ['userId', 'messages']),
    command('admin.attend', { userId: text }, ['userId']),
    command('admin.whisper', { userId: text, text: { type: 'string' } }, ['userId', 'text']),
    command('admin.impersonate', { userId: text, text: { type: 'string' }, applyModifiers: { type: 'boolean' } }, ['userId', 'text', 'applyModifiers']),
    command('admin.toolinject', { userId: text, tool: text, args: {} }, ['userId', 'tool']),
    command('admin.transfer', { userId: text, target: text, reason: { type: 'string' } }, ['userId', 'target']),
    command('admin.pause', { userId: text, reason: { type: 'string' } }, ['userId']),
    command('admin.resume', { userId: text }, ['userId']),
    command('external.resolve', { userId: text, correlationId: text, result: {} }, ['userId', 'correlationId']),
    command('session.destroy', { reason: text, by: { enum: ['channel', 'admin'] }, userId: text }, ['reason', 'by']),
    command('query.history', { after: count, limit: count }, ['after', 'limit']),
    command('query.snapshot'),
  ],
}

/** engine/transport.ts, CreateSessionRequest. */
const createRequest = closed(
  {
    sessionId: text,
    consumerId: text,
    accountId: { type: 'string' },
    crewId: text,
    arguments: anyObject,
    outbound: closed({ type: { enum: ['static', 'dynamic'] }, parameters: anyObject }, ['type', 'parameters']),
  },
  ['sessionId', 'consumerId', 'accountId', 'crewId', 'arguments'],
)


const sessionEvent = closed({ kind: { const: 'event' }, name: text, data: anyObject, seq: count, epoch: count }, ['kind', 'name', 'data', 'seq', 'epoch'])
const sessionClosed = closed({ kind: { const: 'closed' }, reason: { type: 'string' }, seq: count, epoch: count }, ['kind', 'reason', 'seq', 'epoch'])

/** Each message's schema at version 1 (v absent); version 2 is the same with `v: 2` unless given. */
const V1 = {
  /** gateway -> node: sb.engine.<node>.create, sb.engine.create */
  'engine.create': closed({ request: createRequest }, ['request']),
  /** gateway (or a draining node) -> owner or node: sb.session.<id>.cmd, sb.engine.<node>.claim */
  'session.request': closed({ target, command: sessionCommand, id: text }, ['target']),
  /** node -> asker: the answer to a create, a command or a claim */
  'engine.reply': {
    oneOf: [
      closed({ ok: { const: true }, result: {} }, ['ok']),
      closed({ ok: { const: false }, error: closed({ status: { type: 'integer', minimum: 400, maximum: 599 }, code: text, message: { type: 'string' }, extra: anyObject }, ['status', 'code', 'message']) }, ['ok', 'error']),
      closed({ ok: { const: false }, redirect: text }, ['ok', 'redirect']),
    ],
  },
  /** node -> node: sb.engine.<node>.ping (version 1 sent an empty payload); answered {ok, result: {node, live}} */
  'engine.ping': closed({}, []),
  /** owner -> gateways and the SB_SESSION_EVENTS stream: sb.session.<id>.events */
  'session.event': {
    type: 'object',
    required: ['kind'],
    discriminator: { propertyName: 'kind' },
    oneOf: [sessionEvent, sessionClosed, closed({ kind: { const: 'owner' }, seq: count, epoch: count }, ['kind', 'seq', 'epoch'])],
  },
  /**
   * owner -> the SB_SESSION_JOURNAL stream: sb.journal.<id>.log, a session's durable history in a
   * cluster (engine/cluster/jetstream-journal.ts). A checkpoint carries what a restore starts
   * from; batches, consumers and owner marks follow it; `closed` ends the session.
   */
  'session.journal': {
    type: 'object',
    required: ['kind'],
    discriminator: { propertyName: 'kind' },
    oneOf: [
      closed(
        {
          kind: { const: 'checkpoint' },
          session: closed({ accountId: { type: 'string' }, crewId: text, consumers: { type: 'array', items: text }, createdAt: count }, ['accountId', 'crewId', 'consumers', 'createdAt']),
          write: anyObject,
          epoch: count,
          behind: { type: 'boolean' },
        },
        ['kind', 'session', 'write', 'epoch'],
      ),
      closed({ kind: { const: 'batch' }, entries: { type: 'array', items: anyObject }, control: anyObject, epoch: count }, ['kind', 'entries', 'epoch']),
      closed({ kind: { const: 'consumer' }, consumerId: text, epoch: count }, ['kind', 'consumerId', 'epoch']),
      closed({ kind: { const: 'owner' }, epoch: count }, ['kind', 'epoch']),
      closed({ kind: { const: 'closed' }, reason: { type: 'string' }, epoch: count }, ['kind', 'reason', 'epoch']),
    ],
  },
  /** owner -> SB_SESSION_JOURNAL: sb.journal.<id>.cp, where the session's latest checkpoint record is in its log */
  'session.journal.pointer': closed({ logSeq: count, epoch: count }, ['logSeq', 'epoch']),
  /** KV sb_engine_nodes: a node's heartbeat */
  'engine.node': closed({ node: text, live: count, at: count }, ['node', 'live', 'at']),
  /** KV sb_session_owners: a session's lease */
  'session.owner': closed({ node: text, at: count }, ['node', 'at']),
  /** Work queues (platform/bus/nats-bus.ts): a queue without a schema of its own */
  'queue.message': anyObject,
  /** sb.queue.dialer.contacts.chunks (dialer/chunk-application.ts, ChunkMessage) */
  'queue.dialer.chunk': closed(
    { operationId: text, accountId: { type: 'string' }, batchId: text, index: count, contacts: { type: ['string', 'array'] }, rejected: { type: 'array' } },
    ['operationId', 'accountId', 'batchId', 'index', 'contacts', 'rejected'],
  ),
  /** sb.queue.dialer.batches.lifecycle */
  'queue.dialer.lifecycle': closed({ operationId: text }, ['operationId']),
  /** sb.queue.dialer.csv.imports */
  'queue.dialer.import': closed({ batchId: text, operationId: text, tempCsvKey: text, columnMapping: anyObject }, ['batchId', 'operationId', 'tempCsvKey', 'columnMapping']),
} satisfies Record<string, JsonSchema>

/** A later version of a message that only gained `v`. */
function versioned(schema: JsonSchema, v: 2 | 3): JsonSchema {
  if (schema.oneOf) return { ...schema, oneOf: (schema.oneOf as JsonSchema[]).map(branch => versioned(branch, v)) }
  if (schema.additionalProperties !== false) return { ...schema, required: [...((schema.required as string[]) ?? []), 'v'], properties: { ...(schema.properties as object), v: { const: v } } }
  return { ...schema, properties: { v: { const: v }, ...(schema.properties as object) }, required: [...(schema.required as string[]), 'v'] }
}

/** An engine node's answer from version 2 on: errors as a domain error's kind. */
const engineReply = (v: 2 | 3): JsonSchema => ({
  oneOf: [
    closed({ v: { const: v }, ok: { const: true }, result: {} }, ['v', 'ok']),
    closed(
      {
        v: { const: v },
        ok: { const: false },
        error: closed({ kind: { enum: ERROR_KINDS }, code: text, message: { type: 'string' }, extra: anyObject, retryAfterSeconds: count }, ['kind', 'code', 'message']),
      },
      ['v', 'ok', 'error'],
    ),
    closed({ v: { const: v }, ok: { const: false }, redirect: text }, ['v', 'ok', 'redirect']),
  ],
})

const V2: Record<string, JsonSchema> = {
  ...Object.fromEntries(Object.entries(V1).map(([name, schema]) => [name, versioned(schema, 2)])),
  'engine.reply': engineReply(2),
}

const eventsV3 = versioned(V1['session.event']!, 3)
const V3: Record<string, JsonSchema> = {
  ...Object.fromEntries(Object.entries(V1).map(([name, schema]) => [name, versioned(schema, 3)])),
  'engine.reply': engineReply(3),
  // A session's events that one turn of its owner's loop published, in order (a turn's status
  // and its reply): one message on NATS and in the stream instead of one each.
  'session.event': {
    ...eventsV3,
    oneOf: [
      ...(eventsV3.oneOf as JsonSchema[]),
      closed(
        { v: { const: 3 }, kind: { const: 'batch' }, events: { type: 'array', minItems: 1, items: { type: 'object', required: ['kind'], discriminator: { propertyName: 'kind' }, oneOf: [sessionEvent, sessionClosed] } } },
        ['v', 'kind', 'events'],
      ),
    ],
  },
}

/** A message name the protocol declares: a misspelt one does not compile. */
export type WireMessage = keyof typeof V1

/** Every wire schema, by version then message (docs, tests). */
export const wireSchemas: Record<WireVersion, Record<string, JsonSchema>> = { 1: V1, 2: V2, 3: V3 }

// Its own instance: first error only (a refusal logs one reason), no echo of the value. Each
// schema is compiled once, when first used.
const ajv = new Ajv2020({ allErrors: false, strict: true, strictRequired: false, discriminator: true, allowUnionTypes: true })
const compiled = new Map<string, ValidateFunction>()

/** Checks a decoded message against its schema at `version`: null when valid, else what is wrong. */
export function wireProblem(message: WireMessage, version: WireVersion, data: unknown): string | null {
  const key = `${version}:${message}`
  let validate = compiled.get(key)
  if (!validate) {
    const schema = wireSchemas[version]?.[message]
    if (!schema) throw new Error(`No wire schema ${message} v${version}`)
    compiled.set(key, (validate = ajv.compile(schema)))
  }
  if (validate(data)) return null
  const error = validate.errors?.[0]
  return error ? `${error.instancePath || '(message)'} ${error.message ?? 'is not valid'}` : 'is not valid'
}
