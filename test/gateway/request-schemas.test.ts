// Schema-first routes: every route that publishes a request body in the OpenAPI document has it
// checked before its handler runs. An invalid body is 400 VALIDATION_FAILED listing the problems
// even where the handler would answer 404 (the ids in the paths below exist nowhere), and a body
// the route requires cannot be left out. A contact load is checked by its handler, off the event
// loop, with the load's own codes (INVALID_BODY, NO_CONTACTS). Checks that come first stay first:
// who acts (UserId) on an administration route, the signature of a provider's callback.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { call, startTestService } from '../support/harness.js'

const CONTACT_LOAD = 'POST /dialer/v1/batches/{batchId}/contacts'

/** Twenty arrays deep: not an object for the object bodies, deeper than a free-form value may be. */
const INVALID = JSON.parse('['.repeat(20) + ']'.repeat(20))

t.test('every published request body is validated before its handler', async t => {
  const { base } = await startTestService(t)
  const document = (await call(base, 'GET', '/openapi.json', { key: null })).json
  const withBodies: { method: string; path: string; required: boolean }[] = []
  for (const [path, methods] of Object.entries<Record<string, any>>(document.paths)) {
    for (const [method, operation] of Object.entries(methods)) {
      if (operation.requestBody && operation['x-role']) withBodies.push({ method: method.toUpperCase(), path, required: operation.requestBody.required })
    }
  }
  t.ok(withBodies.length >= 15, `${withBodies.length} routes publish a request body`)
  const concrete = (path: string) => path.replace(/\{crewId\}/g, 'default').replace(/\{[^}]+\}/g, () => randomUUID())
  for (const route of withBodies) {
    const name = `${route.method} ${route.path}`
    const headers = { UserId: 'supervisor-1' }
    const invalid = await call(base, route.method, concrete(route.path), { body: INVALID, headers })
    const absent = await call(base, route.method, concrete(route.path), { headers })
    t.equal(invalid.status, 400, `${name}: an invalid body is 400, not the handler's answer`)
    if (name === CONTACT_LOAD) {
      t.match([invalid.json, absent.json], [{ code: 'INVALID_BODY' }, { code: 'NO_CONTACTS' }], `${name}: the load's own codes`)
      continue
    }
    t.equal(invalid.json?.code, 'VALIDATION_FAILED', name)
    t.ok(invalid.json?.details?.length > 0, `${name}: the problems are listed`)
    if (route.required) t.match(absent.json, { code: 'VALIDATION_FAILED', details: [{ code: 'REQUIRED' }] }, `${name}: the body is required`)
  }
})

t.test('checks that come before the body stay first', async t => {
  const { base } = await startTestService(t)
  const whisper = await call(base, 'PUT', `/engine/api/administration/session/${randomUUID()}/whisper`, { body: INVALID })
  t.match(whisper.json, { code: 'USER_ID_REQUIRED' }, 'administration: who acts is asked first')
  const badSession = await call(base, 'PUT', '/engine/api/administration/session/not-a-uuid/whisper', { body: INVALID, headers: { UserId: 'supervisor-1' } })
  t.match(badSession.json, { code: 'INVALID_SESSION_ID' }, 'then which session')
  const callback = await call(base, 'POST', `/dialer/v1/attempts/${randomUUID()}/outcome`, { key: null, body: INVALID })
  t.equal(callback.status, 401, 'a provider callback: the signature over the raw bytes comes before the body is read')
  const optional = await call(base, 'PUT', `/engine/api/administration/session/${randomUUID()}/pause`, { headers: { UserId: 'supervisor-1' } })
  t.match(optional, { status: 404, json: { code: 'SESSION_NOT_FOUND' } }, 'an optional body may be left out: the handler runs')
})
