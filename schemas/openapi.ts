// Builds the published OpenAPI 3.1 document from the route tables and the same schemas that
// validate requests, so the document cannot drift from what the service enforces.
import type { JsonSchema } from './validator.js'

export interface RouteDescription {
  method: string
  path: string
  summary: string
  tag: string
  role: string | null
  requestSchema?: string
  bodyOptional?: boolean
  /** Id of an object schema whose properties are the route's query parameters. */
  querySchema?: string
  requiredHeaders?: string[]
  responses?: Record<string, { description: string; schema?: string }>
  kind?: string
}

const componentName = (id: string) => id.replace(/[^A-Za-z0-9_.-]/g, '_')

/** JSON Schema $refs between our schemas point into components. */
function rewriteRefs(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(rewriteRefs)
  if (value === null || typeof value !== 'object') return value
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) {
    out[k] = k === '$ref' && typeof v === 'string' && !v.startsWith('#') ? `#/components/schemas/${componentName(v)}` : rewriteRefs(v)
  }
  return out
}

function queryParameters(schema: JsonSchema | undefined) {
  if (!schema) return []
  const required = (schema.required as string[] | undefined) ?? []
  return Object.entries((schema.properties ?? {}) as Record<string, JsonSchema>).map(([name, property]) => {
    const { description, 'x-expected': _expected, ...rest } = property
    return { name, in: 'query', required: required.includes(name), ...(description ? { description } : {}), schema: rewriteRefs(rest) }
  })
}

export function buildOpenApi(routes: RouteDescription[], all: Map<string, JsonSchema>, version: string) {
  const paths: Record<string, Record<string, unknown>> = {}
  for (const route of routes) {
    const path = route.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}')
    const method = route.method === 'del' ? 'delete' : route.method
    const parameters = [
      ...[...route.path.matchAll(/:([A-Za-z0-9_]+)/g)].map(m => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } })),
      ...(route.requiredHeaders ?? []).map(name => ({ name, in: 'header', required: true, schema: { type: 'string' } })),
      ...queryParameters(route.querySchema ? all.get(route.querySchema) : undefined),
    ]
    const responses: Record<string, unknown> = {}
    for (const [status, response] of Object.entries(route.responses ?? { '200': { description: 'OK' } })) {
      // Every error answer of every route has the one envelope ({code, message, ...details}).
      const schema = response.schema ?? (Number(status) >= 400 ? 'error' : undefined)
      responses[status] = {
        description: response.description,
        ...(schema
          ? { content: { [route.kind === 'stream' && status === '200' ? 'text/event-stream' : 'application/json']: { schema: { $ref: `#/components/schemas/${componentName(schema)}` } } } }
          : {}),
      }
    }
    responses.default = { description: 'An error: any route may answer 400, 401, 403, 404, 413, 414, 429, 431 or 503 with this envelope (README: errors)', content: { 'application/json': { schema: { $ref: '#/components/schemas/error' } } } }
    ;(paths[path] ??= {})[method] = {
      summary: route.summary,
      tags: [route.tag],
      ...(route.role ? { security: [{ apikey: [] }], 'x-role': route.role } : { security: [] }),
      ...(parameters.length ? { parameters } : {}),
      ...(route.requestSchema
        ? { requestBody: { required: !route.bodyOptional, content: { 'application/json': { schema: { $ref: `#/components/schemas/${componentName(route.requestSchema)}` } } } } }
        : {}),
      responses,
    }
  }
  const schemas: Record<string, unknown> = {}
  for (const [id, schema] of all) schemas[componentName(id)] = rewriteRefs(schema)
  return {
    openapi: '3.1.0',
    info: { title: 'Switchboard', version, description: 'Dialer, assistant channel, session administration and reports.' },
    paths,
    components: { schemas, securitySchemes: { apikey: { type: 'apiKey', in: 'header', name: 'apikey' } } },
  }
}
