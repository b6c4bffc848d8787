// Limits on the channel's streams under concurrent listens, over real HTTP and SSE: a session's
// consumer limit holds however many listens race for it.
import t from 'tap'
import { call, KEYS, startTestService } from '../support/harness.js'
import { CHANNEL, createSession, openSse } from '../support/sse.js'

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
