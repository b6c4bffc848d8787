// Every schema of the service, compiled once. Add a module's group here. A request body's
// TypeScript type is derived from its schema (json-schema-to-ts), so the schema that validates a
// body, the type its handler reads and the OpenAPI document are one declaration.
import type { FromSchema, JSONSchema } from 'json-schema-to-ts'
import { SchemaRegistry } from './validator.js'
import { dialerSchemas } from './dialer.js'
import { reportsSchemas } from './reports.js'
import { channelSchemas } from './channel.js'
import { channelSocketSchemas } from './channel-socket.js'
import { conversationRelaySchemas } from './conversation-relay.js'
import { adminSchemas } from './admin.js'
import { dialerResponseSchemas } from './dialer-responses.js'
import { errorBody } from './common.js'
import { supervisionSchemas } from './supervision.js'

export { type ValidationIssue, type JsonSchema, toFieldPath } from './validator.js'
export { ADDRESS_TYPES, CHANNELS, DUPLICATE_STRATEGIES } from './dialer.js'
export { buildOpenApi } from './openapi.js'
export { CHANNEL_SUBPROTOCOL, channelSocketSchemas, FRAME_TYPES, type FrameType } from './channel-socket.js'
export { conversationRelaySchemas, RELAY_FRAME_TYPES, type RelayFrameType } from './conversation-relay.js'

export const schemas = new SchemaRegistry([dialerSchemas, dialerResponseSchemas, { error: errorBody }, reportsSchemas, channelSchemas, channelSocketSchemas, conversationRelaySchemas, adminSchemas, supervisionSchemas])

/** The schemas a route may name as its request body. */
type RequestSchemas = typeof dialerSchemas & typeof channelSchemas & typeof channelSocketSchemas & typeof conversationRelaySchemas & typeof adminSchemas
export type RequestSchemaId = keyof RequestSchemas & string
/** The type of a body its schema accepts (a free-form value, bounded only by `x-bounds`: unknown). */
export type BodyOf<Id extends RequestSchemaId> = RequestSchemas[Id] extends JSONSchema ? FromSchema<RequestSchemas[Id]> : unknown
