// Supervisors' feeds and watch streams are bounded like the channel's streams, over real HTTP and
// SSE: an account may hold past its share of the node's supervision streams while places are
// plentiful, is refused past it (429) once they are short, and the node refuses more than it can
// poll for (503), without touching the channel's streams.
import t from 'tap'
import { eventually, KEYS, startTestService } from '../support/harness.js'
import { ADMIN, CHANNEL, createSession, openSse, type SseClient } from '../support/sse.js'

const FEED = '/engine/api/administration/sessions/feed'
const USER = { UserId: 'supervisor-9' }

t.test("a supervisors' account opening feeds and watches past its share gets 429 once places are short, another account still gets the place left, and the node answers 503 once full", async t => {
  // 5 places, each account's share 2 (40 %), short from 4 held (80 %).
  const env = {
    OVERLOAD_MAX_SUPERVISION_STREAMS: '5',
    OVERLOAD_ACCOUNT_STREAMS_PERCENT: '40',
    OVERLOAD_ACCOUNT_STREAMS_FLOOR: '1',
    OVERLOAD_ACCOUNT_STREAMS_SHORT_PERCENT: '80',
    OVERLOAD_RETRY_AFTER_S: '4',
  }
  const { base } = await startTestService(t, { env })
  const open: SseClient[] = []
  t.teardown(() => open.forEach(s => s.close()))
  const keep = <T extends { stream?: SseClient }>(answers: T[]) => {
    for (const a of answers) if (a.stream) open.push(a.stream)
    return answers
  }
  const s = await createSession(base)
  const g = await createSession(base, { key: KEYS.globex })
  open.push(s.stream, g.stream)
  const watch = (sessionId: string, key: string) => openSse(base, 'GET', `${ADMIN}/${sessionId}/watch`, { key, headers: USER })
  const feed = (key: string) => openSse(base, 'GET', FEED, { key, headers: USER })

  // acme: ten at once, feeds and watches alike; its share is 2 of the node's 5, but nothing is
  // short until 4 are held.
  const acme = keep(await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? feed(KEYS.acme) : watch(s.sessionId, KEYS.acme)))))
  t.equal(acme.filter(a => a.status === 200).length, 4, 'acme gets twice its share: the places until they are short')
  const refused = acme.filter(a => a.status !== 200)
  t.equal(refused.length, 6)
  t.ok(refused.every(a => a.status === 429 && a.json?.code === 'ACCOUNT_STREAM_LIMIT' && a.json?.kind === 'supervision' && a.json?.limit === 2), 'the others: 429 ACCOUNT_STREAM_LIMIT')
  t.ok(refused.every(a => a.headers.get('retry-after') === '4'), 'with Retry-After')
  const first = acme.find(a => a.status === 200)!.stream!
  await first.next(e => e.event === 'feed.ready' || e.event === 'watch.ready')

  // globex, below its share, gets the place kept free; then the node is full: 503.
  const globex = keep(await Promise.all([feed(KEYS.globex), watch(g.sessionId, KEYS.globex), feed(KEYS.globex)]))
  t.equal(globex.filter(a => a.status === 200).length, 1, 'globex is served in the place acme could not take')
  const full = globex.filter(a => a.status !== 200)
  t.ok(full.length === 2 && full.every(a => a.status === 503 && a.json?.code === 'OVERLOADED' && a.json?.reason === 'supervision_streams'), 'then 503 OVERLOADED (supervision_streams)')

  // The channel's streams are counted apart: acme still listens.
  const listen = await openSse(base, 'POST', `${CHANNEL}/${s.sessionId}/listen`)
  t.equal(listen.status, 200, 'a listen is not refused for the supervision streams')
  if (listen.stream) open.push(listen.stream)

  // A place comes back when a stream closes: to globex, below its share, not to acme.
  first.close()
  const again = await eventually(() => feed(KEYS.globex), a => a.status === 200)
  t.equal(again.status, 200, 'a feed is served once a watch or feed is gone')
  const acmeAgain = await feed(KEYS.acme)
  if (acmeAgain.stream) open.push(acmeAgain.stream)
  t.equal(acmeAgain.status, 429, 'acme, past its share, is still refused while places are short')
  if (again.stream) open.push(again.stream)
  await again.stream?.next('feed.ready')
})
