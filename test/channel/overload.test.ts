// Overload is answered, not queued: past what the process can serve, new sessions, streams and
// messages get 503 OVERLOADED with Retry-After at once, and the work already accepted goes on.
import t from 'tap'
import { call, eventually, startTestService } from '../support/harness.js'
import { CHANNEL, createSession, openSse } from '../support/sse.js'
import { crewsFile } from '../engine/fixtures/crews.js'

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))

/** A refusal counter from the metrics listener (METRICS_PORT; /metrics is not on the API port). */
async function counter(metricsBase: string, reason: string) {
  const text = await (await fetch(`${metricsBase}/metrics`)).text()
  return Number(new RegExp(`^switchboard_overload_refused_total\\{reason="${reason}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0)
}

t.test('open streams past OVERLOAD_MAX_STREAMS: new sessions and listens get 503 with Retry-After', async t => {
  const { base, metricsBase } = await startTestService(t, { env: { OVERLOAD_MAX_STREAMS: '2', OVERLOAD_RETRY_AFTER_S: '3' } })
  const a = await createSession(base)
  const b = await createSession(base)
  const refused = await openSse(base, 'POST', `${CHANNEL}/demo`, { body: {} })
  t.equal(refused.status, 503)
  t.match(refused.json, { code: 'OVERLOADED', reason: 'streams' })
  t.equal(refused.headers.get('retry-after'), '3')
  const listen = await openSse(base, 'POST', `${CHANNEL}/${a.sessionId}/listen`)
  t.equal(listen.status, 503, 'a new stream of an existing session too')
  t.equal(await counter(metricsBase, 'streams'), 2)
  // The streams already open are served as before.
  t.equal((await call(base, 'PUT', `${CHANNEL}/${a.sessionId}/${a.consumerId}`, { body: { message: 'still served' } })).status, 201)
  t.equal((await a.stream.next('assistant.message')).data.text, 'You said: still served')
  // A place is freed when a stream ends.
  t.equal((await call(base, 'DELETE', `${CHANNEL}/${b.sessionId}`, { body: {} })).status, 201)
  await b.stream.done
  const c = await createSession(base)
  t.ok(c.sessionId, 'a new session once a stream is gone')
  for (const s of [a, c]) s.stream.close()
})

t.test('turns in flight past ENGINE_MAX_TURNS_IN_FLIGHT: a message that would start a turn gets 503; one for a busy session is taken', async t => {
  const crews = crewsFile({ patchDemo: { assistant: { provider: 'scripted', chunkDelayMs: 120, fallback: 'one two three four' } } })
  const { base } = await startTestService(t, { env: { ENGINE_MAX_TURNS_IN_FLIGHT: '1', CREWS_FILE: crews } })
  const a = await createSession(base)
  const b = await createSession(base)
  await a.stream.next('crew.status.waiting')
  await b.stream.next('crew.status.waiting')
  t.equal((await call(base, 'PUT', `${CHANNEL}/${a.sessionId}/${a.consumerId}`, { body: { message: 'first' } })).status, 201)
  await a.stream.next('crew.status.writing')
  const refused = await call(base, 'PUT', `${CHANNEL}/${b.sessionId}/${b.consumerId}`, { body: { message: 'refused' } })
  t.equal(refused.status, 503)
  t.match(refused.json, { code: 'OVERLOADED', reason: 'turns' })
  t.equal(refused.headers.get('retry-after'), '1')
  t.equal((await call(base, 'PUT', `${CHANNEL}/${a.sessionId}/${a.consumerId}`, { body: { message: 'while busy' } })).status, 201, 'a session already in a turn takes more messages')
  // Nothing of the refused message was recorded; once the turn is done, B is served.
  for (let i = 0; i < 2; i++) await a.stream.next('assistant.message', 5000)
  await a.stream.next(e => e.event === 'crew.status.waiting' && a.stream.events.filter(x => x.event === 'assistant.message').length === 2)
  t.equal((await call(base, 'PUT', `${CHANNEL}/${b.sessionId}/${b.consumerId}`, { body: { message: 'now' } })).status, 201)
  await b.stream.next('assistant.message', 5000)
  const history = await call(base, 'GET', `/engine/api/administration/session/${b.sessionId}/history`, { headers: { UserId: 'sup' } })
  t.same(history.json.data.filter((e: any) => e.type === 'message.user').map((e: any) => e.text), ['now'])
  for (const s of [a, b]) s.stream.close()
})

t.test('an event loop past OVERLOAD_LOOP_DELAY_MS refuses new work at once, and takes it again when it recovers', async t => {
  const { base, metricsBase } = await startTestService(t, { env: { OVERLOAD_LOOP_DELAY_MS: '100' } })
  const a = await createSession(base)
  await a.stream.next('crew.status.waiting')
  let refused: Awaited<ReturnType<typeof call>> | null = null
  for (let attempt = 0; attempt < 5 && !refused; attempt++) {
    // A stall of this process's event loop (the service runs in it).
    const until = performance.now() + 400
    while (performance.now() < until) {}
    const answer = await call(base, 'PUT', `${CHANNEL}/${a.sessionId}/${a.consumerId}`, { body: { message: `during ${attempt}` } })
    if (answer.status === 503) refused = answer
    else await a.stream.next(e => e.event === 'assistant.message' && e.data.text === `You said: during ${attempt}`)
  }
  t.ok(refused, 'a message right after a stall is refused')
  t.match(refused!.json, { code: 'OVERLOADED', reason: 'loop_delay' })
  t.ok(await counter(metricsBase, 'loop_delay') >= 1)
  // Refused messages are not recorded: asked again until the loop is back.
  const recovered = () => call(base, 'PUT', `${CHANNEL}/${a.sessionId}/${a.consumerId}`, { body: { message: 'recovered' } })
  t.equal((await eventually(recovered, r => r.status !== 503)).status, 201, 'served again once the loop is back')
  t.equal((await a.stream.next(e => e.event === 'assistant.message' && e.data.text === 'You said: recovered')).data.text, 'You said: recovered')
  // The stream stayed open and in order throughout.
  const ids = a.stream.events.filter(e => e.event !== 'hearthbeat').map(e => Number(e.id))
  t.same(ids, ids.map((_, i) => i + 1))
  a.stream.close()

})

t.test('an event loop busy past OVERLOAD_LOOP_BUSY_PERCENT (never late) refuses new messages, and takes them again when it is not', async t => {
  const { base, metricsBase } = await startTestService(t, { env: { OVERLOAD_LOOP_BUSY_PERCENT: '60', OVERLOAD_LOOP_DELAY_MS: '0' } })
  const a = await createSession(base)
  await a.stream.next('crew.status.waiting')
  // Saturated, not late: 8 ms of work every 10 ms (a loop full of short callbacks keeps its timers
  // nearly on time while work queues behind them).
  let spinning = true
  const spin = () => {
    if (!spinning) return
    const until = performance.now() + 8
    while (performance.now() < until) {}
    setTimeout(spin, 2)
  }
  spin()
  await sleep(800) // two windows of 250 ms past the limit
  const refused = await call(base, 'PUT', `${CHANNEL}/${a.sessionId}/${a.consumerId}`, { body: { message: 'while busy' } })
  spinning = false
  t.equal(refused.status, 503, refused.text)
  t.match(refused.json, { code: 'OVERLOADED', reason: 'loop_busy' })
  t.equal(refused.headers.get('retry-after'), '1')
  t.ok((await counter(metricsBase, 'loop_busy')) >= 1)
  // Refused messages are not recorded: asked again until the loop is not busy.
  const recovered = () => call(base, 'PUT', `${CHANNEL}/${a.sessionId}/${a.consumerId}`, { body: { message: 'recovered' } })
  t.equal((await eventually(recovered, r => r.status !== 503)).status, 201, 'served again once the loop is not busy')
  await a.stream.next(e => e.event === 'assistant.message' && e.data.text === 'You said: recovered')
  const history = await call(base, 'GET', `/engine/api/administration/session/${a.sessionId}/history`, { headers: { UserId: 'sup' } })
  t.same(history.json.data.filter((e: any) => e.type === 'message.user').map((e: any) => e.text), ['recovered'], 'the refused message was not recorded')
  a.stream.close()
})
