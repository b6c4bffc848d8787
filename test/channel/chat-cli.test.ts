// cli/chat.ts against the real service: a line typed is a message, the reply streams back, /end
// ends the session.
import { spawn } from 'node:child_process'
import t from 'tap'
import { KEYS, startTestService } from '../support/harness.js'

t.test('chat: open on a crew, type a line, watch the reply, end the session', async t => {
  const { base } = await startTestService(t)
  const child = spawn(process.execPath, ['--import', '@tapjs/typescript/import', 'cli/chat.ts', '--url', base, '--crew', 'demo'], {
    env: { ...process.env, SWITCHBOARD_API_KEY: KEYS.acme },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  t.teardown(() => void child.kill())
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', chunk => (stdout += chunk))
  child.stderr.on('data', chunk => (stderr += chunk))
  const until = async (test: () => boolean, what: string) => {
    const deadline = Date.now() + 30_000
    while (!test()) {
      if (Date.now() > deadline) throw new Error(`no ${what}; stdout: ${stdout}; stderr: ${stderr}`)
      await new Promise(r => setTimeout(r, 50))
    }
  }
  await until(() => stdout.includes('you> '), 'prompt')
  t.match(stderr, /\[session [0-9a-f-]{36}, consumer [0-9a-f-]{36}\]/, 'the session it opened')
  child.stdin.write('hello there\n')
  await until(() => stdout.includes('assistant> Hello! How can I help you today?\n'), 'reply')
  t.pass('the reply streams to the terminal')
  child.stdin.write('/end\n')
  const code = await new Promise(resolve => child.once('exit', resolve))
  t.equal(code, 0)
  t.match(stderr, '[closed 4000: session closed: user_closed]')
})
