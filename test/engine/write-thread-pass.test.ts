// Key session suites once more with the engine writing from the store's write thread
// (ENGINE_WRITE_THREAD=1, the default on 4 or more cores). Every in-process suite runs with the
// default of the machine it runs on, off on a 2-core machine such as CI's; these cover what the
// thread changes: checkpoints and history written (a session's lifecycle), read back after a
// hibernation, and report records. The thread itself is tested in test/platform/write-thread.test.ts
// and the store contract; test/service/restart.test.ts kills a process with and without it.
import t from 'tap'
import { startTestService } from '../support/harness.js'

process.env.ENGINE_WRITE_THREAD = '1'

t.test('this pass runs the service with the write thread', async t => {
  const { service } = await startTestService(t)
  t.equal(service.platform.config.engine.writeThread, true)
})

await import('../channel/channel.test.js')
await import('./hibernation.test.js')
await import('../reports/sessions-detail.test.js')
