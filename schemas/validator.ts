// One ajv instance compiles every schema once (all errors, verbose so each error carries the
// sub-schema it broke). Schemas may annotate a constraint with `x-code` (the error code the
// API reports) and `x-expected` (what a valid value looks like); the issues returned here are
// the single source for every 400 body that lists problems.
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js'
import addFormats from 'ajv-formats'
import { exceeds, type FreeFormBounds } from './free-form.js'

export interface ValidationIssue {
  /** Path as clients write it: contacts[0].addresses[1].address */
  field: string
  code: string
  reason: string
  meta?: { received?: unknown; expected?: unknown }
}

export type JsonSchema = Record<string, unknown>

const DEFAULT_CODES: Record<string, string> = {
  required: 'REQUIRED',
  type: 'INVALID_TYPE',
  enum: 'INVALID_VALUE',
  const: 'INVALID_VALUE',
  format: 'INVALID_FORMAT',
  pattern: 'INVALID_FORMAT',
  minLength: 'INVALID_LENGTH',
  maxLength: 'INVALID_LENGTH',
  minItems: 'INVALID_LENGTH',
  maxItems: 'INVALID_LENGTH',
  minimum: 'OUT_OF_RANGE',
  maximum: 'OUT_OF_RANGE',
  exclusiveMinimum: 'OUT_OF_RANGE',
  exclusiveMaximum: 'OUT_OF_RANGE',
  additionalProperties: 'UNKNOWN_FIELD',
  minProperties: 'REQUIRED',
  maxProperties: 'INVALID_LENGTH',
  uniqueItems: 'DUPLICATE_VALUE',
  'x-bounds': 'VALUE_TOO_LARGE',
}

// Wrapper keywords whose inner errors already say what is wrong.
const WRAPPERS = new Set(['if', 'then', 'else', 'allOf', 'not'])

/** JSON Pointer (/contacts/0/name) to the client's notation (contacts[0].name). */
export function toFieldPath(pointer: string, prefix = ''): string {
  let path = prefix
  for (const raw of pointer.split('/').slice(1)) {
    const part = raw.replace(/~1/g, '/').replace(/~0/g, '~')
    path += /^\d+$/.test(part) ? `[${part}]` : path ? `.${part}` : part
  }
  return path
}

function issueOf(error: ErrorObject, data: unknown, prefix: string): ValidationIssue {
  const parent = (error.parentSchema ?? {}) as Record<string, unknown>
  const base = toFieldPath(error.instancePath, prefix)
  if (error.keyword === 'required') {
    const missing = (error.params as { missingProperty: string }).missingProperty
    const field = base ? `${base}.${missing}` : missing
    return { field, code: 'REQUIRED', reason: `${field} is required` }
  }
  if (error.keyword === 'additionalProperties') {
    const extra = (error.params as { additionalProperty: string }).additionalProperty
    const field = base ? `${base}.${extra}` : extra
    return { field, code: 'UNKNOWN_FIELD', reason: `${field} is not a known field` }
  }
  const code = (parent['x-code'] as string | undefined) ?? DEFAULT_CODES[error.keyword] ?? 'INVALID_VALUE'
  const expected = parent['x-expected'] ?? defaultExpected(error)
  const field = base || '(body)'
  if (code === 'REQUIRED') return { field, code, reason: `${field} is required and must not be empty` }
  return {
    field,
    code,
    reason: expected ? `${field} ${error.message}; expected ${expected}` : `${field} ${error.message}`,
    meta: { ...receivedPreview(error.data ?? valueAt(data, error.instancePath)), ...(expected ? { expected } : {}) },
  }
}

/**
 * What the client sent, as echoed in an error: small values as they are, long strings cut, and
 * large trees left out, so an error body (and the idempotency record that may keep it) stays
 * small whatever was sent.
 */
function receivedPreview(value: unknown): { received?: unknown } {
  if (typeof value === 'string') return { received: value.length > 200 ? `${value.slice(0, 200)}…` : value }
  if (value === null || typeof value !== 'object') return { received: value }
  return exceeds(value, { depth: 3, nodes: 20, bytes: 300 }) ? {} : { received: value }
}

function defaultExpected(error: ErrorObject): string | undefined {
  const p = error.params as Record<string, unknown>
  switch (error.keyword) {
    case 'enum':
      return `one of ${(p.allowedValues as unknown[]).join(', ')}`
    case 'type':
      return String(p.type)
    case 'format':
      return String(p.format)
    default:
      return undefined
  }
}

function valueAt(data: unknown, pointer: string): unknown {
  let value: any = data
  for (const part of pointer.split('/').slice(1)) value = value?.[part]
  return value
}

function checkBounds(bounds: FreeFormBounds, data: unknown): boolean {
  const why = exceeds(data, bounds)
  if (!why) return true
  checkBounds.errors = [{ keyword: 'x-bounds', message: why, params: { bounds } }]
  return false
}
checkBounds.errors = undefined as Partial<ErrorObject>[] | undefined

/** Keys plus array elements of `value`, counted up to just past `max` (the walk stops there). */
export function valuesPast(value: unknown, max: number): boolean {
  let count = 0
  const stack: unknown[] = [value]
  while (stack.length > 0) {
    const current = stack.pop()
    if (current === null || typeof current !== 'object') continue
    const children = Array.isArray(current) ? current : Object.values(current)
    count += children.length
    if (count > max) return true
    for (const child of children) if (child !== null && typeof child === 'object') stack.push(child)
  }
  return false
}

export interface ValidateOptions {
  /**
   * An invalid value of more keys and elements than this gets the first problem found, not
   * every one: collecting a problem costs ajv and the issue built from it microseconds, and a
   * large body can hold one in each of its values (10,000 bad addresses take 50–130 ms).
   */
  everyProblemUpTo?: number
}

export class SchemaRegistry {
  private readonly ajv = SchemaRegistry.ajv(true)
  /** The same schemas stopping at the first problem (compiled when first asked for). */
  private readonly firstProblem = SchemaRegistry.ajv(false)
  private readonly compiled = new Map<string, ValidateFunction>()
  readonly all = new Map<string, JsonSchema>()

  private static ajv(allErrors: boolean) {
    const ajv = new Ajv2020({ allErrors, verbose: true, strict: true, strictRequired: false, allowUnionTypes: true })
    addFormats.default(ajv)
    ajv.addVocabulary(['x-code', 'x-expected', 'example', 'x-role', 'x-events'])
    ajv.addKeyword({ keyword: 'x-bounds', schemaType: 'object', validate: checkBounds, errors: true })
    return ajv
  }

  constructor(groups: Record<string, JsonSchema>[]) {
    for (const group of groups) for (const [id, schema] of Object.entries(group)) this.all.set(id, schema)
    for (const [id, schema] of this.all) {
      this.ajv.addSchema({ ...schema, $id: id })
      this.firstProblem.addSchema({ ...schema, $id: id })
    }
    for (const id of this.all.keys()) this.compiled.set(id, this.ajv.getSchema(id)!)
  }

  /** Validates `data`; returns every problem found (empty when valid). */
  validate(id: string, data: unknown, fieldPrefix = '', options: ValidateOptions = {}): ValidationIssue[] {
    let validate = this.compiled.get(id)
    if (!validate) throw new Error(`Unknown schema ${id}`)
    const { everyProblemUpTo } = options
    if (everyProblemUpTo !== undefined && valuesPast(data, everyProblemUpTo)) {
      // A large value: checked up to its first problem (valid ones are checked whole either way).
      validate = this.firstProblem.getSchema(id)!
    }
    if (validate(data)) return []
    // One issue per field: the most specific one (a schema's own x-code, then enum, then the rest; a bare
    // type mismatch last), so `null` for an enum field says which values are allowed.
    const best = new Map<string, { issue: ValidationIssue; rank: number }>()
    for (const error of validate.errors ?? []) {
      if (WRAPPERS.has(error.keyword)) continue
      const issue = issueOf(error, data, fieldPrefix)
      const rank = (error.parentSchema as Record<string, unknown> | undefined)?.['x-code'] && error.keyword !== 'type' ? 0 : error.keyword === 'enum' || error.keyword === 'const' ? 1 : error.keyword === 'type' ? 3 : 2
      const current = best.get(issue.field)
      if (!current || rank < current.rank) best.set(issue.field, { issue, rank })
    }
    const issues = [...best.values()].map(b => b.issue)
    // Never "valid" for a value ajv refused, whatever keywords its errors came from.
    if (issues.length === 0) issues.push({ field: fieldPrefix || '(body)', code: 'INVALID_VALUE', reason: `${fieldPrefix || '(body)'} is not valid` })
    return issues
  }
}
