// Query-string parameters with the 400 every endpoint gives for a bad one (naming it).
import { ApiError } from '../platform/http.js'

export const invalidParameter = (parameter: string, message: string) =>
  new ApiError(400, 'INVALID_PARAMETER', message, { parameter })

export function intParam(
  query: URLSearchParams,
  name: string,
  options: { min?: number; max?: number; fallback?: number; required?: boolean } = {},
): number {
  const raw = query.get(name)
  if (raw === null || raw === '') {
    if (options.required || options.fallback === undefined) throw invalidParameter(name, `${name} is required`)
    return options.fallback
  }
  if (!/^-?\d+$/.test(raw)) throw invalidParameter(name, `${name} must be an integer`)
  const value = Number(raw)
  if (options.min !== undefined && value < options.min) throw invalidParameter(name, `${name} must be at least ${options.min}`)
  if (options.max !== undefined && value > options.max) throw invalidParameter(name, `${name} must be at most ${options.max}`)
  return value
}

export function enumParam<T extends string>(query: URLSearchParams, name: string, values: readonly T[]): T | undefined {
  const raw = query.get(name)
  if (raw === null || raw === '') return undefined
  if (!values.includes(raw as T)) throw invalidParameter(name, `${name} must be one of ${values.join(', ')}`)
  return raw as T
}
