// `$match` + a plain `$group` over many documents without holding the event loop: the embedded
// store reads the documents of a match lazily and, for a group whose key is field paths and
// whose accumulators are `$sum` of 1 or of a field, adds them up as it goes, yielding to the loop
// every GROUP_SLICE documents. Reading every matching document into an array and then grouping
// (mingo) would hold the loop for the whole match, seconds for a large batch, while every live
// conversation of the process waits. Any other shape keeps the array path.

/** Documents read between two yields to the loop (a few ms of decoding for contact documents). */
export const GROUP_SLICE = 500

type Path = string[]
interface Plan {
  /** The group key: one field path, an object of field paths, or null (one group). */
  key: { kind: 'null' } | { kind: 'path'; path: Path } | { kind: 'object'; fields: [string, Path][] }
  sums: [string, number | Path][]
}

const fieldPath = (v: unknown): Path | null => (typeof v === 'string' && v.startsWith('$') && !v.startsWith('$$') && v.length > 1 ? v.slice(1).split('.') : null)

/** The plan of a `$group` this module can run, or null for any other shape. */
export function simpleGroup(group: Record<string, unknown>): Plan | null {
  const { _id, ...accumulators } = group
  let key: Plan['key']
  if (_id === null) key = { kind: 'null' }
  else if (fieldPath(_id)) key = { kind: 'path', path: fieldPath(_id)! }
  else if (_id && typeof _id === 'object' && !Array.isArray(_id) && !(_id instanceof Date)) {
    const fields = Object.entries(_id as Record<string, unknown>).map(([name, v]) => [name, fieldPath(v)] as const)
    if (fields.length === 0 || fields.some(([name, p]) => !p || name.startsWith('$'))) return null
    key = { kind: 'object', fields: fields as [string, Path][] }
  } else return null
  const sums: Plan['sums'] = []
  for (const [name, spec] of Object.entries(accumulators)) {
    if (!spec || typeof spec !== 'object' || Object.keys(spec).length !== 1 || !('$sum' in spec)) return null
    const of = (spec as { $sum: unknown }).$sum
    if (typeof of === 'number' && Number.isFinite(of)) sums.push([name, of])
    else if (fieldPath(of)) sums.push([name, fieldPath(of)!])
    else return null
  }
  return { key, sums }
}

/**
 * A value at a dotted path, as mongod's aggregation reads a field path: a path through an array
 * gives the array of its documents' values (elements that are not documents, nested arrays
 * included, or lack the field are left out), and a path ending on an array gives that array.
 */
function valueAt(value: unknown, path: Path, from = 0): unknown {
  if (from === path.length) return value
  if (Array.isArray(value)) {
    const values: unknown[] = []
    for (const element of value) {
      if (element === null || typeof element !== 'object' || Array.isArray(element) || element instanceof Date) continue
      const v = valueAt(element, path, from)
      if (v !== undefined) values.push(v)
    }
    return values
  }
  if (value === null || typeof value !== 'object' || value instanceof Date) return undefined
  return valueAt((value as Record<string, unknown>)[path[from]!], path, from + 1)
}

/** A group key as text: JSON, with what JSON would merge kept apart (a Date and its number, NaN, ±Infinity and null). */
export const keyText = (v: unknown) =>
  JSON.stringify(v, function (this: Record<string, unknown>, name, x) {
    const raw = this[name] // before Date#toJSON
    if (raw instanceof Date) return { $date: raw.getTime() }
    if (typeof x === 'number' && !Number.isFinite(x)) return { $number: String(x) }
    return x === undefined ? null : x
  })

/** Groups `docs` (lazily read) by `plan`, yielding to the loop every GROUP_SLICE documents read. */
export async function groupInSlices<R>(docs: Iterable<Record<string, unknown>>, matches: (doc: any) => boolean, plan: Plan): Promise<R[]> {
  const groups = new Map<string, Record<string, unknown>>()
  let read = 0
  for (const doc of docs) {
    if (++read % GROUP_SLICE === 0) await new Promise(resolve => setImmediate(resolve))
    if (!matches(doc)) continue
    let id: unknown
    if (plan.key.kind === 'null') id = null
    else if (plan.key.kind === 'path') id = valueAt(doc, plan.key.path) ?? null
    else {
      // As mongod: a missing field is left out of the key document.
      const object: Record<string, unknown> = {}
      for (const [name, path] of plan.key.fields) {
        const value = valueAt(doc, path)
        if (value !== undefined) object[name] = value
      }
      id = object
    }
    const text = keyText(id)
    let row = groups.get(text)
    if (!row) {
      row = { _id: id }
      for (const [name] of plan.sums) row[name] = 0
      groups.set(text, row)
    }
    for (const [name, of] of plan.sums) {
      const add = typeof of === 'number' ? of : valueAt(doc, of)
      if (typeof add === 'number') row[name] = (row[name] as number) + add
    }
  }
  return [...groups.values()] as R[]
}
