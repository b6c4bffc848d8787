// How the embedded store keeps the documents of a JSON collection (CollectionOptions.json): JSON
// text, as lmdb-js's own `json` encoding writes it, except that a Date at the top level of a
// document (the field a TTL index expires it by) is written as {"$date": ms} and read back as a
// Date, so such a collection can expire like any other. Deeper Dates become strings, as
// JSON.stringify makes them. Text written before (plain JSON) reads the same.

const DATE = '$date'

const isDateBox = (value: unknown): value is { $date: number } =>
  value !== null && typeof value === 'object' && typeof (value as Record<string, unknown>)[DATE] === 'number' && Object.keys(value).length === 1

const utf8 = (bytes: Uint8Array, end: number): string => (Buffer.prototype as unknown as { utf8Slice(this: Uint8Array, start: number, end: number): string }).utf8Slice.call(bytes, 0, end)

export const jsonDocuments = {
  encode(doc: Record<string, unknown>): string {
    let boxed: Record<string, unknown> | undefined
    for (const key in doc) {
      const value = doc[key]
      if (value instanceof Date) (boxed ??= { ...doc })[key] = { [DATE]: value.getTime() }
    }
    return JSON.stringify(boxed ?? doc)
  },
  /** `size`: lmdb-js passes the value's length when `bytes` is a reused buffer (an object otherwise). */
  decode(bytes: Uint8Array, size?: unknown): Record<string, unknown> {
    const doc = JSON.parse(utf8(bytes, typeof size === 'number' ? size : bytes.length)) as Record<string, unknown>
    for (const key in doc) {
      const value = doc[key]
      if (isDateBox(value)) doc[key] = new Date(value[DATE])
    }
    return doc
  },
}
