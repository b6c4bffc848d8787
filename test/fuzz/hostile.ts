// What the fuzz suite sends: fast-check arbitraries of hostile requests, built from the
// operations of the published /openapi.json so every route is reached, the SSE routes, the
// signed upload and the webhook callback included. Each request is plain data (method, raw
// path, headers, raw body), so a failing case prints as something one can replay with curl.
import fc from 'fast-check'

export interface Operation {
  method: string
  /** OpenAPI path template: /dialer/v1/batches/{batchId} */
  template: string
  params: string[]
  query: string[]
  hasBody: boolean
  stream: boolean
}

export interface FuzzRequest {
  operation: string
  method: string
  path: string
  headers: Record<string, string>
  body?: string
  /** Send the body in pieces with Transfer-Encoding: chunked. */
  chunked: boolean
  /** The request names another account's resource with its own key: it must not succeed. */
  crossAccount: boolean
}

/** Identifiers the suite created before fuzzing, by path parameter name. */
export interface Fixtures {
  /** Account A's resources (the key mostly used). */
  own: Record<string, string>
  /** Account B's resources, reached with A's key in cross-account cases. */
  foreign: Record<string, string>
  keys: { own: string; other: string; dialerOnly: string }
}

/** Path segments no handler should trip over (raw: some are deliberately bad percent-encoding). */
const HOSTILE_SEGMENTS = [
  '%E0%A4%A', // truncated UTF-8 sequence
  '%', // lone percent
  '%zz',
  '%ED%A0%80', // lone surrogate, percent-encoded
  '%00',
  '%2e%2e%2f%2e%2e%2fetc%2fpasswd',
  '__proto__',
  'constructor',
  '$where',
  'a.b',
  '-0',
  '9007199254740993',
  '1e309',
  'x'.repeat(5000),
  '%F0%9F%98%80',
  '00000000-0000-0000-0000-000000000000',
]

const NUMBER_EDGES = ['9007199254740992', '9007199254740993', '1e309', '-1e309', '-0', '0.0000001', 'NaN', '-1', '1.5', '']

/** Raw JSON texts JSON.stringify cannot produce: duplicate keys, 1e309, escapes of lone surrogates, NUL. */
const RAW_TEXTS = [
  '{"a":1,"a":2}',
  '{"__proto__":{"polluted":1}}',
  '{"constructor":{"prototype":{"polluted":1}}}',
  '[1e309]',
  '{"n":-0}',
  '"\\ud800"',
  '{"text":"\\u0000"}',
  '{"name":"\\udfff\\ud800"}',
  '',
  'null',
  'true',
  '{',
  '{"a":',
  '\u0000',
  '{"a":1}garbage',
]

const deepText = (depth: number, open: string, close: string, inner = '1') => open.repeat(depth) + inner + close.repeat(depth)

/** Values that replace a field of a good body, or a whole body. */
const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, true, 0, -1, 2 ** 53, Number.MAX_VALUE, 0.1, '', ' ', '\u0000', '\ud800', '+34600000000', '💥'.repeat(1000)),
  fc.string({ maxLength: 50 }),
  fc.string({ unit: 'binary', maxLength: 50 }),
  fc.integer().map(n => 'x'.repeat(Math.abs(n) % 200_000)),
  fc.array(fc.jsonValue({ maxDepth: 3 }), { maxLength: 50 }),
  fc.integer({ min: 1, max: 3000 }).map(n => Array.from({ length: n }, (_, i) => ({ i }))),
  fc.dictionary(fc.constantFrom('__proto__', 'constructor', 'prototype', '$set', 'a.b', '', 'x'), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 5 }),
  fc.integer({ min: 10, max: 200 }).map(depth => {
    let value: unknown = 'leaf'
    for (let i = 0; i < depth; i++) value = { d: value }
    return value
  }),
  fc.jsonValue({ maxDepth: 4 }),
)

/** A body of a route whose schema is known: good bodies to mutate one field at a time. */
const GOOD_BODIES: Array<[RegExp, Record<string, unknown>]> = [
  [/^post \/dialer\/v1\/batches$/, { name: 'Fuzz', channel: 'phone', duplicateStrategy: 'merge' }],
  [/contacts$/, { identifier: 'f1', name: 'Ana', addresses: [{ address: '34600000001', type: 'phone', priority: 1 }], customFields: { plan: 'gold' } }],
  [/blocked-addresses$/, { address: '34600000001', addressType: 'phone', reason: 'fuzz' }],
  [/upload-url$/, { fileName: 'f.csv', fileType: 'text/csv' }],
  [/outcome$/, { outcome: 'answered' }],
  [/reschedule$/, { scheduledAt: new Date(Date.now() + 86_400_000).toISOString() }],
  [/eventstream\/\{crewId\}$/, { arguments: { name: 'Ana' }, outbound: { type: 'static', parameters: { text: 'Hola' } } }],
  [/eventstream\/\{sessionId\}\/\{consumerId\}$/, { message: 'hola' }],
  [/^delete .*eventstream\/\{sessionId\}$/, { reason: 'user_closed' }],
  [/append$/, { context: [{ author: 'user', text: 'hola' }] }],
  [/override$/, { context: [{ author: 'user', text: 'hola' }], arguments: { a: 1 } }],
  [/whisper$|impersonate$/, { text: 'psst' }],
  [/toolinject$/, { tool: 'echo', args: { text: 'hola' } }],
  [/transfer$/, { target: 'billing' }],
  [/pause$/, { reason: 'fuzz' }],
  [/external\/\{correlationUUID\}$/, { status: 'ok' }],
]

function goodBody(op: Operation): Record<string, unknown> {
  const key = `${op.method} ${op.template}`
  return structuredClone(GOOD_BODIES.find(([pattern]) => pattern.test(key))?.[1] ?? {})
}

const MiB = 1024 * 1024

/**
 * Bodies as large as MAX_BODY_BYTES (5 MiB) allows, just under and just over it, in the shapes
 * that cost a parser and a validator most: one long string, a million numbers, a million empty
 * objects, hundreds of thousands of keys.
 */
const largeBodies = new Map<string, string>() // built once each: the generator runs per request
const largeBody: fc.Arbitrary<string> = fc
  .tuple(fc.constantFrom('string', 'numbers', 'objects', 'keys'), fc.constantFrom(MiB, 5 * MiB - 64, 5 * MiB + 64))
  .map(([shape, size]) => {
    const key = `${shape} ${size}`
    if (!largeBodies.has(key)) largeBodies.set(key, buildLargeBody(shape, size))
    return largeBodies.get(key)!
  })

function buildLargeBody(shape: string, size: number): string {
  switch (shape) {
    case 'string':
      return `{"message":"${'x'.repeat(size - 14)}"}`
    case 'numbers':
      return `[${'1,'.repeat(Math.floor(size / 2) - 1)}1]`
    case 'objects':
      return `{"context":[${'{},'.repeat(Math.floor(size / 3) - 5)}{}]}`
    default: {
      const keys: string[] = []
      for (let i = 0, bytes = 2; bytes < size; i++) bytes += (keys[i] = `"k${i}":1`).length + 1
      return `{${keys.join(',')}}`
    }
  }
}

const bodyFor = (op: Operation): fc.Arbitrary<{ text: string | undefined; contentType: string | undefined }> => {
  const json = (value: unknown) => ({ text: JSON.stringify(value), contentType: 'application/json' as string | undefined })
  const good = goodBody(op)
  const fields = Object.keys(good)
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant(json(good)) },
    {
      weight: 5,
      arbitrary: fc.tuple(fc.constantFrom(...(fields.length ? fields : ['extra'])), hostileValue).map(([field, value]) => json({ ...good, [field]: value })),
    },
    { weight: 2, arbitrary: hostileValue.map(json) },
    { weight: 2, arbitrary: fc.constantFrom(...RAW_TEXTS).map(text => ({ text, contentType: 'application/json' as string | undefined })) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(fc.integer({ min: 50, max: 120_000 }), fc.constantFrom<[string, string]>(['[', ']'], ['{"a":', '}']))
        .map(([depth, [open, close]]) => ({ text: deepText(depth, open, close), contentType: 'application/json' as string | undefined })),
    },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(undefined, 'text/plain', 'application/x-www-form-urlencoded', 'text/csv', 'application/json; charset=latin1', '')
        .map(contentType => ({ text: JSON.stringify(good), contentType })),
    },
    { weight: 1, arbitrary: largeBody.map(text => ({ text, contentType: 'application/json' as string | undefined })) },
    { weight: 1, arbitrary: fc.constant({ text: undefined, contentType: undefined }) },
  )
}

const queryValue = fc.oneof(
  fc.constantFrom(...NUMBER_EDGES),
  fc.constantFrom('%E0%A4%A', '%', 'Asia%2FKolkata', 'Mars%2FOlympus', 'day', 'week', 'x'.repeat(3000)),
  fc.integer({ min: -5, max: 2_000_000_000_000 }).map(String),
)

/** One hostile request for `op`. */
export function requestFor(op: Operation, fixtures: Fixtures): fc.Arbitrary<FuzzRequest> {
  // Generated, not random: a seed replays the same requests.
  const known = (id: string | undefined, foreign: boolean) => (id ? fc.constant({ value: id, foreign }) : fc.uuid().map(value => ({ value, foreign: false })))
  const param = (name: string) =>
    fc.oneof(
      { weight: 6, arbitrary: known(fixtures.own[name], false) },
      { weight: 2, arbitrary: known(fixtures.foreign[name], true) },
      { weight: 3, arbitrary: fc.constantFrom(...HOSTILE_SEGMENTS).map(value => ({ value, foreign: false })) },
    )
  const key = fc.oneof(
    { weight: 8, arbitrary: fc.constant<string | undefined>(fixtures.keys.own) },
    fc.constant<string | undefined>(fixtures.keys.dialerOnly),
    fc.constant<string | undefined>(undefined),
    fc.constantFrom<string | undefined>('wrong-key-000000000000000', '', ' ', 'x'.repeat(5000), `${fixtures.keys.own}\u00e9`),
  )
  const headerExtras = fc.record(
    {
      'last-event-id': fc.constantFrom('1', '0', '-1', '9007199254740993', '1e309', 'abc', ' 5 ', 'x'.repeat(500)),
      'idempotency-key': fc.constantFrom('k1', '', ' ', 'x'.repeat(256), 'ñandú', 'fuzz-key-1'),
      userid: fc.constantFrom('supervisor-1', '', ' ', 'x'.repeat(300), 'a\tb'),
      // Said of a body that is not compressed.
      'content-encoding': fc.constantFrom('gzip', 'br', 'identity'),
    },
    { requiredKeys: [] },
  )
  return fc
    .record({
      params: fc.tuple(...op.params.map(param)),
      query: fc.array(fc.tuple(fc.constantFrom(...(op.query.length ? op.query : ['limit'])), queryValue), { maxLength: 6 }),
      key,
      userId: fc.boolean(),
      extras: headerExtras,
      body: op.hasBody || op.method !== 'get' ? bodyFor(op) : fc.constant({ text: undefined, contentType: undefined }),
      chunked: fc.boolean(),
    })
    .map(({ params, query, key, userId, extras, body, chunked }) => {
      let path = op.template
      op.params.forEach((name, i) => (path = path.replace(`{${name}}`, params[i]!.value)))
      if (query.length) path += `?${query.map(([k, v]) => `${k}=${v}`).join('&')}`
      const headers: Record<string, string> = { ...extras }
      if (key !== undefined) headers.apikey = key
      if (userId && !('userid' in extras)) headers.userid = 'supervisor-1'
      if (body.contentType !== undefined) headers['content-type'] = body.contentType
      return {
        operation: `${op.method.toUpperCase()} ${op.template}`,
        method: op.method.toUpperCase(),
        path,
        headers,
        body: body.text,
        chunked: chunked && body.text !== undefined,
        crossAccount: key === fixtures.keys.own && params.some(p => p.foreign),
      }
    })
}

/** Operations of an OpenAPI document (3.1, as /openapi.json publishes it). */
export function operationsOf(doc: any): Operation[] {
  const ops: Operation[] = []
  for (const [template, item] of Object.entries<any>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(item)) {
      if (!['get', 'post', 'put', 'delete', 'patch'].includes(method)) continue
      const parameters: any[] = [...(item.parameters ?? []), ...(op.parameters ?? [])]
      ops.push({
        method,
        template,
        params: [...template.matchAll(/\{([^}]+)\}/g)].map(m => m[1]!),
        query: parameters.filter(p => p.in === 'query').map(p => p.name),
        hasBody: !!op.requestBody,
        stream: Object.values<any>(op.responses ?? {}).some(r => r?.content?.['text/event-stream']) || /eventstream|listen|watch|feed/.test(template),
      })
    }
  }
  return ops
}
