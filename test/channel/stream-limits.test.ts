// Limits on the channel's streams under concurrent listens, over real HTTP and SSE: a session's
// consumer limit and the process's stream limit hold however many listens race for them, and one
// account's streams cannot take every other account's place (its share; 429 past it).
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

t.test("one account holding its share of the process's streams gets 429 for more, and another account is still served", async t => {
  const env = { OVERLOAD_MAX_STREAMS: '12', OVERLOAD_ACCOUNT_STREAMS_PERCENT: '50', OVERLOAD_ACCOUNT_STREAMS_FLOOR: '1', OVERLOAD_RETRY_AFTER_S: '2' }
  const { base, metricsBase } = await startTestService(t, { env })
  const a = await createSession(base)
  const held: SseClient[] = [a.stream]
  t.teardown(() => held.forEach(s => s.close()))
  // acme opens listens one at a time until it is refused (at most every place of the process).
  let refusal: Awaited<ReturnType<typeof openSse>> | undefined
  for (let i = 0; i < 12 && !refusal; i++) {
    const answer = await openSse(base, 'POST', `${CHANNEL}/${a.sessionId}/listen`)
    if (answer.stream) held.push(answer.stream)
    else refusal = answer
  }
  t.equal(held.length, 6, "acme holds its share: half of the process's 12 streams")
  t.equal(refusal?.status, 429)
  t.match(refusal?.json, { code: 'ACCOUNT_STREAM_LIMIT', limit: 6 })
  t.equal(refusal?.headers.get('retry-after'), '2')
  const create = await openSse(base, 'POST', `${CHANNEL}/demo`, { body: {} })
  t.equal(create.status, 429, 'a new session of acme takes a stream too: refused the same way')
  t.equal(create.json?.code, 'ACCOUNT_STREAM_LIMIT')

  // globex is served as if acme were not there.
  const g = await createSession(base, { key: KEYS.globex })
  held.push(g.stream)
  await g.stream.next('crew.status.waiting')
  t.equal((await call(base, 'PUT', `${CHANNEL}/${g.sessionId}/${g.consumerId}`, { key: KEYS.globex, body: { message: 'served' } })).status, 201)
  t.equal((await g.stream.next('assistant.message', 15_000)).data.text, 'You said: served')

  // acme gets a place back once it lets one go.
  held.pop()!.close() // globex's
  held.pop()!.close() // one of acme's listeners
  const again = await eventually(
    () => openSse(base, 'POST', `${CHANNEL}/${a.sessionId}/listen`),
    answer => answer.status === 200,
  )
  t.equal(again.status, 200, 'a listen of acme is served once one of its streams is gone')
  if (again.stream) held.push(again.stream)
  t.equal(await eventually(() => metric(metricsBase, 'switchboard_sse_streams_open'), n => n === 6), 6)
})
