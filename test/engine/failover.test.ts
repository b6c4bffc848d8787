// Failover of engine nodes: two ROLE=engine processes (main.ts) and one gateway on a real
// nats-server and one MongoDB database (the wire-protocol test server). Mid-conversation, one
// engine process is killed with SIGKILL right after it acknowledged a user message and while it
// streams the reply. The next message to each of its sessions must be answered by the
// surviving node, restored from the last persisted snapshot, with the history intact and the
// acknowledged message not lost; the client's stream (held by the gateway) carries on. The
// failover time (kill -> first accepted command, kill -> first reply on the stream) is printed.
import t from 'tap'
import { connect } from '@nats-io/transport-node'
import { Kvm } from '@nats-io/kv'
import { OWNERS_BUCKET } from '../../engine/cluster/ownership.js'
import { call, mongoUrlFor, startTestService } from '../support/harness.js'
import { startNatsServer } from '../support/nats-server.js'
import { ADMIN, CHANNEL, createSession } from '../support/sse.js'
import { crewsFile } from './fixtures/crews.js'
import { clusterEnv, startProcess, waitHealthy, type Proc } from '../support/processes.js'

const SESSIONS = 8
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))


t.test('an engine node killed -9 mid-conversation: its sessions continue on the survivor', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const env = clusterEnv(t, { natsUrl: nats.url, mongoUrl }, {
    // Replies are streamed word by word, 150 ms apart: a kill lands in the middle of one.
    CREWS_FILE: crewsFile({ patchDemo: { assistant: { provider: 'scripted', chunkDelayMs: 150, rules: [{ match: '\\b(hello|hi)\\b', reply: 'Hello! How can I help you today?' }] } } }),
  })
  const [p1, p2] = await Promise.all([startProcess(t, 'engine-1', { ...env, ROLE: 'engine' }), startProcess(t, 'engine-2', { ...env, ROLE: 'engine' })])
  const [h1, h2] = await Promise.all([waitHealthy(p1), waitHealthy(p2)])
  t.match(h1, { role: 'engine', bus: 'nats', store: 'mongo', modules: ['engine'] })
  const gw = await startTestService(t, { env: { ...env, ROLE: 'gateway', LOG_LEVEL: 'silent' } })
  await sleep(600) // both heartbeats seen by the gateway

  const sessions = []
  for (let i = 0; i < SESSIONS; i++) sessions.push({ i, ...(await createSession(gw.base)) })
  await Promise.all(
    sessions.map(async s => {
      const put = await call(gw.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'hello' } })
      if (put.status !== 201) throw new Error(`hello refused: ${put.status} ${put.text}`)
      await s.stream.next(e => e.event === 'assistant.message' && e.data.text === 'Hello! How can I help you today?', 10_000)
      await s.stream.next('crew.status.waiting')
    }),
  )

  const probe = await connect({ servers: nats.url })
  t.teardown(() => probe.close())
  const owners = await new Kvm(probe).open(OWNERS_BUCKET)
  const ownerOf = async (id: string) => (await owners.get(id))?.json<{ node: string }>().node
  const placed = await Promise.all(sessions.map(async s => ({ ...s, owner: await ownerOf(s.sessionId) })))
  const victims = placed.filter(s => s.owner === h1.engineNode)
  const bystanders = placed.filter(s => s.owner === h2.engineNode)
  t.equal(victims.length + bystanders.length, SESSIONS, 'every session is owned by one of the two nodes')
  t.ok(victims.length >= 1 && bystanders.length >= 1, `sessions on both nodes (${victims.length} / ${bystanders.length})`)

  // Acknowledged messages, then the owner dies while it streams the replies.
  for (const s of victims) {
    const put = await call(gw.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: `second ${s.i}` } })
    t.equal(put.status, 201, 'second message acknowledged')
  }
  await Promise.all(victims.map(s => s.stream.next('assistant.response', 5000)))
  p1.child.kill('SIGKILL')
  const killedAt = Date.now()
  await p1.exited

  const timings = await Promise.all(
    victims.map(async s => {
      const put = await call(gw.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: `third ${s.i}` } })
      const accepted = Date.now() - killedAt
      if (put.status !== 201) throw new Error(`third refused after the kill: ${put.status} ${put.text}\n${p2.output()}`)
      const first = await s.stream.next(e => e.event === 'assistant.message', 15_000)
      const replied = Date.now() - killedAt
      await s.stream.next('crew.status.waiting', 15_000)
      return { accepted, replied, first: first.data.text as string }
    }),
  )
  for (const [k, s] of victims.entries()) {
    // The reply cut off by the kill is dropped; the next reply answers with both messages in its context.
    t.equal(timings[k]!.first, `You said: third ${s.i}`, 'the next message is answered by the survivor')
    t.equal(await ownerOf(s.sessionId), h2.engineNode, 'the survivor owns the session now')
    const history = await call(gw.base, 'GET', `${ADMIN}/${s.sessionId}/history`, { headers: { UserId: 'sup' } })
    t.equal(history.status, 200)
    const entries = history.json.data as any[]
    t.same(entries.filter(e => e.type === 'message.user').map(e => e.text), ['hello', `second ${s.i}`, `third ${s.i}`], 'every acknowledged message once, in order')
    const seqs = entries.map(e => e.seq)
    t.same(seqs, [...seqs].sort((a, b) => a - b), 'history ordered')
    t.equal(new Set(seqs).size, seqs.length, 'no sequence number twice')
    t.ok(entries.some(e => e.type === 'session.restored'), 'restored on the survivor')
    const snapshot = await call(gw.base, 'GET', `${ADMIN}/${s.sessionId}/snapshot`, { headers: { UserId: 'sup' } })
    const messages = snapshot.json.data.snapshot.memory.messages as any[]
    t.same(
      messages.map(m => `${m.author}:${m.text}`),
      ['user:hello', 'assistant:Hello! How can I help you today?', `user:second ${s.i}`, `user:third ${s.i}`, `assistant:You said: third ${s.i}`],
      'the conversation is intact',
    )
  }
  // Sessions of the surviving node were not disturbed.
  for (const s of bystanders) {
    const put = await call(gw.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'hello again' } })
    t.equal(put.status, 201)
    await s.stream.next(e => e.event === 'assistant.message' && e.data.text === 'Hello! How can I help you today?', 10_000)
  }
  const accepted = timings.map(x => x.accepted).sort((a, b) => a - b)
  const replied = timings.map(x => x.replied).sort((a, b) => a - b)
  const line = `failover (${victims.length} sessions): kill -> command accepted ${accepted[0]}..${accepted.at(-1)} ms; kill -> first reply on the stream ${replied[0]}..${replied.at(-1)} ms`
  t.comment(line)
  console.log(line)
  for (const s of sessions) s.stream.close()
})
