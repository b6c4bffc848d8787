// ConversationRelay in a cluster: gateways and an engine node as separate processes on a real
// nats-server and the MongoDB wire-protocol server. A token issued through gateway A is good on
// gateway B (one platform URL, a load balancer in front of many gateways); the call's session
// lives on the engine node and answers through B; a destroy through A reaches the call on B as
// `end` with the session id.
import t from 'tap'
import { call, mongoUrlFor } from '../support/harness.js'
import { startNatsServer } from '../support/nats-server.js'
import { clusterEnv, outputsOf, startProcess, waitHealthy, type Proc } from '../support/processes.js'
import { connect, prompt, RELAY, setupFrame } from '../support/relay.js'

const USER = { UserId: 'supervisor-1' }

t.test('a relay token works through any gateway; the call is a session on an engine node; a destroy elsewhere ends it', async t => {
  const nats = await startNatsServer(t)
  const mongoUrl = await mongoUrlFor(t)
  const env = clusterEnv(t, { natsUrl: nats.url, mongoUrl })
  const procs = await Promise.all([startProcess(t, 'gateway-a', { ...env, ROLE: 'gateway' }), startProcess(t, 'gateway-b', { ...env, ROLE: 'gateway' }), startProcess(t, 'engine-1', { ...env, ROLE: 'engine' })])
  const [gwA, gwB] = procs as [Proc, Proc, Proc]
  const outputs = outputsOf(procs)
  await Promise.all(procs.map(p => waitHealthy(p)))
  await new Promise(r => setTimeout(r, 750)) // the engine's heartbeats seen by both gateways

  const issued = await call(gwA.base, 'POST', `${RELAY}/tokens`, { body: { crewId: 'demo' } })
  t.equal(issued.status, 201)
  const platform = await connect(gwB.base, issued.json.token)
  t.equal(platform.refused, null, 'gateway B accepts the token gateway A issued')
  platform.send(setupFrame({ callReference: 'cluster' }))
  platform.send(prompt('hi'))
  const reply = await platform.reply().catch(error => {
    throw new Error(`${error}\n${outputs()}`)
  })
  t.equal(reply.text, 'Hello! How can I help you today?', 'answered by the engine node through gateway B')

  let sessionId: string | undefined
  for (let i = 0; i < 100 && !sessionId; i++) {
    sessionId = ((await call(gwA.base, 'GET', '/engine/api/administration/sessions?state=live', { headers: USER })).json.data as any[])[0]?.sessionId
    if (!sessionId) await new Promise(r => setTimeout(r, 100))
  }
  const snapshot = (await call(gwA.base, 'GET', `/engine/api/administration/session/${sessionId}/snapshot`, { headers: USER })).json.data.snapshot
  t.match(snapshot.configuration.context, { callReference: 'cluster', call: { from: '+18005550100' } })
  t.equal((await call(gwA.base, 'DELETE', `/engine/api/administration/session/${sessionId}`, { headers: USER })).status, 204)
  await platform.until(f => f.some(x => x.type === 'end'), 'the end frame')
  t.same(JSON.parse(platform.frames.find(f => f.type === 'end').handoffData), { sessionId, reason: 'admin_destroyed' }, 'the destroy through A ends the call on B')
  t.match(await platform.closed(), { code: 4000 })
})
