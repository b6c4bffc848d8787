// The fuzz suite (issue 10): property-based, over every operation of the published
// /openapi.json, against a real service process over HTTP, four requests in flight at a time,
// plus raw sockets for what lies below HTTP parsing. After every request: the process lives, no
// 5xx (a 503 only for a capacity the run itself filled), every 4xx is JSON with `code` and
// `message`, an answer within 5 s, no API key echoed, no other account's data (the requests are
// account A's; no answer, listings included, holds an id, contact identifier or address that
// only account B has, unless the request itself carried it), and a body that matches the
// document where the document describes it. A property that throws fails the run like a broken
// invariant. Throughout, the process's event-loop delay is read every 200 ms: a window whose
// longest delay reaches FUZZ_STALL_MS fails the run, naming the requests in flight. Valid flows
// still work at the end.
//
//   FUZZ_SECONDS=60 (default 45 here; `make fuzz` runs 600)   FUZZ_SEED=<n> [FUZZ_PATH=<p>] to replay
//   FUZZ_STALL_MS: the longest loop delay allowed (`make fuzz`: 100; default 400, see STALL_MS)
import t from 'tap'
import fc from 'fast-check'
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js'
import addFormats from 'ajv-formats'
import { request } from 'node:http'
import { connect } from 'node:net'
import { mkdtempSync } from 'node:fs'
import { availableParallelism, loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { API_KEYS, KEYS } from '../support/harness.js'
import { startProcess, waitHealthy, type Proc } from '../support/processes.js'
import { operationsOf, requestFor, type Fixtures, type FuzzRequest } from './hostile.js'

const SECONDS = Number(process.env.FUZZ_SECONDS ?? 45)
const SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : Date.now() % 2 ** 31
const PATH = process.env.FUZZ_PATH
const ANSWER_WITHIN_MS = 5000
const SECRETS = Object.values(KEYS)
/** Requests in flight at once, as a client with a small pool sends them. */
const IN_FLIGHT = 4
/**
 * The longest event-loop delay a window may see. `make fuzz` holds the service to 100 ms. The
 * run inside `make test` shares two cores with another test file and this process's own client
 * (fast-check, the answer checks), and what it measures is a timer's lateness: a process the OS
 * leaves waiting for a core is late too, for the machine's reasons. Stalls of the service's own
 * (a 5 MB body validated whole: 1-13 s) stay far past 400 ms, so the short run still catches them.
 */
const STALL_MS = Number(process.env.FUZZ_STALL_MS ?? 400)
/** How often the loop's delay is read: the longest delay since the last read (the window). */
const WATCH_EVERY_MS = 200
/** 503 refusals the run may cause by filling a capacity itself, by the `reason` the answer gives. */
const CAPACITY_REASONS = new Set(['streams', 'supervision_streams', 'turns'])

interface Answer {
  status: number
  contentType: string
  text: string
  ms: number
}

/** Sends one request exactly as generated; resolves with the answer, or a string saying why none came. */
function send(port: number, r: FuzzRequest): Promise<Answer | string> {
  const started = Date.now()
  return new Promise(resolve => {
    let req: ReturnType<typeof request>
    try {
      const headers: Record<string, string> = { ...r.headers }
      // Framed explicitly: node sends a DELETE's body unframed unless told (then it is not HTTP).
      if (r.body !== undefined) {
        if (r.chunked) headers['transfer-encoding'] = 'chunked'
        else headers['content-length'] = String(Buffer.byteLength(r.body))
      }
      req = request({ host: '127.0.0.1', port, method: r.method, path: r.path, headers, agent: false })
    } catch (error) {
      return resolve(`client refused to send: ${(error as Error).message}`) // node's own header/path checks
    }
    const timer = setTimeout(() => {
      req.destroy()
      resolve(`no answer within ${ANSWER_WITHIN_MS} ms`)
    }, ANSWER_WITHIN_MS)
    req.on('response', res => {
      const contentType = String(res.headers['content-type'] ?? '')
      const chunks: Buffer[] = []
      const done = () => {
        clearTimeout(timer)
        resolve({ status: res.statusCode ?? 0, contentType, text: Buffer.concat(chunks).toString('utf8'), ms: Date.now() - started })
      }
      if (contentType.startsWith('text/event-stream')) {
        // A stream stays open: take what arrives first, then hang up (a client going away).
        res.once('data', (chunk: Buffer) => {
          chunks.push(chunk)
          req.destroy()
          done()
        })
        return
      }
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', done)
      res.on('error', () => done())
    })
    req.on('error', error => {
      clearTimeout(timer)
      resolve(`connection failed: ${(error as Error).message}`)
    })
    if (r.body === undefined) return void req.end()
    if (!r.chunked) return void req.end(r.body)
    const middle = Math.floor(r.body.length / 2)
    req.write(r.body.slice(0, middle))
    setImmediate(() => req.end(r.body!.slice(middle)))
  })
}

/** Answer schemas of the document, by "METHOD template status". */
function responseValidators(doc: any): (op: string, status: number) => ValidateFunction | undefined {
  const ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: true })
  addFormats.default(ajv)
  ajv.addSchema(doc, 'openapi.json')
  const cache = new Map<string, ValidateFunction | undefined>()
  return (op, status) => {
    const key = `${op} ${status}`
    if (cache.has(key)) return cache.get(key)
    const [method, template] = op.split(' ') as [string, string]
    const responses = doc.paths[template]?.[method.toLowerCase()]?.responses ?? {}
    // An error status the operation does not list is described by its `default` response.
    const which = responses[String(status)] ? String(status) : status >= 400 ? 'default' : String(status)
    const schema = responses[which]?.content?.['application/json']?.schema
    const pointer = `openapi.json#/paths/${template.replace(/~/g, '~0').replace(/\//g, '~1')}/${method.toLowerCase()}/responses/${which}/content/application~1json/schema`
    const validate = schema ? ajv.compile({ $ref: pointer }) : undefined
    cache.set(key, validate)
    return validate
  }
}

/** What account B holds and account A does not: [what, value]. */
type ForeignData = Array<[string, string]>

/** Why an answer breaks an invariant, or null. */
function violation(r: FuzzRequest, answer: Answer | string, validatorFor: ReturnType<typeof responseValidators>, foreign: ForeignData): string | null {
  if (typeof answer === 'string') return answer.startsWith('client refused') ? null : answer
  if (answer.status >= 500 && !refusedForCapacity(answer)) return `status ${answer.status}: ${answer.text.slice(0, 300)}`
  for (const secret of SECRETS) if (answer.text.includes(secret)) return 'an API key was echoed in the answer'
  // Every request is account A's (or no account's): B's data may only come back as an echo of
  // what the request carried (a 404 naming the id it was asked for).
  const carried = `${r.path}\n${r.body ?? ''}\n${Object.values(r.headers).join('\n')}`
  for (const [what, value] of foreign) {
    if (answer.text.includes(value) && !carried.includes(value)) return `${answer.status} holds account B's ${what} ${value}: ${answer.text.slice(0, 300)}`
  }
  if (r.crossAccount && answer.status < 300) return `another account's resource answered ${answer.status}`
  if (answer.status >= 400) {
    let body: any
    try {
      body = JSON.parse(answer.text)
    } catch {
      return `${answer.status} without a JSON body: ${answer.text.slice(0, 200)}`
    }
    if (typeof body?.code !== 'string' || typeof body?.message !== 'string') return `${answer.status} without code and message: ${answer.text.slice(0, 200)}`
  }
  if (answer.contentType.startsWith('application/json') && answer.text) {
    const validate = validatorFor(r.operation, answer.status)
    if (validate && !validate(JSON.parse(answer.text))) return `${answer.status} body does not match /openapi.json: ${JSON.stringify(validate.errors?.slice(0, 2))}`
  }
  return null
}

/** A 503 OVERLOADED for a capacity the run filled itself (streams, turns): not one for a late or busy loop. */
function refusedForCapacity(answer: Answer): boolean {
  if (answer.status !== 503) return false
  try {
    const body = JSON.parse(answer.text)
    return body.code === 'OVERLOADED' && CAPACITY_REASONS.has(body.reason)
  } catch {
    return false
  }
}

/**
 * Reads the process's longest event-loop delay every WATCH_EVERY_MS from its /metrics
 * (nodejs_eventloop_lag_max_seconds: prom-client's monitorEventLoopDelay, reset by each read,
 * 10 ms resolution), and names what was in flight in each window that reached `limitMs`.
 */
class LoopWatch {
  maxMs = 0
  windows = 0
  readonly stalls: string[] = []
  /** The longest windows and what was in flight in each, longest first. */
  readonly worst: Array<{ ms: number; what: string[] }> = []
  private readonly inFlight = new Map<number, { what: string; bytes: number; ended?: number }>()
  private next = 0
  private running = false
  private done: Promise<void> = Promise.resolve()

  constructor(private readonly metricsBase: string, private readonly limitMs: number) {}

  private async read(): Promise<number> {
    const text = await (await fetch(`${this.metricsBase}/metrics`)).text()
    const max = /^nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(text)?.[1]
    if (max === undefined) throw new Error('nodejs_eventloop_lag_max_seconds is not in /metrics')
    return Number(max) * 1000
  }

  async start() {
    await this.read() // the window starts now, not at the process's start
    this.running = true
    this.done = (async () => {
      while (this.running) {
        await new Promise(r => setTimeout(r, WATCH_EVERY_MS))
        // A read that fails (the process gone) is the other checks' to report.
        const ms = await this.read().catch(() => 0)
        this.windows++
        this.maxMs = Math.max(this.maxMs, ms)
        // The largest bodies first: what costs the loop most, if anything in flight did.
        const flying = [...this.inFlight.values()].sort((a, b) => b.bytes - a.bytes)
        const what = [...flying.slice(0, 6).map(w => w.what), ...(flying.length > 6 ? [`and ${flying.length - 6} more`] : [])]
        // The machine's load says whether the OS, not the service, may have held the loop back.
        if (ms >= this.limitMs) this.stalls.push(`loop delay ${Math.round(ms)} ms (load average ${loadavg()[0]!.toFixed(1)} on ${availableParallelism()} cores) while in flight: ${what.join(' || ') || '(nothing)'}`)
        if (this.worst.length < 3 || ms > this.worst[2]!.ms) {
          this.worst.push({ ms, what })
          this.worst.sort((a, b) => b.ms - a.ms).splice(3)
        }
        for (const [id, w] of this.inFlight) if (w.ended !== undefined) this.inFlight.delete(id)
      }
    })()
  }

  /** Runs `work` labelled `what` (carrying a body of `bytes`): a window it overlaps names it. */
  async during<T>(what: string, work: () => Promise<T>, bytes = 0): Promise<T> {
    const id = this.next++
    const entry: { what: string; bytes: number; ended?: number } = { what, bytes }
    this.inFlight.set(id, entry)
    try {
      return await work()
    } finally {
      entry.ended = Date.now()
    }
  }

  async stop() {
    this.running = false
    await this.done
  }

  /** Major collections of the process: how many, and how many paused it 100 ms or more (prom-client's nodejs_gc_duration_seconds). */
  async majorCollections(): Promise<string> {
    const text = await (await fetch(`${this.metricsBase}/metrics`)).text()
    const count = (le: string) => {
      const line = text.split('\n').find(l => l.startsWith(`nodejs_gc_duration_seconds_bucket{le="${le}",kind="major"} `))
      return line ? Number(line.split(' ')[1]) : 0
    }
    return `${count('+Inf')} major collections, ${count('+Inf') - count('0.1')} of 100 ms or more`
  }
}

const describe = (r: FuzzRequest) =>
  `${r.method} ${r.path.slice(0, 120)}${r.body === undefined ? '' : ` [${r.body.length} B${r.chunked ? ' chunked' : ''}: ${r.body.slice(0, 40)}]`}`

async function json(base: string, method: string, path: string, body?: unknown, key: string = KEYS.acme) {
  const res = await fetch(base + path, { method, headers: { apikey: key, 'content-type': 'application/json', userid: 'fuzz-setup' }, body: body === undefined ? undefined : JSON.stringify(body) })
  const text = await res.text()
  return { status: res.status, json: text ? JSON.parse(text) : undefined }
}

/** A session of `key`'s account: its ids once Initialized arrived (the stream is then closed; the session lives on). */
async function openSession(base: string, key: string) {
  const controller = new AbortController()
  const res = await fetch(`${base}/assistants-channel/api/v1/channel/api/eventstream/demo`, { method: 'POST', headers: { apikey: key, 'content-type': 'application/json' }, body: '{}', signal: controller.signal })
  if (res.status !== 200) throw Object.assign(new Error(`opening a session: ${res.status} ${await res.text()}`), { status: res.status })
  const reader = res.body!.getReader()
  let text = ''
  while (!/event: Initialized\ndata: (.*)\n/.test(text)) {
    const chunk = await reader.read()
    if (chunk.done) throw new Error(`the stream ended before Initialized: ${text.slice(0, 300)}`)
    text += new TextDecoder().decode(chunk.value)
  }
  controller.abort()
  const data = JSON.parse(/event: Initialized\ndata: (.*)\n/.exec(text)![1]!)
  return { sessionId: data.sessionId as string, consumerId: data.consumerId as string }
}

/** Opens a session; when the fuzzer filled the crew's slots (429), closes one live session as the error advises, then retries. */
async function openSessionFreeingASlot(base: string, key: string) {
  try {
    return await openSession(base, key)
  } catch (error) {
    if ((error as { status?: number }).status !== 429) throw error
    const live = await json(base, 'GET', '/engine/api/administration/sessions?state=active&limit=1', undefined, key)
    const victim = live.json?.data?.[0]?.sessionId
    if (!victim) throw error
    await json(base, 'DELETE', `/engine/api/administration/session/${victim}`, undefined, key)
    // The slot is freed once the session's record is a tombstone, just after the 204.
    for (let attempt = 1; ; attempt++) {
      try {
        return await openSession(base, key)
      } catch (again) {
        if ((again as { status?: number }).status !== 429 || attempt === 50) throw again
        await new Promise(r => setTimeout(r, 100))
      }
    }
  }
}

/** Each account's own contact identifier, address and blocked address: B's are found nowhere else. */
const ACCOUNT_DATA = {
  [KEYS.acme]: { identifier: 'f0', address: '34600000009', blocked: '34600000019' },
  [KEYS.globex]: { identifier: 'globex-only-contact', address: '34699900001', blocked: '34699900002' },
} as Record<string, { identifier: string; address: string; blocked: string }>

async function fixturesFor(base: string): Promise<{ fixtures: Fixtures; foreign: ForeignData }> {
  const account = async (key: string) => {
    const data = ACCOUNT_DATA[key]!
    const batch = await json(base, 'POST', '/dialer/v1/batches', { name: 'fuzz', channel: 'phone', duplicateStrategy: 'merge' }, key)
    const load = await json(base, 'POST', `/dialer/v1/batches/${batch.json.batchId}/contacts`, { identifier: data.identifier, name: 'Ana', addresses: [{ address: data.address, type: 'phone', priority: 1 }] }, key)
    const blocked = await json(base, 'POST', '/dialer/v1/blocked-addresses', { address: data.blocked, addressType: 'phone' }, key)
    if (blocked.status !== 200) throw new Error(`blocking an address: ${blocked.status} ${JSON.stringify(blocked.json)}`)
    const upload = await json(base, 'POST', '/dialer/v1/batches/upload-url', { fileName: 'f.csv', fileType: 'text/csv' }, key)
    const session = await openSession(base, key)
    let contactId: string | undefined
    for (let i = 0; i < 200 && !contactId; i++) {
      contactId = (await json(base, 'GET', `/dialer/v1/batches/${batch.json.batchId}/contacts`, undefined, key)).json?.data?.[0]?.contactId
      if (!contactId) await new Promise(r => setTimeout(r, 100))
    }
    // B's contact must exist, or the scan would look for data that is nowhere to be leaked.
    if (!contactId) throw new Error(`the fixture contact of ${key} was not loaded within 20 s`)
    return {
      batchId: batch.json.batchId,
      operationId: load.json.operationId,
      tempCsvKey: upload.json.tempCsvKey,
      key: upload.json.tempCsvKey,
      sessionId: session.sessionId,
      consumerId: session.consumerId,
      ...(contactId ? { contactId } : {}),
      crewId: 'demo',
      REPORT_ID: 'sessions-overview',
      reportId: 'sessions-overview',
    }
  }
  const own = await account(KEYS.acme)
  const foreign = await account(KEYS.globex)
  // Shared by every account: reaching them with another key is not a cross-account read.
  for (const shared of ['crewId', 'REPORT_ID', 'reportId']) delete (foreign as Record<string, string>)[shared]
  const ours = new Set<string>([...Object.values(own), ...Object.values(ACCOUNT_DATA[KEYS.acme]!)])
  const theirs: ForeignData = [...Object.entries(foreign), ...Object.entries(ACCOUNT_DATA[KEYS.globex]!)]
  return {
    fixtures: { own, foreign, keys: { own: KEYS.acme, other: KEYS.globex, dialerOnly: KEYS.acmeDialerOnly } },
    foreign: theirs.filter(([, value]) => !ours.has(value)),
  }
}

/** Heads below HTTP parsing: what the uWS parser itself sees. Each must be answered or closed, never hang the process. */
const RAW_HEADS = [
  `GET /healthz HTTP/1.1\r\nHost: x\r\napikey: ${'k'}\u0001\r\n\r\n`,
  `GET /healthz HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 300 }, (_, i) => `x-h${i}: v`).join('\r\n')}\r\n\r\n`,
  `GET /healthz HTTP/1.1\r\nHost: x\r\nx-big: ${'a'.repeat(64 * 1024)}\r\n\r\n`,
  `GET /${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
  'GARBAGE\r\n\r\n',
  'GET /healthz HTTP/1.1\nHost: x\n\n',
  'POST /dialer/v1/batches HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello',
  'POST /dialer/v1/batches HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nzz\r\n',
  'POST /dialer/v1/batches HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffff\r\n',
]

function rawExchange(port: number, bytes: Buffer): Promise<string> {
  return new Promise(resolve => {
    const socket = connect(port, '127.0.0.1')
    let got = ''
    const finish = (how: string) => {
      clearTimeout(timer)
      socket.destroy()
      resolve(how)
    }
    // A parser that waits for more bytes is allowed to wait; the process must stay well meanwhile.
    const timer = setTimeout(() => finish(`waiting: ${got.slice(0, 30)}`), 500)
    socket.on('data', d => {
      got += d.toString('latin1')
      if (/^HTTP\/1\.1 \d{3}/.test(got)) finish(got.slice(0, 12))
    })
    socket.on('error', () => finish('reset'))
    socket.on('close', () => finish(got ? got.slice(0, 12) : 'closed'))
    socket.write(bytes)
  })
}

t.test('fuzz: hostile requests against a real service process', async t => {
  const proc: Proc = await startProcess(t, 'fuzz', {
    API_KEYS,
    LOG_LEVEL: 'error',
    DATA_DIR: mkdtempSync(join(tmpdir(), 'sb-fuzz-')),
    AUTH_FAILURE_LIMIT: '0', // the fuzzer sends wrong keys on purpose; the throttle has its own tests
    // `make fuzz`: load shedding as deployed (FUZZ_OVERLOAD_LOOP_DELAY_MS=200), so a loop the run
    // stalls refuses new sessions and messages with 503 and the run sees it. Inside `make test`
    // it is off, as in the other test processes: there the machine itself (two cores, another
    // test file beside it) makes the loop late, and the stall bound above watches the loop.
    OVERLOAD_LOOP_DELAY_MS: process.env.FUZZ_OVERLOAD_LOOP_DELAY_MS ?? '0',
    SSE_HEARTBEAT_MS: '60000',
    // The engine's write thread as the machine's cores default it (off on CI's two);
    // FUZZ_WRITE_THREAD=1 or 0 chooses.
    ...(process.env.FUZZ_WRITE_THREAD ? { ENGINE_WRITE_THREAD: process.env.FUZZ_WRITE_THREAD } : {}),
  })
  await waitHealthy(proc)
  const doc = await (await fetch(`${proc.base}/openapi.json`)).json()
  const operations = operationsOf(doc)
  t.ok(operations.length >= 40, `the document lists ${operations.length} operations`)
  const { fixtures, foreign } = await fixturesFor(proc.base)
  t.ok(foreign.length >= 9, `account B's data looked for in every answer: ${foreign.map(([what]) => what).join(', ')}`)
  const validatorFor = responseValidators(doc)
  const failures: string[] = []
  let sent = 0
  const reached = new Set<string>()

  console.log(`# fuzz seed ${SEED}${PATH ? ` path ${PATH}` : ''}, ${SECONDS} s, ${IN_FLIGHT} in flight, loop delay under ${STALL_MS} ms; replay with FUZZ_SEED=${SEED}`)
  const watch = new LoopWatch(proc.metricsBase, STALL_MS)
  await watch.start()
  const request1 = fc.constantFrom(...operations).chain(op => requestFor(op, fixtures))
  const property = fc.asyncProperty(fc.array(request1, { minLength: IN_FLIGHT, maxLength: IN_FLIGHT }), async requests => {
    const problems = await Promise.all(
      requests.map(async request => {
        sent++
        reached.add(request.operation)
        const answer = await watch.during(describe(request), () => send(proc.port, request), request.body?.length)
        const problem = violation(request, answer, validatorFor, foreign) ?? (proc.alive() ? null : `the process exited: ${proc.output().slice(-2000)}`)
        return problem ? `${request.method} ${request.path.slice(0, 200)} → ${problem}` : null
      }),
    )
    const found = problems.filter((p): p is string => p !== null)
    failures.push(...found)
    return found.length === 0
  })
  const result = await fc.check(property, {
    seed: SEED,
    ...(PATH ? { path: PATH } : {}),
    numRuns: 1_000_000,
    interruptAfterTimeLimit: SECONDS * 1000,
    markInterruptAsFailure: false,
    endOnFailure: true,
  })
  // The run's own verdict: a property that throws (not only one that returns false) ends the
  // run as failed without adding to `failures`.
  let counterexample = ''
  if (result.failed) {
    console.log(`# fuzz failure: FUZZ_SEED=${result.seed} FUZZ_PATH=${result.counterexamplePath}`)
    const examples = result.counterexample?.[0] ?? []
    counterexample = JSON.stringify(examples.map(example => ({ ...example, path: example.path.slice(0, 300), body: example.body?.slice(0, 300), bodyBytes: example.body?.length })))
    console.log(`# counterexample: ${counterexample}`)
  }
  const error = result.errorInstance instanceof Error ? result.errorInstance.message : String(result.errorInstance)
  t.notOk(
    result.failed,
    result.failed
      ? `the run failed: ${error.slice(0, 500)}; counterexample ${counterexample}; replay with FUZZ_SEED=${result.seed} FUZZ_PATH=${result.counterexamplePath}`
      : `the run ended without a failure (seed ${SEED}, ${result.numRuns} runs${result.interrupted ? ', stopped at the time limit' : ''})`,
  )
  t.same(failures, [], `${sent} requests over ${reached.size} operations; invariants held (seed ${SEED})`)
  t.ok(reached.size >= Math.min(operations.length, 30) || PATH, `reached ${reached.size} of ${operations.length} operations`)

  for (const head of RAW_HEADS) {
    const outcome = await watch.during(`raw head ${JSON.stringify(head.slice(0, 40))}`, () => rawExchange(proc.port, Buffer.from(head, 'latin1')))
    t.notMatch(outcome, /^HTTP\/1\.1 5/, `raw head ${JSON.stringify(head.slice(0, 40))}: ${outcome}`)
    t.ok(proc.alive(), 'the process lives')
  }
  const junk = await fc.check(
    fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 4096 }), async bytes => {
      const outcome = await watch.during(`${bytes.length} random bytes`, () => rawExchange(proc.port, Buffer.from(bytes)))
      return !/^HTTP\/1\.1 5/.test(outcome) && proc.alive()
    }),
    { seed: SEED, numRuns: 20 },
  )
  t.notOk(junk.failed, `random bytes on a raw socket (seed ${SEED}${junk.failed ? `, path ${junk.counterexamplePath}: ${String(junk.errorInstance).slice(0, 300)}` : ''})`)
  await watch.stop()
  console.log(`# longest event-loop delay: ${Math.round(watch.maxMs)} ms over ${watch.windows} windows of ${WATCH_EVERY_MS} ms; ${await watch.majorCollections()}`)
  for (const { ms, what } of watch.worst) console.log(`#   ${Math.round(ms)} ms: ${what.join(' || ') || '(nothing in flight)'}`)
  t.same(watch.stalls, [], `no window's loop delay reached ${STALL_MS} ms (longest ${Math.round(watch.maxMs)} ms, ${watch.windows} windows; seed ${SEED})`)

  // Valid flows still work after all of it.
  t.equal((await fetch(`${proc.base}/healthz`)).status, 200, 'healthy at the end')
  const batch = await json(proc.base, 'POST', '/dialer/v1/batches', { name: 'after fuzz', channel: 'phone', duplicateStrategy: 'merge' })
  t.equal(batch.status, 201)
  const load = await json(proc.base, 'POST', `/dialer/v1/batches/${batch.json.batchId}/contacts`, { contacts: [{ identifier: 'a1', name: 'Ana', addresses: [{ address: '34600000001', type: 'phone', priority: 1 }] }] })
  t.equal(load.status, 202)
  let op: any
  for (let i = 0; i < 100 && op?.status !== 'succeeded'; i++) {
    op = (await json(proc.base, 'GET', load.json.operationUrl)).json
    if (op?.status !== 'succeeded') await new Promise(r => setTimeout(r, 50))
  }
  t.equal(op?.status, 'succeeded', 'a load still completes')
  const session = await openSessionFreeingASlot(proc.base, KEYS.acme)
  const sentMessage = await json(proc.base, 'PUT', `/assistants-channel/api/v1/channel/api/eventstream/${session.sessionId}/${session.consumerId}`, { message: 'hola' })
  t.equal(sentMessage.status, 201, 'a session still takes messages')
  t.ok(proc.alive(), 'the process lived through the whole run')
})
