// The supervisor session listing (issue 13) over real HTTP: what a supervisor sees of the
// account's sessions, filtered and paged, in one process and through a gateway in front of two
// engine nodes over NATS.
import t from 'tap'
import { call, eventually, KEYS, mongoUrlFor, startTestService } from '../support/harness.js'
import { startNatsServer } from '../support/nats-server.js'
import { ADMIN, CHANNEL, createSession, openSse } from '../support/sse.js'
import { clusterEnv, startProcess, waitHealthy } from '../support/processes.js'

const SESSIONS = '/engine/api/administration/sessions'
const USER = { UserId: 'supervisor-7' }
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))

const list = (base: string, query = '', key: string = KEYS.acme) => call(base, 'GET', `${SESSIONS}${query}`, { key, headers: USER })

/** Polls the listing until `ok` holds (the record is written behind the session). */
async function listed(base: string, query: string, ok: (rows: any[]) => boolean, timeoutMs = 15_000) {
  const until = Date.now() + timeoutMs
  for (;;) {
    const res = await list(base, query)
    if (res.status !== 200) throw new Error(`listing answered ${res.status} ${res.text}`)
    if (ok(res.json.data)) return res.json.data as any[]
    if (Date.now() > until) throw new Error(`listing never matched: ${JSON.stringify(res.json)}`)
    await sleep(50)
  }
}

t.test('one process: live sessions with state, agent and counts; filters; stable cursor paging; another account sees none', async t => {
  const svc = await startTestService(t)
  const a = await createSession(svc.base)
  const b = await createSession(svc.base)
  const c = await createSession(svc.base)
  t.teardown(() => [a, b, c].forEach(s => s.stream.close()))
  await a.stream.next('crew.status.waiting')
  const put = await call(svc.base, 'PUT', `${CHANNEL}/${a.sessionId}/${a.consumerId}`, { body: { message: 'hello' } })
  t.equal(put.status, 201)
  await a.stream.next('assistant.response')
  await a.stream.next('crew.status.waiting')

  const rows = await listed(svc.base, '', rows => rows.length === 3 && rows.some(r => r.sessionId === a.sessionId && r.messages >= 2))
  const ra = rows.find(r => r.sessionId === a.sessionId)
  t.match(ra, { crewId: 'demo', state: 'active', live: true, endTime: null, userMessages: 1 })
  t.ok(ra.assistantMessages >= 1, 'the reply is counted')
  t.ok(ra.age >= 0 && typeof ra.agentId === 'string' && ra.agentId.length > 0)
  const order = rows.map(r => r.startTime)
  t.same(order, [...order].sort((x, y) => y - x), 'newest first')

  // Pause b: the state filter follows.
  t.equal((await call(svc.base, 'PUT', `${ADMIN}/${b.sessionId}/pause`, { headers: USER })).status, 200)
  const paused = await listed(svc.base, '?state=paused', rows => rows.length === 1)
  t.equal(paused[0].sessionId, b.sessionId)
  t.same((await list(svc.base, '?state=live')).json.data.length, 3, 'paused is live')
  t.same((await list(svc.base, '?crewId=nope')).json.data, [], 'crew filter')
  t.same((await list(svc.base, `?agentId=${encodeURIComponent(ra.agentId)}`)).json.data.length, 3, 'agent filter')
  t.same((await list(svc.base, '?agentId=nobody')).json.data, [])

  // Destroyed c: listed as closed (recently), not live.
  t.equal((await call(svc.base, 'DELETE', `${ADMIN}/${c.sessionId}`, { headers: USER })).status, 204)
  const closed = await listed(svc.base, '?state=closed', rows => rows.length === 1)
  t.equal(closed[0].sessionId, c.sessionId)
  t.equal(closed[0].live, false)
  t.equal((await list(svc.base, '?state=live')).json.data.length, 2)
  t.equal((await list(svc.base)).json.data.length, 3, 'recently closed stays in the default listing')

  // Paging: two pages of one and two, no repeat, no gap; a new session does not shift the walk.
  const first = await list(svc.base, '?limit=1')
  t.equal(first.json.data.length, 1)
  t.type(first.json.nextCursor, 'string')
  const d = await createSession(svc.base)
  t.teardown(() => d.stream.close())
  await listed(svc.base, '', rows => rows.length === 4)
  const rest = await list(svc.base, `?limit=5&cursor=${first.json.nextCursor}`)
  t.equal(rest.json.nextCursor, undefined, 'last page')
  const walked = [...first.json.data, ...rest.json.data].map((r: any) => r.sessionId)
  t.same(new Set(walked), new Set([a.sessionId, b.sessionId, c.sessionId]), 'the walk is the three sessions, once each')

  // The door: role, UserId, bad parameters, another account.
  t.equal((await list(svc.base, '', KEYS.globex)).json.data.length, 0, "another account's sessions are not listed")
  t.equal((await list(svc.base, '', KEYS.acmeDialerOnly)).status, 403)
  t.equal((await call(svc.base, 'GET', SESSIONS, {})).json.code, 'USER_ID_REQUIRED')
  t.equal((await call(svc.base, 'GET', SESSIONS, { key: null, headers: USER })).status, 401)
  for (const bad of ['?limit=0', '?limit=501', '?limit=x', '?state=sleeping', '?cursor=garbage', `?crewId=${'x'.repeat(129)}`]) {
    const res = await list(svc.base, bad)
    t.equal(res.status, 400, bad)
    t.equal(res.json.code, 'INVALID_PARAMETER', bad)
  }

  // Published with its query parameters and response schema.
  const doc = (await call(svc.base, 'GET', '/openapi.json')).json
  const op = doc.paths[SESSIONS].get
  t.same(op.parameters.map((p: any) => p.name).sort(), ['UserId', 'agentId', 'crewId', 'cursor', 'limit', 'state'])
  t.ok(doc.components.schemas['supervision.sessions.page'])
})

t.test('two engine nodes over NATS: a gateway lists the sessions of both', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const env = clusterEnv(t, { natsUrl: nats.url, mongoUrl })
  const [p1, p2] = await Promise.all([startProcess(t, 'engine-1', { ...env, ROLE: 'engine' }), startProcess(t, 'engine-2', { ...env, ROLE: 'engine' })])
  const [h1, h2] = await Promise.all([waitHealthy(p1), waitHealthy(p2)])
  const gw = await startTestService(t, { env: { ...env, ROLE: 'gateway', LOG_LEVEL: 'silent' } })
  await sleep(600) // both heartbeats seen by the gateway
  const made = []
  for (let i = 0; i < 6; i++) made.push(await createSession(gw.base))
  t.teardown(() => made.forEach(s => s.stream.close()))
  const ids = new Set(made.map(s => s.sessionId))
  const rows = await listed(gw.base, '?state=live', rows => rows.filter(r => ids.has(r.sessionId)).length === 6, 10_000)
  t.equal(rows.length, 6, 'every session, whichever node owns it')
  t.ok(h1.engineNode && h2.engineNode && h1.engineNode !== h2.engineNode)
  // Paged across both nodes' sessions: 6 rows in pages of 4 and 2.
  const p = await list(gw.base, '?state=live&limit=4')
  const q = await list(gw.base, `?state=live&limit=4&cursor=${p.json.nextCursor}`)
  t.same(new Set([...p.json.data, ...q.json.data].map((r: any) => r.sessionId)), ids)
})

t.test('lifecycle feed: created, paused, transferred, closed as they happen; resumed with Last-Event-ID; only the own account', async t => {
  const svc = await startTestService(t)
  const FEED = `${SESSIONS}/feed`
  const open = (headers: Record<string, string> = {}, key: string = KEYS.acme) => openSse(svc.base, 'GET', FEED, { key, headers: { ...USER, ...headers } })
  const feed = (await open()).stream!
  const other = (await open({}, KEYS.globex)).stream!
  t.teardown(() => [feed, other].forEach(s => s.close()))
  await feed.next('feed.ready')

  const s = await createSession(svc.base)
  t.teardown(() => s.stream.close())
  // On the open feed, as it happens (how soon is the feed's poll, a figure for bench/).
  const created = await feed.next(e => e.event === 'session.created' && e.data.session.sessionId === s.sessionId)
  t.match(created.data, { kind: 'created', session: { crewId: 'demo', state: 'active', live: true } })

  t.equal((await call(svc.base, 'PUT', `${ADMIN}/${s.sessionId}/pause`, { headers: USER })).status, 200)
  const paused = await feed.next(e => e.event === 'session.changed' && e.data.session.state === 'paused')
  t.ok(Number(paused.id) >= Number(created.id), 'ids grow')

  // The feed drops here; what happens meanwhile comes on the resumed feed.
  feed.close()
  t.equal((await call(svc.base, 'PUT', `${ADMIN}/${s.sessionId}/transfer`, { headers: USER, body: { target: 'support' } })).status, 200)
  t.equal((await call(svc.base, 'DELETE', `${ADMIN}/${s.sessionId}`, { headers: USER })).status, 204)
  const resumed = (await open({ 'Last-Event-ID': paused.id! })).stream!
  t.teardown(() => resumed.close())
  const closed = await resumed.next(e => e.event === 'session.closed' && e.data.session.sessionId === s.sessionId)
  t.equal(closed.data.session.live, false)
  t.ok(closed.data.session.transfers >= 1, 'the transfer is in what the resumed feed carries')
  t.equal(closed.data.session.agentId, 'support')

  t.notOk(other.events.some(e => e.event.startsWith('session.')), "another account's feed saw nothing")
  t.equal((await open({ 'Last-Event-ID': 'x' })).status, 400)
  const noUser = await openSse(svc.base, 'GET', FEED, {})
  t.equal(noUser.json.code, 'USER_ID_REQUIRED')
  t.equal((await open({}, KEYS.acmeDialerOnly)).status, 403)
})

t.test('the listing names the customer from the session arguments (first name and address key that holds text)', async t => {
  const svc = await startTestService(t)
  const named = await createSession(svc.base, { body: { arguments: { nombre: 'Ana Ruiz', email: 'ana@example.com', phone: '' } } })
  t.teardown(() => named.stream.close())
  const nobody = await createSession(svc.base, { body: { arguments: { plan: 'gold' } } })
  t.teardown(() => nobody.stream.close())
  const rows = await eventually(
    async () => (await call(svc.base, 'GET', '/engine/api/administration/sessions', { headers: { UserId: 'sup' } })).json.data as any[],
    data => data.length === 2,
  )
  t.same(rows.find(r => r.sessionId === named.sessionId).customer, { name: 'Ana Ruiz', address: 'ana@example.com' })
  t.equal(rows.find(r => r.sessionId === nobody.sessionId).customer, null)
})
