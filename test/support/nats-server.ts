/**
 * Starts a real nats-server (Debian package `nats-server`, JetStream on) on a free port for one
 * test, with its JetStream store in a temporary directory.
 *
 *   const nats = await startNatsServer(t)   // t.teardown stops it and removes the store
 *   nats.url                                // nats://127.0.0.1:<port>
 *   await nats.restart()                    // kill + start again on the same port and store
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { connect as tcpConnect, createServer, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface NatsTestServer {
  url: string
  port: number
  storeDir: string
  /** Kills the server (SIGKILL) and waits for it to exit. Safe to call twice. */
  stop(): Promise<void>
  /** Stops the server and starts it again on the same port with the same JetStream store. */
  restart(options?: { downMs?: number }): Promise<void>
}

interface Teardown {
  teardown(fn: () => unknown): void
}

const BINARY = process.env.NATS_SERVER_BIN ?? 'nats-server'
const START_TIMEOUT_MS = 10_000
const STDERR_KEEP = 32 * 1024

/** A port that was free a moment ago (the OS picks it; the listener is closed again). */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!
}

/**
 * n distinct free ports: every listener stays open until all are bound, so two calls in a row
 * cannot be handed the same port (the kernel readily reuses a port just closed).
 */
export async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(Array.from({ length: n }, () => new Promise<Server>((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve(server))
  })))
  const ports = servers.map(server => (server.address() as { port: number }).port)
  await Promise.all(servers.map(server => new Promise(resolve => server.close(resolve))))
  return ports
}

function accepts(port: number): Promise<boolean> {
  return new Promise(resolve => {
    const socket = tcpConnect({ port, host: '127.0.0.1' })
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}

export async function startNatsServer(t: Teardown, options: { port?: number } = {}): Promise<NatsTestServer> {
  const port = options.port ?? (await freePort())
  const storeDir = mkdtempSync(join(tmpdir(), 'sb-nats-'))
  let child: ChildProcess | undefined
  let exited: Promise<void> = Promise.resolve()
  let output = ''

  const launch = async () => {
    output = ''
    const proc = spawn(BINARY, ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', storeDir], { stdio: ['ignore', 'pipe', 'pipe'] })
    child = proc
    for (const stream of [proc.stdout!, proc.stderr!]) {
      stream.setEncoding('utf8')
      stream.on('data', (chunk: string) => (output = (output + chunk).slice(-STDERR_KEEP)))
    }
    exited = new Promise<void>(resolve => {
      proc.once('exit', () => resolve())
      proc.once('error', error => {
        output += `\n${String(error)}`
        resolve()
      })
    })
    const deadline = Date.now() + START_TIMEOUT_MS
    while (Date.now() < deadline) {
      if (proc.exitCode !== null || proc.signalCode !== null) break
      // JetStream is ready once the server logs it; the port alone is not enough.
      if (/Server is ready/.test(output) && (await accepts(port))) return
      await new Promise(r => setTimeout(r, 25))
    }
    proc.kill('SIGKILL')
    await exited
    throw new Error(`nats-server did not start on port ${port}:\n${output}`)
  }

  const kill = async () => {
    const proc = child
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return
    proc.kill('SIGKILL')
    await exited
  }

  await launch()
  let removed = false
  const server: NatsTestServer = {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    async stop() {
      await kill()
      if (!removed) {
        removed = true
        rmSync(storeDir, { recursive: true, force: true })
      }
    },
    async restart({ downMs = 200 } = {}) {
      await kill()
      await new Promise(r => setTimeout(r, downMs))
      await launch()
    },
  }
  t.teardown(() => server.stop())
  return server
}
