// The supervisor watch stream of one session and presence (issue 13), over real HTTP and SSE.
import t from 'tap'
import { call, eventually, KEYS, startTestService } from '../support/harness.js'
import { ADMIN, CHANNEL, createSession, openSse } from '../support/sse.js'

const MISSING = '7d2c1b56-43c1-4a8e-9f11-0b8e2a3c9d10'
const SESSIONS = '/engine/api/administration/sessions'

t.test('a watcher sees messages, whispers and admin actions with their UserId, is no consumer, and is listed as presence', async t => {
  const svc = await startTestService(t)
  const s = await createSession(svc.base)
  t.teardown(() => s.stream.close())
  await s.stream.next('crew.status.waiting')
  const watch = (userId: string, headers: Record<string, string> = {}) => openSse(svc.base, 'GET', `${ADMIN}/${s.sessionId}/watch`, { headers: { UserId: userId, ...headers } })
  const w = (await watch('sup-ana')).stream!
  t.teardown(() => w.close())
  await w.next(e => e.event === 'history' && e.data.type === 'session.created')

  const put = await call(svc.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'hello' } })
  t.equal(put.status, 201)
  const user = await w.next(e => e.event === 'history' && e.data.type === 'message.user')
  t.equal(user.data.text, 'hello')
  await w.next(e => e.event === 'history' && e.data.type === 'message.assistant')
  t.ok(w.events.some(e => e.event === 'channel' && e.data.kind === 'event'), 'the live channel events too')
  t.equal((await call(svc.base, 'PUT', `${ADMIN}/${s.sessionId}/whisper`, { headers: { UserId: 'sup-bob' }, body: { text: 'be kind' } })).status, 200)
  const whisper = await w.next(e => e.event === 'history' && e.data.type === 'message.whisper')
  t.match(whisper.data, { userId: 'sup-bob', text: 'be kind' })
  t.notOk(s.stream.events.some(e => JSON.stringify(e.data).includes('be kind')), 'the channel listener never sees the whisper')

  // Presence in the listing; the watcher takes no consumer slot (no attach seen by the channel).
  const second = (await watch('sup-bob')).stream!
  const watchers = async () => (await call(svc.base, 'GET', SESSIONS, { headers: { UserId: 'x' } })).json.data.find((r: any) => r.sessionId === s.sessionId).watchers as string[]
  t.same(await watchers(), ['sup-ana', 'sup-bob'], 'an open watch stream is presence at once')
  t.notOk(s.stream.events.some(e => e.event === 'session.consumer.attached' && e.data.consumerId !== s.consumerId), 'no consumer attached for a watcher')
  second.close()
  t.same(await eventually(watchers, w => w.length < 2), ['sup-ana'], 'a closed watch stream leaves the presence')

  // Resume with Last-Event-ID: only what came after it.
  const resumed = (await watch('sup-ana', { 'Last-Event-ID': whisper.id! })).stream!
  t.teardown(() => resumed.close())
  t.equal((await call(svc.base, 'PUT', `${ADMIN}/${s.sessionId}/pause`, { headers: { UserId: 'sup-bob' } })).status, 200)
  await resumed.next('watch.ready')
  const paused = await resumed.next(e => e.event === 'history')
  t.match(paused.data, { type: 'session.paused', userId: 'sup-bob' })

  // The door.
  t.equal((await openSse(svc.base, 'GET', `${ADMIN}/${MISSING}/watch`, { headers: { UserId: 'a' } })).status, 404)
  t.equal((await openSse(svc.base, 'GET', `${ADMIN}/${s.sessionId}/watch`, { key: KEYS.globex, headers: { UserId: 'a' } })).status, 404)
  t.equal((await openSse(svc.base, 'GET', `${ADMIN}/${s.sessionId}/watch`, {})).json.code, 'USER_ID_REQUIRED')
  t.equal((await openSse(svc.base, 'GET', `${ADMIN}/${s.sessionId}/watch`, { key: KEYS.acmeDialerOnly, headers: { UserId: 'a' } })).status, 403)

  // Destroyed: the watch stream ends.
  t.equal((await call(svc.base, 'DELETE', `${ADMIN}/${s.sessionId}`, { headers: { UserId: 'sup-bob' } })).status, 204)
  await w.next(e => e.event === 'session.gone' || (e.event === 'history' && e.data.type === 'session.destroyed'))
})

t.test('presence is pushed as it changes: on the feed of the same account only, and on the watch stream', async t => {
  const svc = await startTestService(t)
  const s = await createSession(svc.base)
  t.teardown(() => s.stream.close())
  const feed = (await openSse(svc.base, 'GET', `${SESSIONS}/feed`, { headers: { UserId: 'sup-ana' } })).stream!
  t.teardown(() => feed.close())
  const otherFeed = (await openSse(svc.base, 'GET', `${SESSIONS}/feed`, { key: KEYS.globex, headers: { UserId: 'sup-zed' } })).stream!
  t.teardown(() => otherFeed.close())
  await feed.next('feed.ready')
  await otherFeed.next('feed.ready')

  const ana = (await openSse(svc.base, 'GET', `${ADMIN}/${s.sessionId}/watch`, { headers: { UserId: 'sup-ana' } })).stream!
  t.teardown(() => ana.close())
  const ready = await ana.next('watch.ready')
  t.same(ready.data.watchers, ['sup-ana'], 'watch.ready names the watchers')
  const entered = await feed.next('session.presence', 2000)
  t.same(entered.data, { kind: 'presence', sessionId: s.sessionId, watchers: ['sup-ana'] })

  const bob = (await openSse(svc.base, 'GET', `${ADMIN}/${s.sessionId}/watch`, { headers: { UserId: 'sup-bob' } })).stream!
  t.same((await feed.next('session.presence', 2000)).data.watchers, ['sup-ana', 'sup-bob'], 'the feed tells of a second watcher at once')
  t.same((await ana.next('presence', 2000)).data.watchers, ['sup-ana', 'sup-bob'], 'and so does the first watcher\'s own stream')
  // A second tab of the same supervisor changes nothing to tell.
  const bobAgain = (await openSse(svc.base, 'GET', `${ADMIN}/${s.sessionId}/watch`, { headers: { UserId: 'sup-bob' } })).stream!
  await bobAgain.next('watch.ready')
  bobAgain.close()
  bob.close()
  t.same((await feed.next('session.presence', 2000)).data.watchers, ['sup-ana'], 'leaving is told once the last stream of that UserId closes')
  t.same((await ana.next('presence', 2000)).data.watchers, ['sup-ana'])
  t.notOk(otherFeed.events.some(e => e.event === 'session.presence'), "another account's feed hears nothing of it")
})
