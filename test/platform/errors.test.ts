// Domain errors carry a kind, a stable code and the fields clients see; the gateway turns a kind
// into its HTTP status in one table (platform/http.ts), Retry-After from the error's own hint.
import t from 'tap'
import { domainError, ERROR_KINDS, Internal, Invalid, LimitReached, NotFound, ShuttingDown, Unavailable } from '../../platform/errors.js'
import { ApiError, HTTP_STATUS, httpError } from '../../platform/http.js'

t.test('every kind has one HTTP status, and a rebuilt error is of its kind', async t => {
  for (const kind of ERROR_KINDS) {
    t.type(HTTP_STATUS[kind], 'number', `${kind} has a status`)
    const rebuilt = domainError(kind, 'SOME_CODE', 'said', { a: 1 }, { retryAfterSeconds: 2 })
    t.equal(rebuilt.kind, kind)
    t.same([rebuilt.code, rebuilt.message, rebuilt.extra, rebuilt.retryAfterSeconds], ['SOME_CODE', 'said', { a: 1 }, 2])
  }
  t.equal(new Set(Object.values(HTTP_STATUS)).size, ERROR_KINDS.length, 'no two kinds share a status')
})

t.test('the HTTP answer of an error', async t => {
  const invalid = httpError(new Invalid('VALIDATION_FAILED', 'bad', { details: [{ field: 'x' }] }))!
  t.same([invalid.status, invalid.body(), invalid.headers], [400, { code: 'VALIDATION_FAILED', message: 'bad', details: [{ field: 'x' }] }, {}])
  const full = httpError(new LimitReached('SESSION_LIMIT_REACHED', 'full', { limit: 3 }, { retryAfterSeconds: 7 }))!
  t.same([full.status, full.body(), full.headers], [429, { code: 'SESSION_LIMIT_REACHED', message: 'full', limit: 3 }, { 'Retry-After': '7' }])
  const stopping = httpError(new ShuttingDown('going away', { retryAfterSeconds: 1 }))!
  t.same([stopping.status, stopping.code, stopping.headers], [503, 'SHUTTING_DOWN', { 'Retry-After': '1' }])
  t.ok(new ShuttingDown('x') instanceof Unavailable, 'shutting down is a kind of unavailable')
  t.equal(httpError(new NotFound('SESSION_NOT_FOUND', 'gone'))!.status, 404)
  t.equal(httpError(new Internal('INTERNAL', 'Unexpected engine error'))!.status, 500)
  const edge = new ApiError(431, 'HEADERS_TOO_LARGE', 'big')
  t.equal(httpError(edge), edge, 'an ApiError is already an answer')
  t.equal(httpError(new Error('bug')), undefined, 'anything else is a fault')
})
