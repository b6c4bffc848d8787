// Resync bench: what a gateway's reconnect to NATS costs the server, with BENCH_FEEDS sessions
// streamed through it. One engine and two gateways in this process (ROLE=engine, ROLE=gateway),
// a real nats-server (JetStream) and the MongoDB wire-protocol test server; the measured gateway
// reaches NATS through a TCP proxy that is cut for BENCH_CUT_MS and healed. In each round, side
// by side:
//   quiet   nothing happened while it was away: each feed reads its log's last entry, finds its
//           own position, and stops there;
//   missed  every session answered a message (sent through the other gateway) while it was away:
//           each feed reads its log back (a reader created, a fetch, the reader deleted), which
//           before 2026-11-26 night every feed did on every reconnect, quiet or not.
// Counted from a probe subscribed to $JS.API.>: the JetStream API requests from the heal until
// 1 s without any, by kind, and the time of the last one; for `missed`, the time until every
// stream has its reply. Writes bench/resync/results.json.
//
//   node --import @tapjs/typescript/import bench/resync/run.ts
//   BENCH_FEEDS=1000 BENCH_ROUNDS=3 BENCH_CUT_MS=300
import { connect } from '@nats-io/transport-node'
import { call, mongoUrlFor, startTestService } from '../../test/support/harness.js'
import { startNatsServer } from '../../test/support/nats-server.js'
import { CHANNEL, createSession } from '../../test/support/sse.js'
import { startTcpProxy } from '../../test/support/tcp-proxy.js'
import { crewsFile } from '../../test/engine/fixtures/crews.js'
import { runHeader, writeResults } from '../support.js'

const FEEDS = Number(process.env.BENCH_FEEDS ?? 1000)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const CUT_MS = Number(process.env.BENCH_CUT_MS ?? 300)
const IN_FLIGHT = 25
const HELLO = 'Hello! How can I help you today?'
const sleep = (ms: number) => new Promise(r => setTimeout(r, ms))

interface Case {
  requests: number
  readersCreated: number
  lastEntryReads: number
  /** From the heal to the last API request (the resync's end, seen from the server). */
  lastRequestMs: number
  /** `missed` only: from the heal until every stream had its reply. */
  allDeliveredMs?: number
}

const started = Date.now()
const teardowns: (() => unknown)[] = []
const t = { teardown: (fn: () => unknown) => void teardowns.push(fn) }
const inBatches = async <T>(items: T[], run: (item: T) => Promise<unknown>) => {
  for (let i = 0; i < items.length; i += IN_FLIGHT) await Promise.all(items.slice(i, i + IN_FLIGHT).map(run))
}

try {
  const nats = await startNatsServer(t)
  const link = await startTcpProxy(nats.port)
  t.teardown(() => link.close())
  const env = {
    MONGO_URL: await mongoUrlFor(t),
    ENGINE_HEARTBEAT_MS: '200',
    ENGINE_LEASE_RENEW_MS: '500',
    OVERLOAD_MAX_STREAMS: '0',
    CREWS_FILE: crewsFile({ patchDemo: { maxConcurrentSessions: FEEDS * 2 } }),
  }
  await startTestService(t, { env: { ...env, NATS_URL: nats.url, ROLE: 'engine' } })
  const measured = await startTestService(t, { env: { ...env, NATS_URL: `nats://127.0.0.1:${link.port}`, ROLE: 'gateway' } })
  const other = await startTestService(t, { env: { ...env, NATS_URL: nats.url, ROLE: 'gateway' } })
  await sleep(400) // both gateways have seen the engine's heartbeat

  const sessions: Awaited<ReturnType<typeof createSession>>[] = []
  await inBatches(Array.from({ length: FEEDS }), async () => sessions.push(await createSession(measured.base)))
  console.error(`${FEEDS} streams open through the measured gateway`)

  const probe = await connect({ servers: nats.url })
  t.teardown(() => probe.close())
  const api = { requests: 0, readersCreated: 0, lastEntryReads: 0, lastAt: 0 }
  probe.subscribe('$JS.API.>', {
    callback: (_error, msg) => {
      api.requests++
      api.lastAt = performance.now()
      if (msg.subject.startsWith('$JS.API.CONSUMER.CREATE.')) api.readersCreated++
      if (msg.subject.startsWith('$JS.API.STREAM.MSG.GET.') || msg.subject.startsWith('$JS.API.DIRECT.GET.')) api.lastEntryReads++
    },
  })
  await probe.flush()
  await sleep(1000)

  /** Cuts the measured gateway off, runs `meanwhile`, heals, and counts until 1 s without a request. */
  const reconnect = async (meanwhile: () => Promise<unknown>, delivered?: () => Promise<unknown>): Promise<Case> => {
    link.cut()
    await sleep(CUT_MS)
    await meanwhile()
    Object.assign(api, { requests: 0, readersCreated: 0, lastEntryReads: 0, lastAt: 0 })
    link.heal()
    const healedAt = performance.now()
    const allDelivered = delivered?.().then(() => performance.now() - healedAt)
    while (api.requests === 0 || performance.now() - api.lastAt < 1000) await sleep(50)
    const { requests, readersCreated, lastEntryReads } = api
    return { requests, readersCreated, lastEntryReads, lastRequestMs: Math.round(api.lastAt - healedAt), ...(allDelivered ? { allDeliveredMs: Math.round(await allDelivered) } : {}) }
  }

  const rounds: { round: number; quiet: Case; missed: Case }[] = []
  for (let round = 1; round <= ROUNDS; round++) {
    const quiet = await reconnect(async () => {})
    const before = new Map(sessions.map(s => [s, s.stream.events.filter(e => e.event === 'assistant.message').length]))
    const missed = await reconnect(
      async () => {
        // Every session answers a message while the measured gateway cannot hear it.
        await inBatches(sessions, async s => {
          const put = await call(other.base, 'PUT', `${CHANNEL}/${s.sessionId}/${s.consumerId}`, { body: { message: 'hello' } })
          if (put.status !== 201) throw new Error(`message refused: ${put.status} ${put.text}`)
        })
        await sleep(1000) // the replies are out
      },
      () => Promise.all(sessions.map(s => s.stream.next(e => e.event === 'assistant.message' && e.data.text === HELLO && s.stream.events.filter(x => x.event === 'assistant.message').length > before.get(s)!, 60_000))),
    )
    rounds.push({ round, quiet, missed })
    console.error(
      `round ${round}: quiet ${quiet.requests} requests (${quiet.readersCreated} readers), done ${quiet.lastRequestMs} ms after the heal; ` +
        `missed ${missed.requests} requests (${missed.readersCreated} readers), done ${missed.lastRequestMs} ms, every reply delivered ${missed.allDeliveredMs} ms after the heal`,
    )
  }
  for (const s of sessions) s.stream.close()
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!
  const summary = {
    feeds: FEEDS,
    quiet: { requestsPerFeed: median(rounds.map(r => r.quiet.requests)) / FEEDS, lastRequestMs: median(rounds.map(r => r.quiet.lastRequestMs)) },
    missed: {
      requestsPerFeed: median(rounds.map(r => r.missed.requests)) / FEEDS,
      lastRequestMs: median(rounds.map(r => r.missed.lastRequestMs)),
      allDeliveredMs: median(rounds.map(r => r.missed.allDeliveredMs!)),
    },
  }
  const ratio = { requests: summary.quiet.requestsPerFeed / summary.missed.requestsPerFeed, time: summary.quiet.lastRequestMs / summary.missed.lastRequestMs }
  console.log(
    `${FEEDS} feeds, median of ${ROUNDS}: quiet reconnect ${summary.quiet.requestsPerFeed.toFixed(2)} API requests per feed, done in ${summary.quiet.lastRequestMs} ms; ` +
      `with every session missed ${summary.missed.requestsPerFeed.toFixed(2)} per feed, done in ${summary.missed.lastRequestMs} ms ` +
      `(replies all delivered ${summary.missed.allDeliveredMs} ms); quiet ÷ missed: requests ×${ratio.requests.toFixed(2)}, time ×${ratio.time.toFixed(2)}`,
  )
  writeResults(import.meta.url, started, { ...runHeader(started), config: { feeds: FEEDS, rounds: ROUNDS, cutMs: CUT_MS }, summary, ratio, rounds })
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
process.exit(0)
