/**
 * Starts the MongoDB wire-protocol test server (mongo-wire-server.py:
 * mockupdb + mongomock, a local stand-in for mongod) for one test file.
 *
 * Set MONGO_URL to run the same suites against a real mongod instead. Then
 * startMongoTestServer() returns that URL and stop() does nothing.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'

export interface MongoTestServer {
  /** Connection string, e.g. mongodb://127.0.0.1:41234/?directConnection=true */
  url: string
  /** The server's process (undefined with MONGO_URL): an outage test pauses it with SIGSTOP. */
  pid?: number
  /** Kills the server process and waits for it to exit. Safe to call twice. */
  stop(): Promise<void>
}

export interface MongoTestServerOptions {
  /** TTL monitor period in ms (server default 1000; mongod uses 60000). */
  ttlIntervalMs?: number
  /** Log every command with its duration to the server's stderr (shown if startup fails). */
  verbose?: boolean
}

const SCRIPT = fileURLToPath(new URL('./mongo-wire-server.py', import.meta.url))
const START_TIMEOUT_MS = 15_000
const STOP_TIMEOUT_MS = 5_000
const STDERR_KEEP = 64 * 1024

export async function startMongoTestServer(
  options: MongoTestServerOptions = {},
): Promise<MongoTestServer> {
  const external = process.env.MONGO_URL
  if (external) return { url: external, stop: async () => {} }

  // Debian's python3 (mockupdb and mongomock are Debian packages), not pyenv's.
  const python = process.env.MONGO_TEST_PYTHON ?? '/usr/bin/python3'
  const args = [SCRIPT, '--port', '0', '--exit-on-stdin-eof']
  if (options.ttlIntervalMs !== undefined) args.push('--ttl-interval-ms', String(options.ttlIntervalMs))
  if (options.verbose) args.push('--verbose')

  // stdin stays open for the life of the server. The server exits when it
  // closes, so it cannot outlive this process even if stop() is never called.
  const child = spawn(python, args, { stdio: ['pipe', 'pipe', 'pipe'] })
  let stderr = ''
  // Always drain both pipes: a full pipe would block the server.
  child.stderr!.setEncoding('utf8')
  child.stderr!.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-STDERR_KEEP)
  })
  const exited = new Promise<void>(resolve => {
    child.once('exit', () => resolve())
    child.once('error', () => resolve())
  })

  let port: number
  try {
    port = await waitForListening(child, python, () => stderr)
  } catch (err) {
    child.kill('SIGKILL')
    await exited
    throw err
  }
  // Do not let the server keep the test process alive.
  for (const stream of [child.stdin, child.stdout, child.stderr]) {
    ;(stream as unknown as { unref?: () => void } | null)?.unref?.()
  }
  child.unref()

  let stopping: Promise<void> | undefined
  return {
    url: `mongodb://127.0.0.1:${port}/?directConnection=true`,
    pid: child.pid,
    stop() {
      stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return
        child.kill('SIGTERM')
        const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS)
        await exited
        clearTimeout(timer)
        child.stdin?.destroy()
      })()
      return stopping
    },
  }
}

function waitForListening(child: ChildProcess, python: string, stderr: () => string): Promise<number> {
  return new Promise((resolve, reject) => {
    let stdout = ''
    const fail = (why: string) => {
      cleanup()
      reject(new Error(`mongo-wire-server ${why}\n--- stderr ---\n${stderr()}`))
    }
    const onData = (chunk: string) => {
      stdout += chunk
      const match = /^LISTENING (\d+)$/m.exec(stdout)
      if (match) {
        cleanup()
        // Keep draining stdout (nothing else is expected there).
        child.stdout!.resume()
        resolve(Number(match[1]))
      }
    }
    const onExit = (code: number | null, signal: string | null) =>
      fail(`exited before listening (code ${code}, signal ${signal})`)
    const onError = (err: Error) => fail(`failed to start ${python}: ${err.message}`)
    const timer = setTimeout(() => fail(`did not print LISTENING within ${START_TIMEOUT_MS} ms`), START_TIMEOUT_MS)
    function cleanup() {
      clearTimeout(timer)
      child.stdout!.off('data', onData)
      child.off('exit', onExit)
      child.off('error', onError)
    }
    child.stdout!.setEncoding('utf8')
    child.stdout!.on('data', onData)
    child.once('exit', onExit)
    child.once('error', onError)
  })
}
