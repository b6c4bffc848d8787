// Reconnection: Last-Event-ID resumption from the replay buffer, the gap notice, takeover,
// reconnect_required on shutdown, and slow consumers dropped without slowing anyone else.
import { connect, type Socket } from 'node:net'
import t from 'tap'
import { createEventSource } from 'eventsource-client'
import { call, KEYS, startTestService } from '../support/harness.js'
import { ADMIN, CHANNEL, createSession, openSse, type SseClient } from '../support/sse.js'

const admin = { UserId: 'supervisor-1' }
const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))

async function listener(base: string, sessionId: string, query = '', headers: Record<string, string> = {}) {
  const opened = await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen${query}`, { headers })
  if (!opened.stream) throw new Error(`listen answered ${opened.status}: ${JSON.stringify(opened.json)}`)
  return opened.stream
}

async function closedOnServer(base: string, count: number) {
  for (let i = 0; i < 100; i++) {
    const text = await (await fetch(`${base}/metrics`)).text()
    if (Number(/^switchboard_sse_client_disconnects_total (\S+)$/m.exec(text)?.[1]) >= count) return
    await sleep(10)
  }
  throw new Error('the server did not notice the disconnect')
}

async function aTurn(base: string, sessionId: string, consumerId: string, watcher: SseClient, text = 'hello') {
  t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: text } })).status, 201)
  await watcher.next('crew.status.waiting')
}

t.test('Last-Event-ID resumes a consumer: missed events replayed with their ids, then attached', async t => {
  const { base } = await startTestService(t)
  const { stream, sessionId, consumerId } = await createSession(base)
  await stream.next('crew.status.waiting')
  const first = await listener(base, sessionId)
  const attached = await first.next('session.consumer.attached')
  const listenerId = attached.data.consumerId
  first.close()
  await closedOnServer(base, 1)

  await aTurn(base, sessionId, consumerId, stream)
  const missed = stream.events.filter(e => e.event !== 'hearthbeat').slice(2) // what the creator saw of the turn

  const resumed = await listener(base, sessionId, `?consumerId=${listenerId}`, { 'Last-Event-ID': attached.id! })
  const replayedAttached = await resumed.next('session.consumer.attached')
  const replay = resumed.events.slice(0, -1)
  t.same(replay.map(e => e.event), missed.map(e => e.event), 'the missed events, in order')
  t.same(replay.map(e => e.data), missed.map(e => e.data))
  t.same(replay.map(e => Number(e.id)), replay.map((_, i) => i + 2), 'with their original ids, right after Last-Event-ID')
  t.same(replayedAttached.data, { sessionId, consumerId: listenerId, resumed: true, lastEventId: 1 })
  t.equal(Number(replayedAttached.id), replay.length + 2)

  await aTurn(base, sessionId, consumerId, resumed, 'again')
  t.equal(resumed.events.at(-1)!.event, 'crew.status.waiting', 'then live')
  stream.close()
  resumed.close()
})

t.test('a gap the buffer cannot fill is said once, then what is left is replayed', async t => {
  const { base } = await startTestService(t, { env: { SSE_REPLAY_BUFFER_EVENTS: '3' } })
  const { stream, sessionId, consumerId } = await createSession(base)
  const first = await listener(base, sessionId)
  const attached = await first.next('session.consumer.attached')
  first.close()
  await closedOnServer(base, 1)
  await aTurn(base, sessionId, consumerId, stream, 'a longer message with many words')

  const resumed = await listener(base, sessionId, `?consumerId=${attached.data.consumerId}`, { 'Last-Event-ID': '1' })
  await resumed.next('session.consumer.attached')
  const [gap, ...rest] = resumed.events
  t.equal(gap!.event, 'stream.gap')
  t.match(gap!.data, { sessionId, consumerId: attached.data.consumerId, reason: 'replay_buffer_exceeded', lastEventId: 1, resumedAfter: Number })
  t.equal(Number(gap!.id), gap!.data.resumedAfter)
  t.same(rest.slice(0, 3).map(e => e.event), ['assistant.response', 'assistant.message', 'crew.status.waiting'], 'the last 3 events')
  t.ok(Number(rest[0]!.id) === gap!.data.resumedAfter + 1, 'ids keep increasing')
  stream.close()
  resumed.close()
})

t.test('resume edge cases', async t => {
  const { base } = await startTestService(t)
  const { stream, sessionId } = await createSession(base)
  const bad = await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen?consumerId=7d2c1b56-43c1-4a8e-9f11-0b8e2a3c9d10`, { headers: { 'Last-Event-ID': 'x1' } })
  t.equal(bad.status, 400)
  t.equal(bad.json.code, 'INVALID_LAST_EVENT_ID')
  const noConsumer = await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen`, { headers: { 'Last-Event-ID': '3' } })
  t.equal(noConsumer.json.code, 'CONSUMER_ID_REQUIRED')
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

  // A consumer this node does not know (expired, or attached on another node).
  const stranger = '7d2c1b56-43c1-4a8e-9f11-0b8e2a3c9d10'
  const unknown = await listener(base, sessionId, `?consumerId=${stranger}`, { 'Last-Event-ID': '5' })
  const gap = await unknown.next()
  t.equal(gap.event, 'stream.gap')
  t.match(gap.data, { reason: 'unknown_consumer', lastEventId: 5, consumerId: stranger })
  t.equal(gap.id, '6')
  const att = await unknown.next()
  t.match(att, { event: 'session.consumer.attached', id: '7', data: { consumerId: stranger, resumed: true } })
  for (const s of [stream, takeover, unknown]) s.close()
})

t.test('eventsource-client listens and tracks Last-Event-ID; a new client resumes from it', async t => {
  const { base } = await startTestService(t)
  const { stream, sessionId, consumerId } = await createSession(base)
  const first = await listener(base, sessionId)
  const listenerId = (await first.next('session.consumer.attached')).data.consumerId
  first.close()
  await closedOnServer(base, 1)

  const seen: { event?: string; id?: string; data: string }[] = []
  const es = createEventSource({
    url: `${base}${CHANNEL}/${sessionId}/listen?consumerId=${listenerId}`,
    method: 'POST',
    headers: { apikey: KEYS.acme },
    initialLastEventId: '1',
    onMessage: m => seen.push(m),
  })
  for (let i = 0; i < 200 && !seen.some(m => m.event === 'session.consumer.attached'); i++) await sleep(10)
  await aTurn(base, sessionId, consumerId, stream)
  for (let i = 0; i < 200 && seen.filter(m => m.event === 'crew.status.waiting').length < 1; i++) await sleep(10)
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
  const { base, service } = await startTestService(t, { env: { SSE_CONSUMER_BUFFER_BYTES: '4096' } })
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
    const metrics = await (await fetch(`${base}/metrics`)).text()
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
  const replayed = resumed.events.filter(e => e.event === 'assistant.message')
  t.ok(replayed.length > 0, 'what it missed is replayed')
  t.equal(replayed.at(-1)!.data.text, lastText, 'up to the last event')
  t.equal(Number(resumed.events[0]!.id), lastSeen + 1)

  // The session never noticed.
  t.equal((await call(base, 'PUT', `${ADMIN}/${sessionId}/whisper`, { body: { text: 'still here' }, headers: admin })).status, 200)
  stream.close()
  resumed.close()
})
