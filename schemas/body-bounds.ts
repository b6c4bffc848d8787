// How large a valid request body can be, read off its JSON Schema: its bytes, its values (keys
// plus array elements) and its longest string. The gateway refuses a body past these before it
// parses it (gateway/request.ts), so the cost of a request is bounded by what its route takes,
// not by MAX_BODY_BYTES: a 5 MB body of a million small values costs the loop half a second to
// parse and seconds to validate (every problem listed), whatever route it was sent to.
//
// Each figure is an upper bound over the compact JSON of any valid body, so a valid body is never
// refused by it: a string of maxLength N code points is at most 12 N bytes (a code point is up
// to two UTF-16 units, each at most 6 bytes escaped), a number at most 32 characters. What the
// schema does not bound (a string without maxLength, an object open to any key, an array without
// maxItems) is unbounded, and the route keeps MAX_BODY_BYTES. Keywords that only narrow a value
// (allOf, anyOf, if/then, patterns, formats) are left out: the bound without them holds.
import type { FreeFormBounds } from './free-form.js'
import type { JsonSchema } from './validator.js'

export interface BodyBounds {
  /** Bytes of the body, compact (no whitespace between tokens). */
  bytes: number
  /** Object keys plus array elements, over the whole body. */
  values: number
  /** Bytes of its longest string (key or value), quotes included. */
  string: number
}

export const UNBOUNDED: BodyBounds = { bytes: Infinity, values: Infinity, string: Infinity }

const NUMBER_BYTES = 32
const BYTES_PER_CODE_POINT = 12
const BYTES_PER_UTF16_UNIT = 6

const scalar = (bytes: number): BodyBounds => ({ bytes, values: 0, string: 0 })
const jsonBytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value))

function widest(bounds: BodyBounds[]): BodyBounds {
  if (bounds.length === 0) return UNBOUNDED
  return {
    bytes: Math.max(...bounds.map(b => b.bytes)),
    values: Math.max(...bounds.map(b => b.values)),
    string: Math.max(...bounds.map(b => b.string)),
  }
}

/** A literal (const, enum member): its own JSON, counted generously when it is not a scalar. */
function literal(value: unknown): BodyBounds {
  const bytes = jsonBytes(value)
  return value !== null && typeof value === 'object' ? { bytes, values: bytes, string: bytes } : { bytes, values: 0, string: typeof value === 'string' ? bytes : 0 }
}

/** x-bounds counts strings in UTF-16 units plus 2, keys plus 3, any other scalar as 8 (schemas/free-form.ts). */
function freeForm(b: FreeFormBounds): BodyBounds {
  // Each counted unit is at most 6 bytes written; a number counted 8 is at most 32 = 4 × 8;
  // brackets and commas add at most 3 a value.
  return { bytes: BYTES_PER_UTF16_UNIT * b.bytes + 3 * (b.nodes + 1), values: b.nodes, string: BYTES_PER_UTF16_UNIT * b.bytes + 2 }
}

function stringBounds(schema: JsonSchema): BodyBounds {
  const max = schema.maxLength
  if (typeof max !== 'number') return UNBOUNDED
  const bytes = BYTES_PER_CODE_POINT * max + 2
  return { bytes, values: 0, string: bytes }
}

function arrayBounds(schema: JsonSchema, resolve: (ref: string) => JsonSchema | undefined, seen: Set<JsonSchema>): BodyBounds {
  const max = schema.maxItems
  if (typeof max !== 'number' || schema.prefixItems !== undefined || typeof schema.items !== 'object') return UNBOUNDED
  const item = bounds(schema.items as JsonSchema, resolve, seen)
  return { bytes: 2 + max * (item.bytes + 1), values: max * (1 + item.values), string: item.string }
}

function objectBounds(schema: JsonSchema, resolve: (ref: string) => JsonSchema | undefined, seen: Set<JsonSchema>): BodyBounds {
  const properties = Object.entries((schema.properties ?? {}) as Record<string, JsonSchema>)
  const entries = properties.map(([key, value]) => {
    const v = bounds(value, resolve, seen)
    const k = jsonBytes(key)
    return { bytes: k + 1 + v.bytes + 1, values: 1 + v.values, string: Math.max(k, v.string) }
  })
  const additional = schema.additionalProperties
  if (additional !== false) {
    // Keys beyond the declared ones: as many as maxProperties, or the names propertyNames lists.
    const names = (schema.propertyNames ?? {}) as JsonSchema
    const count = typeof schema.maxProperties === 'number' ? schema.maxProperties : Array.isArray(names.enum) ? names.enum.length : Infinity
    if (!Number.isFinite(count)) return UNBOUNDED
    const key = Array.isArray(names.enum) ? widest(names.enum.map(literal)) : stringBounds(names)
    const v = additional === undefined || additional === true ? UNBOUNDED : bounds(additional as JsonSchema, resolve, seen)
    const entry = { bytes: key.bytes + 1 + v.bytes + 1, values: 1 + v.values, string: Math.max(key.string, v.string) }
    if (typeof schema.maxProperties === 'number') {
      // maxProperties caps the declared keys too: that many entries of the widest kind.
      const each = widest([entry, ...entries])
      return count === 0 ? scalar(2) : { bytes: 2 + count * each.bytes, values: count * each.values, string: each.string }
    }
    for (let i = 0; i < count; i++) entries.push(entry)
  }
  return {
    bytes: 2 + entries.reduce((sum, e) => sum + e.bytes, 0),
    values: entries.reduce((sum, e) => sum + e.values, 0),
    string: Math.max(0, ...entries.map(e => e.string)),
  }
}

function bounds(schema: JsonSchema | boolean | undefined, resolve: (ref: string) => JsonSchema | undefined, seen: Set<JsonSchema>): BodyBounds {
  if (schema === false) return scalar(0)
  if (schema === undefined || schema === true) return UNBOUNDED
  if (typeof schema.$ref === 'string') {
    const target = resolve(schema.$ref)
    // A schema that refers to itself has no finite bound.
    if (!target || seen.has(target)) return UNBOUNDED
    seen.add(target)
    const found = bounds(target, resolve, seen)
    seen.delete(target)
    return found
  }
  if (schema['x-bounds']) return freeForm(schema['x-bounds'] as FreeFormBounds)
  if ('const' in schema) return literal(schema.const)
  if (Array.isArray(schema.enum)) return widest(schema.enum.map(literal))
  const types = Array.isArray(schema.type) ? (schema.type as string[]) : typeof schema.type === 'string' ? [schema.type] : []
  return widest(
    types.map(type => {
      switch (type) {
        case 'string':
          return stringBounds(schema)
        case 'number':
        case 'integer':
          return scalar(NUMBER_BYTES)
        case 'boolean':
          return scalar(5)
        case 'null':
          return scalar(4)
        case 'array':
          return arrayBounds(schema, resolve, seen)
        case 'object':
          return objectBounds(schema, resolve, seen)
        default:
          return UNBOUNDED
      }
    }),
  )
}

/** The bounds of any body valid against `schema`; `resolve` finds the schema a `$ref` names. */
export function bodyBounds(schema: JsonSchema, resolve: (ref: string) => JsonSchema | undefined): BodyBounds {
  return bounds(schema, resolve, new Set())
}
