// Limits on the channel's streams under concurrent listens, over real HTTP and SSE: a session's
// consumer limit and the process's stream limit hold however many listens race for them, and one
// account's streams cannot take every other account's place: one account alone fills the process
// far past its share, but once places are short it is refused (429) while an account below its
// share still gets the places left, and nothing it holds is cut.
import t from 'tap'
import { call, eventually, KEYS, startTestService } from '../support/harness.js'
import { CHANNEL, createSession, openSse, type SseClient } from '../support/sse.js'

/** A gauge or counter of the metrics listener (no labels). */
async function metric(metricsBase: string, name: string) {
  const text = await (await fetch(`${metricsBase}/metrics`)).text()
  return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN)
}

/** `n` listens on the sessions given, all sent at once; answers in the order sent. */
function listenAll(base: string, sessionIds: string[], n: number, key: string = KEYS.acme) {
  return Promise.all(Array.from({ length: n }, (_, i) => openSse(base, 'POST', `${CHANNEL}/${sessionIds[i % sessionIds.length]}/listen`, { key })))
}

t.test('forty listens racing onto one session: sixteen consumers are served, the others are refused at once, and every open stream gets the reply', async t => {
  const { base, metricsBase } = await startTestService(t)
  const s = await createSession(base)
  t.teardown(() => s.stream.close())
  await s.stream.next('crew.status.waiting')
  const answers = await listenAll(base, [s.sessionId], 40)
  const open = answers.filter(a => a.stream).map(a => a.stream!)
  t.teardown(() => open.forEach(o => o.close()))
  const refused = answers.filter(a => !a.stream)
  t.equal(open.length, 15, 'the creator and 15 listeners: the 16 consumers a session may have')
  t.equal(refused.length, 25)
  t.ok(refused.every(a => a.status === 429 && a.json?.code === 'CONSUMER_LIMIT_REACHED'), 'the others get 429 CONSUMER_LIMIT_REACHED')
  t.equal(await metric(metricsBase, 'switchboard_sse_streams_open'), 16, 'no stream is open beyond the limit')

  t.equal((await call(base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'to everyone' } })).status, 201)
  const got = await Promise.all(open.map(o => o.next(e => e.event === 'assistant.message', 15_000).then(e => e.data.text, () => null)))
  t.same(got, open.map(() => 'You said: to everyone'), 'every stream that was opened gets the reply')
})

t.test('listens racing past OVERLOAD_MAX_STREAMS: streams being opened count, so no more than the limit are ever open', async t => {
  const { base, metricsBase } = await startTestService(t, { env: { OVERLOAD_MAX_STREAMS: '12', OVERLOAD_ACCOUNT_STREAMS_PERCENT: '100' } })
  const a = await createSession(base)
  const b = await createSession(base)
  t.teardown(() => [a, b].forEach(s => s.stream.close()))
  const answers = await listenAll(base, [a.sessionId, b.sessionId], 30)
  const open = answers.filter(x => x.stream).map(x => x.stream!)
  t.teardown(() => open.forEach(o => o.close()))
  t.equal(open.length, 10, 'the two creators and ten listeners: twelve streams')
  const refused = answers.filter(x => !x.stream)
  t.ok(refused.every(x => x.status === 503 && x.json?.code === 'OVERLOADED' && x.json?.reason === 'streams'), 'the others get 503 OVERLOADED (streams)')
  t.equal(refused.length, 20)
  t.equal(await metric(metricsBase, 'switchboard_sse_streams_open'), 12)
})

t.test("one account fills the process past its share; another that comes later still opens its share, the first is refused 429 and keeps every stream it holds", async t => {
  // 12 places; each account's share 3 (25 %); places are short from 9 held (75 %).
  const env = {
    OVERLOAD_MAX_STREAMS: '12',
    OVERLOAD_ACCOUNT_STREAMS_PERCENT: '25',
    OVERLOAD_ACCOUNT_STREAMS_FLOOR: '1',
    OVERLOAD_ACCOUNT_STREAMS_SHORT_PERCENT: '75',
    OVERLOAD_RETRY_AFTER_S: '2',
  }
  const { base, metricsBase } = await startTestService(t, { env })
  const held: SseClient[] = []
  t.teardown(() => held.forEach(s => s.close()))

  // acme alone: its session and twelve listens racing for the places. Nothing short: it is
  // admitted far past its share, until 9 of the 12 places are held.
  const a = await createSession(base)
  held.push(a.stream)
  await a.stream.next('crew.status.waiting')
  const answers = await listenAll(base, [a.sessionId], 12)
  const acme = [a.stream, ...answers.filter(x => x.stream).map(x => x.stream!)]
  held.push(...acme.slice(1))
  t.equal(acme.length, 9, 'acme holds 9 streams: three times its share, all the process had before places were short')
  const refused = answers.filter(x => !x.stream)
  t.equal(refused.length, 4)
  t.ok(refused.every(x => x.status === 429 && x.json?.code === 'ACCOUNT_STREAM_LIMIT' && x.json?.kind === 'channel' && x.json?.limit === 3), 'the others: 429 ACCOUNT_STREAM_LIMIT, not 503')
  t.ok(refused.every(x => x.headers.get('retry-after') === '2'), 'with Retry-After')
  const create = await openSse(base, 'POST', `${CHANNEL}/demo`, { body: {} })
  t.equal(create.status, 429, 'a new session of acme takes a stream too: refused the same way')
  t.equal(create.json?.code, 'ACCOUNT_STREAM_LIMIT')
  t.equal(create.headers.get('retry-after'), '2')

  // globex comes now: it opens its share in the places kept for accounts below theirs.
  const g = await createSession(base, { key: KEYS.globex })
  held.push(g.stream)
  await g.stream.next('crew.status.waiting')
  const gListens = await listenAll(base, [g.sessionId], 2, KEYS.globex)
  t.ok(gListens.every(x => x.status === 200), "globex's session and two listens: its share of 3")
  const globex = [g.stream, ...gListens.map(x => x.stream!)]
  held.push(...globex.slice(1))
  const past = await openSse(base, 'POST', `${CHANNEL}/${g.sessionId}/listen`, { key: KEYS.globex })
  if (past.stream) held.push(past.stream)
  t.equal(past.status, 429, 'globex past its share is refused too while places are short')
  t.equal(past.json?.code, 'ACCOUNT_STREAM_LIMIT')
  t.equal(await metric(metricsBase, 'switchboard_sse_streams_open'), 12, 'the process is full: 9 + 3')
  const more = await openSse(base, 'POST', `${CHANNEL}/${a.sessionId}/listen`)
  t.equal(more.status, 429, "acme's new stream: still 429 (its own share), with Retry-After")
  t.equal(more.headers.get('retry-after'), '2')

  // Nothing acme holds was dropped: every one of its 9 streams gets its session's reply, and
  // globex's session is served beside it.
  t.equal((await call(base, 'PUT', `${CHANNEL}/${a.sessionId}/${a.consumerId}`, { body: { message: 'still here' } })).status, 201)
  t.equal((await call(base, 'PUT', `${CHANNEL}/${g.sessionId}/${g.consumerId}`, { key: KEYS.globex, body: { message: 'served' } })).status, 201)
  const got = await Promise.all(acme.map(s => s.next('assistant.message', 15_000).then(e => e.data.text, () => null)))
  t.same(got, acme.map(() => 'You said: still here'), "every one of acme's streams gets the reply")
  t.same(
    await Promise.all(globex.map(s => s.next('assistant.message', 15_000).then(e => e.data.text, () => null))),
    globex.map(() => 'You said: served'),
  )

  // A place acme lets go is not acme's again while places are short: it is kept for the others.
  acme.pop()!.close()
  t.equal(await eventually(() => metric(metricsBase, 'switchboard_sse_streams_open'), n => n === 11), 11)
  const back = await openSse(base, 'POST', `${CHANNEL}/${a.sessionId}/listen`)
  if (back.stream) held.push(back.stream)
  t.equal(back.status, 429, 'acme is still refused with 11 of 12 places held')

  // Once globex leaves and places are plentiful again, acme is admitted past its share as before.
  globex.forEach(s => s.close())
  const again = await eventually(
    () => openSse(base, 'POST', `${CHANNEL}/${a.sessionId}/listen`),
    answer => answer.status === 200,
  )
  t.equal(again.status, 200, 'a listen of acme is served once fewer than 9 places are held')
  if (again.stream) held.push(again.stream)
  t.equal(await eventually(() => metric(metricsBase, 'switchboard_sse_streams_open'), n => n === 9), 9)
})
