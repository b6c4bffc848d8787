// Update paths and document keys that must never reach a store. Repositories build some paths
// from client-supplied keys (a contact's customFields in merge mode); the schemas refuse bad
// keys at the door, and this guard refuses them again at the store, so no path can walk into
// an object's prototype or be read as operator syntax, whichever caller built it.

const PROTOTYPE_KEYS = new Set(['__proto__', 'constructor', 'prototype'])

export class UnsafeUpdatePathError extends Error {
  override name = 'UnsafeUpdatePathError'
}

const DOT = 46

/**
 * Throws on a path segment that reaches a prototype, or an empty segment (a stray dot). Every
 * path of every update comes here: split only when one of the names occurs in it at all.
 */
export function assertSafePath(path: string): void {
  const suspect =
    path === '' ||
    path.charCodeAt(0) === DOT ||
    path.charCodeAt(path.length - 1) === DOT ||
    path.includes('..') ||
    path.includes('__proto__') ||
    path.includes('constructor') ||
    path.includes('prototype')
  if (!suspect) return
  for (const segment of path.split('.')) {
    if (segment === '' || PROTOTYPE_KEYS.has(segment)) throw new UnsafeUpdatePathError(`Refused update path "${path.slice(0, 200)}"`)
  }
}

/** Checks every path of an update document ({$set: {path: value}, ...}). */
export function assertSafeUpdate(update: Record<string, unknown>): void {
  for (const operator of Object.keys(update)) {
    if (PROTOTYPE_KEYS.has(operator)) throw new UnsafeUpdatePathError(`Refused update operator "${operator}"`)
    const fields = update[operator]
    if (operator.startsWith('$') && fields !== null && typeof fields === 'object' && !Array.isArray(fields)) {
      for (const path of Object.keys(fields)) assertSafePath(path)
    }
  }
}

/** Keys of a document to insert, at every level: none may reach a prototype. */
export function assertSafeDocument(doc: unknown): void {
  const stack: unknown[] = [doc]
  while (stack.length > 0) {
    const value = stack.pop()
    if (value === null || typeof value !== 'object' || value instanceof Date) continue
    if (Array.isArray(value)) {
      stack.push(...value)
      continue
    }
    for (const key of Object.keys(value)) {
      if (PROTOTYPE_KEYS.has(key)) throw new UnsafeUpdatePathError(`Refused document key "${key}"`)
      stack.push((value as Record<string, unknown>)[key])
    }
  }
}

/** Every write of a bulk, checked before any of it is applied. */
export function assertSafeBulk(ops: ReadonlyArray<Record<string, any>>): void {
  for (const op of ops) {
    if ('insertOne' in op) assertSafeDocument(op.insertOne.document)
    else if ('updateOne' in op) assertSafeUpdate(op.updateOne.update)
    else if ('updateMany' in op) assertSafeUpdate(op.updateMany.update)
  }
}
