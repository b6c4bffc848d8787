// Reconnection: Last-Event-ID resumption from the session's event log, the gap notice, takeover,
// reconnect_required on shutdown, and slow consumers dropped without slowing anyone else.
import { connect, type Socket } from 'node:net'
import t from 'tap'
import { createEventSource } from 'eventsource-client'
import { call, eventually, KEYS, startTestService } from '../support/harness.js'
import { ADMIN, CHANNEL, createSession, openSse, type SseClient } from '../support/sse.js'

const admin = { UserId: 'supervisor-1' }

async function listener(base: string, sessionId: string, query = '', headers: Record<string, string> = {}) {
  const opened = await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen${query}`, { headers })
  if (!opened.stream) throw new Error(`listen answered ${opened.status}: ${JSON.stringify(opened.json)}`)
  return opened.stream
}

async function closedOnServer(metricsBase: string, count: number) {
  const disconnects = async () => Number(/^switchboard_sse_client_disconnects_total (\S+)$/m.exec(await (await fetch(`${metricsBase}/metrics`)).text())?.[1])
  if ((await eventually(disconnects, n => n >= count)) < count) throw new Error('the server did not notice the disconnect')
}

async function aTurn(base: string, sessionId: string, consumerId: string, watcher: SseClient, text = 'hello') {
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: text } })).status, 201)
  await watcher.next('crew.status.waiting')
}

t.test('Last-Event-ID resumes a consumer: attached first, then the missed events with their original ids, then live', async t => {
  const { base, metricsBase } = await startTestService(t)
  const { stream, sessionId, consumerId } = await createSession(base)
  await stream.next('crew.status.waiting')
  const first = await listener(base, sessionId)
  const attached = await first.next('session.consumer.attached')
  const listenerId = attached.data.consumerId
  first.close()
  await closedOnServer(metricsBase, 1)

  await aTurn(base, sessionId, consumerId, stream)
  const missed = stream.events.filter(e => e.event !== 'hearthbeat' && Number(e.id) > Number(attached.id))
  t.ok(missed.length >= 4, 'a whole reply was missed')

  const resumed = await listener(base, sessionId, `?consumerId=${listenerId}`, { 'Last-Event-ID': attached.id! })
  const again = await resumed.next()
  t.equal(again.event, 'session.consumer.attached', 'the first event of the stream')
  t.same(again.data, { sessionId, consumerId: listenerId, resumed: true, lastEventId: Number(attached.id) })
  t.equal(again.id, attached.id, 'its id is Last-Event-ID: nothing new was sent yet')
  await resumed.next('crew.status.waiting')
  const replay = resumed.events.slice(1)
  t.same(replay.map(e => [e.id, e.event, e.data]), missed.map(e => [e.id, e.event, e.data]), 'the missed events, in order, with their original ids')

  await aTurn(base, sessionId, consumerId, resumed, 'again')
  const live = resumed.events.slice(1 + replay.length)
  t.same(live.map(e => e.id), stream.events.filter(e => e.event !== 'hearthbeat').slice(-live.length).map(e => e.id), 'then live, ids shared with every consumer')
  stream.close()
  resumed.close()
})

t.test('Last-Event-ID without a consumerId: a new consumer that starts after that id', async t => {
  const { base } = await startTestService(t)
  const { stream, sessionId, consumerId } = await createSession(base)
  await stream.next('crew.status.waiting')
  await aTurn(base, sessionId, consumerId, stream)
  const all = stream.events.filter(e => e.event !== 'hearthbeat')
  const resumed = await listener(base, sessionId, '', { 'Last-Event-ID': '2' })
  const attached = await resumed.next()
  t.match(attached, { event: 'session.consumer.attached', id: '2', data: { sessionId, resumed: true, lastEventId: 2 } })
  t.not(attached.data.consumerId, consumerId, 'a consumer of its own')
  await resumed.next('crew.status.waiting')
  t.same(resumed.events.slice(1).map(e => [e.id, e.event]), all.slice(2).map(e => [e.id, e.event]), 'everything after id 2')
  stream.close()
  resumed.close()
})

t.test('a gap the log cannot fill is said once, then what is left is replayed', async t => {
  const { base, metricsBase } = await startTestService(t, { env: { SSE_REPLAY_BUFFER_EVENTS: '3' } })
  const { stream, sessionId, consumerId } = await createSession(base)
  await stream.next('crew.status.waiting')
  const first = await listener(base, sessionId)
  const attached = await first.next('session.consumer.attached')
  first.close()
  await closedOnServer(metricsBase, 1)
  await aTurn(base, sessionId, consumerId, stream, 'a longer message with many words')
  const lastId = Number(stream.events.at(-1)!.id)

  const resumed = await listener(base, sessionId, `?consumerId=${attached.data.consumerId}`, { 'Last-Event-ID': '1' })
  await resumed.next('crew.status.waiting')
  const [att, gap, ...rest] = resumed.events
  t.match(att, { event: 'session.consumer.attached', id: '1' })
  t.equal(gap!.event, 'stream.gap')
  t.same(gap!.data, { sessionId, consumerId: attached.data.consumerId, reason: 'replay_buffer_exceeded', lastEventId: 1, resumedAfter: lastId - 3 })
  t.equal(Number(gap!.id), gap!.data.resumedAfter, 'its id is the last one lost')
  t.same(rest.map(e => e.event), ['assistant.response', 'assistant.message', 'crew.status.waiting'], 'the last 3 events')
  t.same(rest.map(e => Number(e.id)), [lastId - 2, lastId - 1, lastId], 'with their ids')
  stream.close()
  resumed.close()
})

t.test('the replay buffer is bounded by bytes too: large events beyond it are a gap, the newest are replayed', async t => {
  const { base } = await startTestService(t, { env: { SSE_REPLAY_BUFFER_BYTES: '8192' } })
  const { stream, sessionId } = await createSession(base)
  await stream.next('crew.status.waiting')
  const big = 'y'.repeat(3000)
  for (let i = 0; i < 10; i++) {
    t.equal((await call(base, 'PUT', `${ADMIN}/${sessionId}/impersonate`, { body: { text: `${i} ${big}` }, headers: admin })).status, 200)
  }
  for (let i = 0; i < 10; i++) await stream.next('assistant.message')
  const lastId = Number(stream.events.filter(e => e.event === 'assistant.message').at(-1)!.id)
  const resumed = await listener(base, sessionId, '', { 'Last-Event-ID': '1' })
  await resumed.next(e => e.event === 'assistant.message' && e.data.text.startsWith('9 '))
  const [att, gap, ...rest] = resumed.events
  t.match(att, { event: 'session.consumer.attached', id: '1' })
  t.equal(gap!.event, 'stream.gap', 'what no longer fits is said to be gone')
  t.ok(rest.length >= 1 && rest.length <= 3, `only what fits in 8 KiB is replayed (${rest.length} events)`)
  t.same(rest.map(e => Number(e.id)), rest.map((_, i) => lastId - rest.length + 1 + i), 'the newest, with their ids')
  t.equal(Number(gap!.id), lastId - rest.length, 'the gap id is the last one lost')
  stream.close()
  resumed.close()
})

t.test('resume edge cases', async t => {
  const { base } = await startTestService(t)
  const { stream, sessionId } = await createSession(base)
  await stream.next('crew.status.waiting')
  const bad = await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen?consumerId=7d2c1b56-43c1-4a8e-9f11-0b8e2a3c9d10`, { headers: { 'Last-Event-ID': 'x1' } })
  t.equal(bad.status, 400)
  t.equal(bad.json.code, 'INVALID_LAST_EVENT_ID')
  t.equal((await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen?consumerId=zzz`)).json.code, 'INVALID_CONSUMER_ID')

  const l = await listener(base, sessionId)
  const attached = await l.next('session.consumer.attached')
  const ahead = await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen?consumerId=${attached.data.consumerId}`, { headers: { 'Last-Event-ID': '99' } })
  t.equal(ahead.status, 400)
  t.equal(ahead.json.code, 'INVALID_LAST_EVENT_ID')

  // The same consumer reconnecting while its old stream looks open: the new stream takes over.
  const takeover = await listener(base, sessionId, `?consumerId=${attached.data.consumerId}&lastEventId=${attached.id}`)
  t.equal((await takeover.next()).event, 'session.consumer.attached')
  await l.ended_()
  t.pass('the old stream was ended')

  // A consumer this gateway does not know (expired, or attached through another gateway).
  const stranger = '7d2c1b56-43c1-4a8e-9f11-0b8e2a3c9d10'
  const unknown = await listener(base, sessionId, `?consumerId=${stranger}`, { 'Last-Event-ID': '1' })
  t.match(await unknown.next(), { event: 'session.consumer.attached', id: '1', data: { consumerId: stranger, resumed: true, lastEventId: 1 } })
  t.match(await unknown.next(), { event: 'crew.status.waiting', id: '2' }, 'resumed without loss')
  for (const s of [stream, takeover, unknown]) s.close()
})

t.test('eventsource-client listens and tracks Last-Event-ID; a new client resumes from it', async t => {
  const { base, metricsBase } = await startTestService(t)
  const { stream, sessionId, consumerId } = await createSession(base)
  const first = await listener(base, sessionId)
  const listenerId = (await first.next('session.consumer.attached')).data.consumerId
  first.close()
  await closedOnServer(metricsBase, 1)

  const seen: { event?: string; id?: string; data: string }[] = []
  const es = createEventSource({
    url: `${base}${CHANNEL}/${sessionId}/listen?consumerId=${listenerId}`,
    method: 'POST',
    headers: { apikey: KEYS.acme },
    initialLastEventId: '1',
    onMessage: m => seen.push(m),
  })
  await eventually(async () => seen.some(m => m.event === 'session.consumer.attached'), attached => attached)
  await aTurn(base, sessionId, consumerId, stream)
  await eventually(async () => seen.filter(m => m.event === 'crew.status.waiting').length, n => n >= 2)
  t.ok(seen.some(m => m.event === 'assistant.message'))
  t.equal(es.lastEventId, seen.at(-1)!.id)
  es.close()
  stream.close()
})

t.test('shutdown: every open stream gets reconnect_required, then ends', async t => {
  const service = await startTestService(t)
  const { stream, sessionId } = await createSession(service.base)
  const l = await listener(service.base, sessionId)
  const attached = await l.next('session.consumer.attached')
  await service.close()
  for (const [s, consumer] of [[stream, undefined], [l, attached.data.consumerId]] as const) {
    const last = await s.next('reconnect_required')
    t.match(last.data, { sessionId, reason: 'shutdown', listen: { method: 'POST', path: String } })
    if (consumer) t.equal(last.data.consumerId, consumer)
    t.match(last.data.listen.path, new RegExp(`/eventstream/${sessionId}/listen\\?consumerId=`))
    await s.ended_()
  }
})

/** A client that reads the response head and then stops reading its socket. */
function stalledListener(port: number, sessionId: string): Promise<{ socket: Socket; head: string; rest: () => Promise<string> }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    socket.on('error', reject)
    socket.write(`POST ${CHANNEL}/${sessionId}/listen HTTP/1.1\r\nHost: 127.0.0.1\r\napikey: ${KEYS.acme}\r\nContent-Length: 0\r\n\r\n`)
    const onData = (chunk: Buffer) => {
      chunks.push(chunk)
      const text = Buffer.concat(chunks).toString('latin1')
      if (text.includes('session.consumer.attached') && text.includes('\n\n', text.indexOf('session.consumer.attached'))) {
        socket.off('data', onData)
        socket.pause()
        resolve({
          socket,
          head: text,
          rest: () =>
            new Promise(done => {
              socket.on('data', c => {
                chunks.push(c)
                // The end of the chunked response (the connection itself is kept alive).
                if (Buffer.concat(chunks.slice(-2)).toString('latin1').endsWith('\r\n0\r\n\r\n')) {
                  socket.destroy()
                  done(Buffer.concat(chunks).toString('utf8'))
                }
              })
              socket.on('end', () => done(Buffer.concat(chunks).toString('utf8')))
              socket.on('close', () => done(Buffer.concat(chunks).toString('utf8')))
              socket.resume()
            }),
        })
      }
    }
    socket.on('data', onData)
  })
}

/** SSE frames in a raw chunked HTTP response. */
function framesOf(raw: string) {
  const body = raw.slice(raw.indexOf('\r\n\r\n') + 4)
  return [...body.matchAll(/id: (\d+)\nevent: ([^\n]+)\ndata: ([^\n]*)\n\n/g)].map(m => ({ id: Number(m[1]), event: m[2]!, data: JSON.parse(m[3]!) }))
}

t.test('a slow consumer is dropped with reconnect_required; nobody else waits; it can resume', async t => {
  const { base, metricsBase, service } = await startTestService(t, { env: { SSE_CONSUMER_BUFFER_BYTES: '4096', SSE_REPLAY_BUFFER_BYTES: String(256 * 1024 * 1024) } })
  const { stream, sessionId } = await createSession(base)
  const slow = await stalledListener(service.port, sessionId)
  const slowId = framesOf(slow.head).find(f => f.event === 'session.consumer.attached')!.data.consumerId
  const text = 'x'.repeat(15_000)
  let dropped = false
  let sent = 0
  // Batches of concurrent requests; each event is ~15 kB, so a few MB fill the socket buffers.
  while (sent < 3000 && !dropped) {
    const batch = Array.from({ length: 10 }, (_, i) => sent + i)
    const answers = await Promise.all(batch.map(n => call(base, 'PUT', `${ADMIN}/${sessionId}/impersonate`, { body: { text: `${n} ${text}` }, headers: admin })))
    for (const res of answers) if (res.status !== 200) throw new Error(`impersonate ${res.status}`)
    sent += batch.length
    const metrics = await (await fetch(`${metricsBase}/metrics`)).text()
    dropped = Number(/^switchboard_sse_slow_consumers_dropped_total (\S+)$/m.exec(metrics)?.[1]) >= 1
  }
  t.ok(dropped, `dropped after ${sent} large events`)
  // The fast consumer got every event, in order, while the slow one was stuck.
  for (let i = 0; i < sent; i++) await stream.next('assistant.message')
  t.equal(stream.events.filter(e => e.event === 'assistant.message').length, sent, 'the fast consumer got every message')
  const lastText = stream.events.filter(e => e.event === 'assistant.message').at(-1)!.data.text

  const raw = await slow.rest()
  const frames = framesOf(raw)
  const bye = frames.at(-1)!
  t.equal(bye.event, 'reconnect_required', 'the last thing the slow client reads')
  t.match(bye.data, { sessionId, consumerId: slowId, reason: 'slow_consumer' })
  const lastSeen = frames.filter(f => f.event !== 'reconnect_required').at(-1)!.id

  const resumed = await listener(base, sessionId, `?consumerId=${slowId}`, { 'Last-Event-ID': String(lastSeen) })
  const att = await resumed.next('session.consumer.attached', 10_000)
  t.equal(att.data.resumed, true)
  await resumed.next(e => e.event === 'assistant.message' && e.data.text === lastText, 10_000)
  const replayed = resumed.events.filter(e => e.event === 'assistant.message')
  t.ok(replayed.length > 0, 'what it missed is replayed')
  t.equal(replayed.at(-1)!.data.text, lastText, 'up to the last event')
  t.equal(Number(resumed.events[0]!.id), lastSeen, 'attached carries Last-Event-ID')
  t.equal(Number(resumed.events[1]!.id), lastSeen + 1, 'the replay starts right after it')

  // The session never noticed.
  t.equal((await call(base, 'PUT', `${ADMIN}/${sessionId}/whisper`, { body: { text: 'still here' }, headers: admin })).status, 200)
  stream.close()
  resumed.close()
})
