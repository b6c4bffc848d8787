// Consumer ids per session are bounded on the engine side too (issue 10): every listen mints
// one, so a long session collected them without end in memory and in its stored document.
import t from 'tap'
import { call, STORES, startTestService } from '../support/harness.js'
import { CHANNEL, createSession, openSse } from '../support/sse.js'

for (const store of STORES) {
  t.test(`consumer ids are bounded on the ${store} store`, async t => {
    const { base, service } = await startTestService(t, { store, env: { ENGINE_MAX_CONSUMER_IDS_PER_SESSION: '3' } })
    const { stream, sessionId, consumerId: first } = await createSession(base)
    t.teardown(() => stream.close())
    const listeners: string[] = []
    for (let i = 0; i < 4; i++) {
      const opened = await openSse(base, 'POST', `${CHANNEL}/${sessionId}/listen`)
      const attached = await opened.stream!.next('session.consumer.attached')
      listeners.push(attached.data.consumerId)
      opened.stream!.close()
    }
    const forgotten = await call(base, 'PUT', `${CHANNEL}/${sessionId}/${first}`, { body: { message: 'hola' } })
    t.equal(forgotten.status, 400, 'the oldest consumer id was forgotten')
    t.equal(forgotten.json.code, 'UNKNOWN_CONSUMER')
    const latest = await call(base, 'PUT', `${CHANNEL}/${sessionId}/${listeners[3]}`, { body: { message: 'hola' } })
    t.equal(latest.status, 201, 'the newest still sends')
    const doc = await service.platform.store.collection('engine_sessions').findOne({ _id: sessionId })
    t.same(doc!.consumers, listeners.slice(1), 'the stored document keeps the newest three')
  })
}
