// The same session life on both stores: the engine only uses operations both support.
import t from 'tap'
import { call, startTestService, STORES } from '../support/harness.js'
import { ADMIN, CHANNEL, createSession } from '../support/sse.js'
import { crewsFile } from './fixtures/crews.js'

const USER = { UserId: 'sup' }

for (const store of STORES) {
  t.test(`a session's life on the ${store} store`, async t => {
    const { base, service } = await startTestService(t, { store, env: { CREWS_FILE: crewsFile({ patchDemo: { maxConcurrentSessions: 1 } }) } })
    const { stream, sessionId, consumerId } = await createSession(base, { body: { arguments: { 'odd.key': 1, $x: 2 } } })
    t.equal((await createSession(base).catch(e => e)).message.includes('429'), true, 'the limit is counted in the store')
    t.equal((await call(base, 'PUT', `${CHANNEL}/${sessionId}/${consumerId}`, { body: { message: 'echo hi' } })).status, 201)
    t.equal((await stream.next('assistant.message')).data.text, 'The echo tool returned: hi')
    t.equal((await call(base, 'PUT', `${ADMIN}/${sessionId}/transfer`, { body: { target: 'billing' }, headers: USER })).status, 200)
    t.equal((await call(base, 'PUT', `${ADMIN}/${sessionId}/pause`, { headers: USER })).status, 200)
    const history = (await call(base, 'GET', `${ADMIN}/${sessionId}/history`, { headers: USER })).json
    t.same(history.data.map((e: any) => e.seq), history.data.map((_: any, i: number) => i + 1))
    const snap = (await call(base, 'GET', `${ADMIN}/${sessionId}/snapshot`, { headers: USER })).json.data.snapshot
    t.match(snap, { state: 'paused', agentId: 'billing', configuration: { context: { 'odd.key': 1, $x: 2, ResumenConversacion: String } } })
    t.equal((await call(base, 'DELETE', `${ADMIN}/${sessionId}`, { headers: USER })).status, 204)
    await stream.ended_()
    const record = await service.platform.store.collection('session_records').findOne({ _id: sessionId })
    t.match(record, { status: 'completed', agent_id: 'billing', transfers: 1, user_messages: 1, tool_calls: 1 })
    const again = await createSession(base)
    t.ok(again.sessionId, 'the place was released')
    again.stream.close()
  })
}
