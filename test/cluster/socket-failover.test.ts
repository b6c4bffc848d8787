// The channel over a WebSocket in a cluster: 2 gateways and 2 engine nodes as separate processes
// on a real nats-server and the MongoDB wire-protocol server. A socket opened through gateway A
// loses its engine node to a kill -9 mid-reply and its client drops; the client resumes through
// gateway B with the last id it got: it gets what it missed from the session's JetStream event
// log with the original ids, the session (taken over by the survivor) answers on the new socket,
// and the ids the client saw over both sockets run on without a hole or a repeat.
import t from 'tap'
import { connect } from '@nats-io/transport-node'
import { Kvm } from '@nats-io/kv'
import { OWNERS_BUCKET } from '../../engine/cluster/ownership.js'
import { mongoUrlFor } from '../support/harness.js'
import { startNatsServer } from '../support/nats-server.js'
import { crewsFile } from '../engine/fixtures/crews.js'
import { clusterEnv, outputsOf, startTwoByTwo, waitHealthy } from '../support/processes.js'
import { createSocketSession, openSocket, type WsClient } from '../support/ws.js'

const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))

/** Sends a message until it is acked (a takeover may answer 503 for a moment). */
async function say(socket: WsClient, message: string) {
  const deadline = Date.now() + 20_000
  for (;;) {
    const answer = await socket.ask({ type: 'message', message })
    if (answer.type === 'ack') return answer
    if (Date.now() > deadline) throw new Error(`"${message}" refused: ${JSON.stringify(answer)}`)
    await sleep(200)
  }
}

t.test('a socket resumes through the other gateway after kill -9 of its engine node, ids contiguous', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const env = clusterEnv(t, { natsUrl: nats.url, mongoUrl }, {
    // Replies stream word by word, 150 ms apart: the kill lands in the middle of one.
    CREWS_FILE: crewsFile({ patchDemo: { assistant: { provider: 'scripted', chunkDelayMs: 150, fallback: 'You said: {{text}}, and that is all I know about it' } } }),
  })
  const procs = await startTwoByTwo(t, env)
  const [gwA, gwB, e1, e2] = procs
  const outputs = outputsOf(procs)
  const health = await Promise.all(procs.map(p => waitHealthy(p)))
  const nodes = new Map([
    [health[2]!.engineNode as string, e1],
    [health[3]!.engineNode as string, e2],
  ])
  await sleep(750) // both engine heartbeats seen by both gateways

  const { socket, sessionId, consumerId } = await createSocketSession(gwA.base)
  await socket.next('crew.status.waiting')
  const probe = await connect({ servers: nats.url })
  t.teardown(() => probe.close())
  const owners = await new Kvm(probe).open(OWNERS_BUCKET)
  const owner = (await owners.get(sessionId))?.json<{ node: string }>().node
  const victim = nodes.get(owner ?? '')
  if (!victim) throw new Error(`no owner for ${sessionId} (${owner}):\n${outputs()}`)

  await say(socket, 'first')
  await socket.next('assistant.response', 15_000)
  await victim.kill()
  t.comment(`${victim.name} killed -9 mid-reply`)
  // The client drops; it keeps the last id it got.
  socket.close()
  await socket.closed()
  const before = socket.events
  const lastId = Number(before.at(-1)!.id)

  const resumed = await openSocket(gwB.base, { query: `?sessionId=${sessionId}&consumerId=${consumerId}&lastEventId=${lastId}` })
  t.match(await resumed.nextFrame('ack', 20_000), { of: 'attach', result: { sessionId, consumerId } }, 'gateway B attaches the same consumer')
  t.match(await resumed.next('session.consumer.attached', 20_000), { id: String(lastId), data: { resumed: true, lastEventId: lastId } })
  await say(resumed, 'second')
  await resumed.next(e => e.event === 'assistant.message' && String((e.data as any).text).startsWith('You said: second'), 30_000)
  await resumed.next('crew.status.waiting', 15_000)

  const ids = [...before, ...resumed.events.slice(1)].map(e => Number(e.id))
  t.ok(ids.every((id, i) => id === ids[0]! + i), `ids ${ids[0]}..${ids.at(-1)} contiguous over both sockets and the failover`)
  t.equal(ids[0], 1)
  const replies = resumed.events.filter(e => e.event === 'assistant.message').map(e => (e.data as any).text)
  t.ok(replies.some(text => text.startsWith('You said: first')), 'the reply cut by the kill is given again by the survivor')
  for (const p of [gwA, gwB, ...nodes.values()].filter(p => p !== victim)) t.ok(p.alive(), `${p.name} still running`)
  resumed.close()
})
