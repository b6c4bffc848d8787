// Every request-body schema of the service, compiled once. Add a module's group here.
import { SchemaRegistry } from './validator.js'
import { dialerSchemas } from './dialer.js'
import { reportsSchemas } from './reports.js'
import { channelSchemas } from './channel.js'
import { adminSchemas } from './admin.js'
import { dialerResponseSchemas } from './dialer-responses.js'
import { errorBody } from './common.js'
import { supervisionSchemas } from './supervision.js'

export { type ValidationIssue, type JsonSchema, toFieldPath } from './validator.js'
export { ADDRESS_TYPES, CHANNELS, DUPLICATE_STRATEGIES } from './dialer.js'
export { buildOpenApi } from './openapi.js'

export const schemas = new SchemaRegistry([dialerSchemas, dialerResponseSchemas, { error: errorBody }, reportsSchemas, channelSchemas, adminSchemas, supervisionSchemas])
