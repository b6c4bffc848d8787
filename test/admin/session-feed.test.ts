// The supervisors' lifecycle feed under load and skew, over real HTTP and SSE: it keeps
// announcing sessions whatever the number of changes in its window, and a change that lands
// behind what it already sent (a late write, a node whose clock runs ahead) still reaches it.
import t from 'tap'
import { call, eventually, startTestService, type StoreKind } from '../support/harness.js'
import { createSession, openSse, type SseClient } from '../support/sse.js'

const SESSIONS = '/engine/api/administration/sessions'
const FEED = `${SESSIONS}/feed`
const USER = { UserId: 'supervisor-3' }

/** Ids of the sessions the feed announced as created so far. */
const created = (feed: SseClient) => new Set(feed.events.filter(e => e.event === 'session.created').map(e => e.data.session.sessionId as string))

/** Waits (generously) until the feed announced every one of `ids`; answers those it did. */
async function announced(feed: SseClient, ids: string[]) {
  const seen = await eventually(async () => created(feed), seen => ids.every(id => seen.has(id)), 20_000)
  return ids.filter(id => seen.has(id))
}

for (const store of ['lmdb', 'mongo'] as const) {
  t.test(`${store}: a busy account's feed announces every session of a burst larger than one read, and the sessions after it`, async t => {
    // Four records per read, and a window long enough that the whole burst stays in it: the
    // shape of a thousand-row read facing more than a thousand changes within two seconds.
    const env = { SUPERVISION_FEED_BATCH: '4', SUPERVISION_FEED_LAG_MS: '60000' }
    const svc = await startTestService(t, { env, store: store === 'mongo' ? ('mongo' as StoreKind) : undefined })
    t.equal(svc.service.platform.store.kind, store)
    const feed = (await openSse(svc.base, 'GET', FEED, { headers: USER })).stream!
    const sessions: SseClient[] = []
    t.teardown(() => [feed, ...sessions].forEach(s => s.close()))
    await feed.next('feed.ready')

    const burst: string[] = []
    for (let i = 0; i < 10; i++) {
      const s = await createSession(svc.base)
      sessions.push(s.stream)
      burst.push(s.sessionId)
    }
    t.same(await announced(feed, burst), burst, 'every session of the burst is announced')

    const later = await createSession(svc.base)
    sessions.push(later.stream)
    t.same(await announced(feed, [later.sessionId]), [later.sessionId], 'and a session created after it')
    const ids = feed.events.filter(e => e.event.startsWith('session.')).map(e => Number(e.id))
    t.same(ids, [...ids].sort((a, b) => a - b), 'ids never go back')
  })
}

t.test('a change landing behind what the feed already sent (a late write, a node whose clock runs ahead) still reaches it', async t => {
  // One process: the clock of the session that writes ahead is the feed's too, for as long as
  // that write takes. A window of 5 s leaves the feed's reads that long to pass it.
  let skew = 0
  const svc = await startTestService(t, { clock: { now: () => Date.now() + skew }, env: { SUPERVISION_FEED_LAG_MS: '5000' } })
  const feed = (await openSse(svc.base, 'GET', FEED, { headers: USER })).stream!
  const sessions: SseClient[] = []
  t.teardown(() => [feed, ...sessions].forEach(s => s.close()))
  await feed.next('feed.ready')

  // A session recorded by a clock a minute ahead: the feed's position moves a minute ahead.
  skew = 60_000
  const ahead = await createSession(svc.base)
  sessions.push(ahead.stream)
  await eventually(
    () => call(svc.base, 'GET', SESSIONS, { headers: USER }),
    res => res.json?.data?.some((r: any) => r.sessionId === ahead.sessionId),
  )
  skew = 0
  t.same(await announced(feed, [ahead.sessionId]), [ahead.sessionId])
  const seenAhead = feed.events.find(e => e.event === 'session.created' && e.data.session.sessionId === ahead.sessionId)!
  t.ok(Number(seenAhead.id) > Date.now() + 30_000, 'announced with its time, ahead of this clock')

  // On time: this session's change carries a time the feed has already passed.
  const behind = await createSession(svc.base)
  sessions.push(behind.stream)
  t.same(await announced(feed, [behind.sessionId]), [behind.sessionId], 'announced all the same')
})
