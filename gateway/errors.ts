// The error envelope every endpoint answers with: { code, message, ...extra } (what an error
// answers is decided by platform/http.ts: an ApiError, or a domain error by its kind). The
// dialer's spec-defined bodies (VALIDATION_FAILED details, CONTACT_LIMIT_EXCEEDED fields) are
// extras. Error bodies echo client values (meta.received), so what is echoed is bounded: the
// error path must answer even for a value nested 100,000 levels deep or a 5 MiB string.

/** Bounds on what an error body may echo. */
export const ECHO_LIMITS = {
  /** Objects/arrays below this depth are replaced by a marker (the envelope itself uses ~4). */
  depth: 12,
  /** Characters kept of one string. */
  string: 1024,
  /** Items kept of one array, keys kept of one object. */
  items: 1000,
  /** Serialized size of the whole body; beyond it only code and message are kept. */
  bytes: 256 * 1024,
}

const TRUNCATED = '[truncated]'

/**
 * A copy of `value` that JSON.stringify can always serialize within the bounds: depth-limited
 * (so the recursion here is bounded too), long strings and lists cut, non-JSON values dropped.
 */
export function boundedCopy(value: unknown, depth = 0): unknown {
  if (value === null || typeof value === 'boolean') return value
  if (typeof value === 'number') return Number.isFinite(value) ? value : null
  if (typeof value === 'string') return value.length > ECHO_LIMITS.string ? `${value.slice(0, ECHO_LIMITS.string)}…[+${value.length - ECHO_LIMITS.string} chars]` : value
  if (typeof value === 'bigint') return value.toString()
  if (typeof value !== 'object') return undefined
  if (depth >= ECHO_LIMITS.depth) return TRUNCATED
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString()
  if (Array.isArray(value)) {
    const out = value.slice(0, ECHO_LIMITS.items).map(item => boundedCopy(item, depth + 1) ?? null)
    if (value.length > ECHO_LIMITS.items) out.push(`[+${value.length - ECHO_LIMITS.items} more]`)
    return out
  }
  const out: Record<string, unknown> = {}
  let kept = 0
  for (const key of Object.keys(value)) {
    if (kept++ >= ECHO_LIMITS.items) break
    const copy = boundedCopy((value as Record<string, unknown>)[key], depth + 1)
    // defineProperty: a client key "__proto__" stays a plain key of the copy.
    if (copy !== undefined) Object.defineProperty(out, key, { value: copy, enumerable: true, writable: true, configurable: true })
  }
  return out
}

/** Last resort when even the bounded body cannot be serialized: a constant, valid envelope. */
export const FALLBACK_ERROR_BODY = '{"code":"INTERNAL","message":"Unexpected server error"}'

/** The serialized error body, always within ECHO_LIMITS.bytes, never throwing. */
export function serializeErrorBody(body: Record<string, unknown>): string {
  try {
    const text = JSON.stringify(boundedCopy(body))
    if (text.length <= ECHO_LIMITS.bytes) return text
    const { code, message } = body
    return JSON.stringify(boundedCopy({ code, message, truncated: true }))
  } catch {
    return FALLBACK_ERROR_BODY
  }
}
