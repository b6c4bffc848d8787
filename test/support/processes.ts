// Service processes for the multi-process tests and bench/cluster: main.ts started with a ROLE, on a
// free port, its output kept (the last 64 KiB) for failure messages, ended at teardown.
//
// Coverage: tap loads @tapjs/processinfo into every process it starts (NODE_OPTIONS) and adds it,
// with its _TAPJS_PROCESSINFO_* variables, to the environment of every child spawned from them,
// even one given an environment of its own. A child then records its coverage and writes it to
// .tap/coverage when it exits, where the report reads it with the tests' own. For that to count,
// the child runs code outside node_modules (excluded from coverage) with source maps back to the
// .ts files, and exits at teardown instead of being killed (a SIGKILL writes nothing).
import { spawn, type ChildProcess } from 'node:child_process'
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { randomUUID } from 'node:crypto'
import { tmpdir } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { API_KEYS } from './harness.js'
import { fileURLToPath, pathToFileURL } from 'node:url'
import ts from 'typescript'
import { freePorts } from './nats-server.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const SOURCES = ['platform', 'gateway', 'dialer', 'engine', 'reports', 'schemas', 'cli', 'main.ts', 'service.ts']
let built: string | undefined

/**
 * Transpiles the service (no type check: `tsc --noEmit` covers that) once per test process into
 * .cache/ at the root (packages resolve from there; not node_modules, which coverage leaves out),
 * each file with an inline source map naming its .ts. Each process then starts in about a second
 * instead of transpiling the whole code base itself (7-8 s of CPU each, six processes on two
 * cores). Set CLUSTER_TS=1 to run main.ts through @tapjs/typescript/import instead.
 */
export function buildService(): string {
  if (built) return built
  const out = join(ROOT, '.cache', `switchboard-cluster-${process.pid}`)
  rmSync(out, { recursive: true, force: true })
  const options: ts.CompilerOptions = { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ES2022, esModuleInterop: true, sourceMap: true }
  const walk = (path: string) => {
    if (statSync(path).isDirectory()) return readdirSync(path).forEach(name => walk(join(path, name)))
    if (!path.endsWith('.ts') || path.endsWith('.d.ts')) return
    const rel = relative(ROOT, path)
    const { outputText, sourceMapText } = ts.transpileModule(readFileSync(path, 'utf8'), { compilerOptions: options, fileName: rel })
    const map = { ...JSON.parse(sourceMapText!), sources: [pathToFileURL(path).href], sourceRoot: undefined }
    const inline = `//# sourceMappingURL=data:application/json;base64,${Buffer.from(JSON.stringify(map)).toString('base64')}`
    const js = outputText.replace(/^\/\/# sourceMappingURL=.*$/m, inline)
    const target = join(out, rel.replace(/\.ts$/, '.js'))
    mkdirSync(dirname(target), { recursive: true })
    writeFileSync(target, js)
  }
  for (const source of SOURCES) walk(join(ROOT, source))
  copyFileSync(join(ROOT, 'package.json'), join(out, 'package.json')) // service.ts reads its version
  process.once('exit', () => rmSync(out, { recursive: true, force: true }))
  built = out
  return out
}
const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms))

/** Whether tap records coverage in this run (not with --disable-coverage). */
const COVERAGE = process.env._TAPJS_PROCESSINFO_COVERAGE_ === '1'
/** How long a process ended at teardown may take to stop before it is killed. */
const TEARDOWN_GRACE_MS = 10_000

export interface Proc {
  name: string
  port: number
  base: string
  /** The process's metrics listener (METRICS_PORT on loopback). */
  metricsBase: string
  child: ChildProcess
  output: () => string
  exited: Promise<void>
  alive: () => boolean
  /** SIGKILL and wait for the exit (no-op once exited). */
  kill: () => Promise<void>
  /** SIGTERM (a graceful stop) and wait for the exit: its exit code. */
  terminate: () => Promise<number | null>
  /** Starts it again on another free port (waitHealthy does, when the port was taken meanwhile). */
  relaunch: () => Promise<void>
}

interface Teardown {
  teardown(fn: () => unknown): void
}

export async function startProcess(t: Teardown | undefined, name: string, env: Record<string, string>): Promise<Proc> {
  const args = process.env.CLUSTER_TS === '1' ? ['--import', '@tapjs/typescript/import', 'main.ts'] : [join(buildService(), 'main.js')]
  let output = ''
  const launch = async () => {
    const [port, metricsPort] = (await freePorts(2)) as [number, number]
    const child = spawn(process.execPath, args, {
      cwd: ROOT,
      // Transpile only (tsc type-checks the code base), as tap runs the tests; load shedding on
      // event-loop delay off unless a test asks for it: several processes share two cores with
      // the tests, and one starved of CPU could refuse work for it (see harness.ts).
      // NODE_V8_COVERAGE (c8 run around tap, or node's own collection) is passed on too.
      env: {
        PATH: process.env.PATH ?? '',
        HOME: process.env.HOME ?? '',
        ...(process.env.NODE_V8_COVERAGE ? { NODE_V8_COVERAGE: process.env.NODE_V8_COVERAGE } : {}),
        TS_NODE_TRANSPILE_ONLY: '1',
        OVERLOAD_LOOP_DELAY_MS: '0',
        ...env,
        PORT: String(port),
        HOST: '127.0.0.1',
        METRICS_PORT: String(metricsPort),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    for (const stream of [child.stdout!, child.stderr!]) {
      stream.setEncoding('utf8')
      stream.on('data', (chunk: string) => (output = (output + chunk).slice(-64 * 1024)))
    }
    return { port, base: `http://127.0.0.1:${port}`, metricsBase: `http://127.0.0.1:${metricsPort}`, child, exited: new Promise<void>(resolve => child.once('exit', () => resolve())) }
  }
  const proc: Proc = {
    name,
    ...(await launch()),
    output: () => output,
    alive: () => proc.child.exitCode === null && proc.child.signalCode === null,
    async kill() {
      if (proc.alive()) proc.child.kill('SIGKILL')
      await proc.exited
    },
    async terminate() {
      if (proc.alive()) proc.child.kill('SIGTERM')
      await proc.exited
      return proc.child.exitCode
    },
    async relaunch() {
      await proc.kill()
      output = ''
      Object.assign(proc, await launch())
    },
  }
  // Under coverage a process stops as it does in production (SIGTERM) and writes its coverage as
  // it exits; one still running after the grace is killed. Otherwise killed at once.
  t?.teardown(async () => {
    if (!COVERAGE || !proc.alive()) return proc.kill()
    const timer = setTimeout(() => void proc.kill(), TEARDOWN_GRACE_MS)
    await proc.terminate()
    clearTimeout(timer)
  })
  return proc
}

export async function waitHealthy(proc: Proc, timeoutMs = 45_000): Promise<Record<string, any>> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (!proc.alive()) {
      // The port was free when picked, but an outgoing connection may have taken it before the
      // process bound it: start it again elsewhere.
      if (/Could not listen on/.test(proc.output())) {
        await proc.relaunch()
        continue
      }
      throw new Error(`${proc.name} exited:\n${proc.output()}`)
    }
    try {
      const res = await fetch(`${proc.base}/healthz`)
      if (res.ok) return (await res.json()) as Record<string, any>
    } catch {
      // not listening yet
    }
    await sleep(100)
  }
  throw new Error(`${proc.name} not healthy within ${timeoutMs} ms:\n${proc.output()}`)
}

/** switchboard_dialer_chunks_processed_total{outcome="ok"} of a worker process. */
export async function chunksProcessed(proc: Proc): Promise<number> {
  const text = await (await fetch(`${proc.metricsBase}/metrics`)).text()
  const match = /switchboard_dialer_chunks_processed_total\{outcome="ok"\} (\d+)/.exec(text)
  return match ? Number(match[1]) : 0
}

/**
 * The environment every multi-process test shares: one NATS server and one MongoDB database,
 * bootstrap keys, a shared upload directory (removed at teardown) and fast cluster timing
 * (heartbeat 250 ms: a node is dead after 750 ms unheard; leases renewed every 500 ms).
 */
export function clusterEnv(t: Teardown, links: { natsUrl: string; mongoUrl: string }, extra: Record<string, string> = {}): Record<string, string> {
  const dataDir = join(tmpdir(), `sb-cluster-${randomUUID()}`)
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  return {
    MONGO_URL: links.mongoUrl,
    NATS_URL: links.natsUrl,
    API_KEYS,
    UPLOAD_SIGNING_SECRET: 'test-signing-secret-0123456789abcdef',
    DATA_DIR: dataDir,
    ENGINE_HEARTBEAT_MS: '250',
    ENGINE_LEASE_RENEW_MS: '500',
    LOG_LEVEL: 'warn',
    ...extra,
  }
}

/** The tail of every process's output, for a failure message. */
export const outputsOf = (procs: Proc[], tail = 4000) => () =>
  procs.map(p => `--- ${p.name}${p.alive() ? '' : ' (exited)'}\n${p.output().slice(-tail)}`).join('\n')

/** Two gateways and two engine nodes of one cluster, started together: [gateway-a, gateway-b, engine-1, engine-2]. */
export function startTwoByTwo(t: Teardown, env: Record<string, string>): Promise<[Proc, Proc, Proc, Proc]> {
  return Promise.all([
    startProcess(t, 'gateway-a', { ...env, ROLE: 'gateway' }),
    startProcess(t, 'gateway-b', { ...env, ROLE: 'gateway' }),
    startProcess(t, 'engine-1', { ...env, ROLE: 'engine' }),
    startProcess(t, 'engine-2', { ...env, ROLE: 'engine' }),
  ])
}
