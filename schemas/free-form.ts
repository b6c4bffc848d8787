// Bounds for the free-form values the API accepts (channel `arguments`, tool arguments, tool
// results, contact `customFields`). JSON Schema bounds one level at a time; a free-form value
// needs its whole tree bounded, so one keyword, `x-bounds`, does that: nesting depth, nodes
// (keys + array elements) and an approximate serialized size. The walk is iterative, so a
// value nested deeper than the stack is refused, not overflowed on. Anything accepted can then
// be serialized, persisted and replayed.

export interface FreeFormBounds {
  /** Deepest nesting of objects/arrays, the value itself being depth 1. */
  depth: number
  /** Object keys plus array elements, over the whole tree. */
  nodes: number
  /** Serialized size, approximated from string lengths, keys and scalars (bytes). */
  bytes: number
}

/** Names a client may use as object keys that later become store paths or object properties. */
export const FORBIDDEN_KEYS = new Set(['__proto__', 'constructor', 'prototype'])

/** Why `value` breaks `bounds`, or undefined when it fits. */
export function exceeds(value: unknown, bounds: FreeFormBounds): string | undefined {
  let nodes = 0
  let bytes = 0
  const stack: Array<[unknown, number]> = [[value, 1]]
  while (stack.length > 0) {
    const [current, depth] = stack.pop()!
    if (current === null || typeof current !== 'object') {
      bytes += typeof current === 'string' ? current.length + 2 : 8
      if (bytes > bounds.bytes) return `is larger than ${bounds.bytes} bytes`
      continue
    }
    if (depth > bounds.depth) return `is nested deeper than ${bounds.depth} levels`
    const children = Array.isArray(current) ? current : Object.values(current)
    if (!Array.isArray(current)) {
      for (const key of Object.keys(current)) {
        if (FORBIDDEN_KEYS.has(key)) return `uses the reserved key "${key}"`
        bytes += key.length + 3
      }
    }
    nodes += children.length
    if (nodes > bounds.nodes) return `has more than ${bounds.nodes} keys and elements`
    if (bytes > bounds.bytes) return `is larger than ${bounds.bytes} bytes`
    for (const child of children) stack.push([child, depth + 1])
  }
  return undefined
}

/** A free-form JSON object with its whole tree bounded (`x-bounds`; docs/api.md, "Bounded input"). */
export function freeFormObject(bounds: FreeFormBounds, extra: Record<string, unknown> = {}) {
  return { type: 'object', 'x-bounds': bounds, ...extra } as const
}

/** A free-form JSON value of any type, bounded the same way. */
export function freeFormValue(bounds: FreeFormBounds) {
  return { 'x-bounds': bounds } as const
}

/** Arguments and tool payloads: room for a CRM record, not for a database dump. */
export const CONTEXT_BOUNDS: FreeFormBounds = { depth: 8, nodes: 2_000, bytes: 64 * 1024 }
/** An external tool's final result. */
export const TOOL_RESULT_BOUNDS: FreeFormBounds = { depth: 16, nodes: 10_000, bytes: 256 * 1024 }
