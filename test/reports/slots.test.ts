// The pre-aggregated blocks (reports/slots.ts) against the records they summarise: on random
// sessions and random ranges in zones with half- and quarter-hour offsets, a 30-minute DST shift
// and DST days (one changing at midnight), every grouping of execute-report and every page of
// sessions-detail read from the blocks equal what the records alone give (the path used before
// the blocks existed, and while older records are migrated). Plus: a session's contribution is
// added once however often its record is written, and records from before the blocks are
// migrated in slices.
import t from 'tap'
import fc from 'fast-check'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { MemoryStore } from '../../platform/store/memory-store.js'
import { MongoStore } from '../../platform/store/mongo-store.js'
import { LmdbStore } from '../../platform/store/lmdb-store.js'
import type { Store } from '../../platform/store/index.js'
import { SESSION_RECORDS, SessionRecorder, type SessionRecordDoc, type SessionStatus } from '../../reports/index.js'
import { parseDefinitions } from '../../reports/definitions.js'
import { executeReport, type ReportSources } from '../../reports/execute-report.js'
import { CompiledReport } from '../../reports/metrics.js'
import { sessionsDetail, type DetailSources } from '../../reports/sessions-detail.js'
import { SLOT_COUNTS, SLOT_STATS, SLOT_STATS_OPTIONS } from '../../reports/slots.js'
import { SlotMigration } from '../../reports/slot-migration.js'
import { createLogger } from '../../platform/logger.js'
import type { Grouping } from '../../reports/time-buckets.js'
import { mongoUrlFor } from '../support/harness.js'

const definitions = parseDefinitions(
  {
    reports: [
      {
        id: 'everything',
        metrics: {
          sessions: { op: 'count' },
          live: { op: 'count', where: { status: ['active', 'paused'] } },
          completed: { op: 'count', where: { status: 'completed' } },
          byAgent: { op: 'count', where: { agent_id: 'agent-b', end_reason: ['hangup', 'idle_timeout'] } },
          avgDuration: { op: 'avg', field: 'duration' },
          minDuration: { op: 'min', field: 'duration', where: { status: 'completed' } },
          maxMessages: { op: 'max', field: 'messages' },
          messages: { op: 'sum', field: 'messages' },
          toolCalls: { op: 'sum', field: 'tool_calls' },
          p50Duration: { op: 'percentile', field: 'duration', p: 50 },
          p90Abandoned: { op: 'percentile', field: 'duration', p: 90, where: { status: 'abandoned' } },
          p99Messages: { op: 'percentile', field: 'messages', p: 99 },
          completedShare: { op: 'ratio', of: ['completed', 'sessions'] },
        },
      },
    ],
  },
  'test',
)
const report = new CompiledReport(definitions.get('everything')!)

/** Around each date: zones whose calendar buckets are not whole UTC hours, or move. */
const SCENES: { zone: string; around: string }[] = [
  { zone: 'Asia/Kolkata', around: '2026-03-07T18:30:00Z' }, // +05:30
  { zone: 'Asia/Kathmandu', around: '2026-03-07T18:15:00Z' }, // +05:45
  { zone: 'Australia/Lord_Howe', around: '2026-04-04T15:00:00Z' }, // +11 -> +10:30 at 02:00 local
  { zone: 'Europe/Madrid', around: '2026-10-25T01:00:00Z' }, // fall-back day
  { zone: 'America/New_York', around: '2026-03-08T07:00:00Z' }, // spring-forward day
  { zone: 'America/Santiago', around: '2026-04-05T03:00:00Z' }, // falls back at midnight
]
const STATUSES: SessionStatus[] = ['active', 'paused', 'completed', 'abandoned', 'transferred_to_human', 'error']
const GROUPINGS: (Grouping | null)[] = [null, 'hour', 'day', 'week', 'month']
const WINDOW = 5 * 86_400_000

const recordArb = (center: number) =>
  fc.record({
    start: fc.integer({ min: -WINDOW / 2, max: WINDOW / 2 }),
    quarterEdge: fc.boolean(),
    status: fc.constantFrom(...STATUSES),
    agent: fc.constantFrom('agent-a', 'agent-b'),
    reason: fc.constantFrom('hangup', 'idle_timeout', 'user_ended'),
    duration: fc.oneof(fc.integer({ min: 0, max: 200 }), fc.integer({ min: 0, max: 3_000_000 })),
    user: fc.integer({ min: 0, max: 40 }),
    assistant: fc.integer({ min: 0, max: 40 }),
    tools: fc.integer({ min: 0, max: 5 }),
    crew: fc.constantFrom('crew-1', 'crew-1', 'crew-2'),
  }).map(r => {
    // Some sessions start exactly on a quarter boundary, where off-by-one errors live.
    const raw = center + r.start
    const start = r.quarterEdge ? raw - (raw % 900_000) : raw
    const live = r.status === 'active' || r.status === 'paused'
    return {
      accountId: 'acme',
      crew_id: r.crew,
      agent_id: r.agent,
      agents: [r.agent],
      start_time: start,
      end_time: live ? null : start + r.duration,
      duration: live ? null : r.duration,
      status: r.status,
      messages: r.user + r.assistant,
      user_messages: r.user,
      assistant_messages: r.assistant,
      tool_calls: r.tools,
      transfers: 0,
      end_reason: live ? null : r.reason,
    }
  })

const sceneArb = fc.constantFrom(...SCENES).chain(scene => {
  const center = Date.parse(scene.around)
  return fc.record({
    zone: fc.constant(scene.zone),
    records: fc.array(recordArb(center), { maxLength: 120 }),
    from: fc.integer({ min: center - WINDOW / 2 - 3_600_000, max: center }),
    length: fc.integer({ min: 1, max: WINDOW }),
    grouping: fc.constantFrom(...GROUPINGS),
    pageSize: fc.integer({ min: 1, max: 40 }),
  })
})

let serial = 0
const withIds = (records: Omit<SessionRecordDoc, '_id' | 'session_id'>[]): SessionRecordDoc[] =>
  records.map(r => {
    const id = `s${String(++serial).padStart(7, '0')}`
    return { ...r, _id: id, session_id: id }
  })

function sourcesOf(store: Store, ready: boolean): ReportSources & DetailSources {
  return {
    records: store.collection(SESSION_RECORDS),
    counts: store.collection(SLOT_COUNTS),
    stats: store.collection(SLOT_STATS, SLOT_STATS_OPTIONS),
    slotsReady: () => ready,
  }
}

const clock = (now: number) => ({ now: () => now })

/** Every grouping of the report and a sessions-detail walk, from the blocks and from the records. */
async function compare(t: Tap.Test, store: Store, s: { zone: string; from: number; length: number; grouping: Grouping | null; pageSize: number }, now: number) {
  const blocks = sourcesOf(store, true)
  const records = sourcesOf(store, false)
  const q = { crewId: 'crew-1', startTs: s.from, endTs: s.from + s.length, page: 0, pageSize: 1000, timeZone: s.zone, groupByTime: s.grouping }
  const fromBlocks = await executeReport(blocks, report, 'acme', q)
  const fromRecords = await executeReport(records, report, 'acme', q)
  if (JSON.stringify(fromBlocks) !== JSON.stringify(fromRecords)) {
    t.same(fromBlocks, fromRecords, `execute-report ${s.zone} ${s.grouping} ${new Date(s.from).toISOString()} +${s.length}`)
    return false
  }
  const dq = { crewId: 'crew-1', startTs: s.from, endTs: s.from + s.length, page: 0, pageSize: s.pageSize, asOf: now }
  const firstBlocks = await sessionsDetail(blocks, clock(now), 'acme', dq)
  const firstRecords = await sessionsDetail(records, clock(now), 'acme', dq)
  const pages = Math.ceil(firstRecords.pagination.total / s.pageSize)
  // Every page by number (deep pages included) and, page after page, by cursor.
  let cursor = firstBlocks.pagination.nextCursor
  for (let page = 0; page <= pages; page++) {
    const a = await sessionsDetail(blocks, clock(now), 'acme', { ...dq, page })
    const b = await sessionsDetail(records, clock(now), 'acme', { ...dq, page })
    if (JSON.stringify(a) !== JSON.stringify(b)) {
      t.same(a, b, `sessions-detail page ${page} of ${pages}, pageSize ${s.pageSize}`)
      return false
    }
    if (page > 0 && page < pages) {
      const c = await sessionsDetail(blocks, clock(now), 'acme', { ...dq, asOf: undefined, page, cursor })
      if (JSON.stringify(c.data) !== JSON.stringify(b.data)) {
        t.same(c.data, b.data, `sessions-detail cursor page ${page}`)
        return false
      }
      cursor = c.pagination.nextCursor
    }
  }
  return true
}

t.test('blocks equal records: random sessions, ranges, zones and groupings (embedded store)', async t => {
  await fc.assert(
    fc.asyncProperty(sceneArb, async scene => {
      const store = new MemoryStore()
      try {
        const recorder = new SessionRecorder(store)
        await recorder.ensureIndexes()
        const records = withIds(scene.records)
        await recorder.insert(records)
        return await compare(t, store, scene, Date.parse('2027-01-01T00:00:00Z'))
      } finally {
        await store.close()
      }
    }),
    { numRuns: Number(process.env.SLOTS_RUNS ?? 150) },
  )
  t.pass('every scene: all report rows and every sessions-detail page equal')
})

t.test('blocks equal records on MongoDB (the wire-protocol test server)', async t => {
  const url = await mongoUrlFor(t)
  const store = await MongoStore.connect(url)
  t.teardown(() => store.close())
  await fc.assert(
    fc.asyncProperty(sceneArb, async scene => {
      // One database: each run's sessions get a crew of their own.
      const crew = `crew-${++serial}`
      const records = withIds(scene.records).map(r => ({ ...r, crew_id: r.crew_id === 'crew-1' ? crew : `${crew}-other` }))
      const recorder = new SessionRecorder(store)
      await recorder.ensureIndexes()
      await recorder.insert(records)
      const blocks = sourcesOf(store, true)
      const plain = sourcesOf(store, false)
      const q = { crewId: crew, startTs: scene.from, endTs: scene.from + scene.length, page: 0, pageSize: 1000, timeZone: scene.zone, groupByTime: scene.grouping }
      t.same(await executeReport(blocks, report, 'acme', q), await executeReport(plain, report, 'acme', q))
      const dq = { crewId: crew, startTs: scene.from, endTs: scene.from + scene.length, page: 1, pageSize: scene.pageSize, asOf: Date.parse('2027-01-01T00:00:00Z') }
      const now = clock(dq.asOf)
      t.same(await sessionsDetail(blocks, now, 'acme', dq), await sessionsDetail(plain, now, 'acme', dq))
    }),
    { numRuns: Number(process.env.SLOTS_MONGO_RUNS ?? 12) },
  )
})

t.test("a session's contribution is added once, however often its record is written", async t => {
  const store = new MemoryStore()
  t.teardown(() => store.close())
  const recorder = new SessionRecorder(store)
  await recorder.ensureIndexes()
  const start = Date.parse('2026-06-01T10:07:00Z')
  const open = { accountId: 'acme', crewId: 'crew-1', agentId: 'agent-a', startTime: start }
  // Opened twice (a restored session), counts flushed, closed three times at once (a repeated
  // flush, the reaper, a restored node), counts and a transfer arriving after the close.
  await recorder.opened({ ...open, sessionId: 'one' })
  await recorder.opened({ ...open, sessionId: 'one', startTime: start + 5 })
  await recorder.counted('one', { userMessages: 2, assistantMessages: 3, toolCalls: 1 }, { from: 0, to: 9 })
  // The same counts again (a flush repeated, or a restore counting the journal again): once.
  await recorder.counted('one', { userMessages: 2, assistantMessages: 3, toolCalls: 1 }, { from: 0, to: 9 })
  await Promise.all([
    recorder.closed('one', { endTime: start + 60_000, status: 'completed', reason: 'hangup' }),
    recorder.closed('one', { endTime: start + 60_000, status: 'completed', reason: 'hangup' }),
    recorder.closed('one', { endTime: start + 90_000, status: 'error', reason: 'late' }),
  ])
  await recorder.counted('one', { userMessages: 5 }, { from: 9, to: 15 })
  await recorder.transferred('one', 'agent-b')
  await recorder.opened({ ...open, sessionId: 'two' })
  await recorder.counted('two', { userMessages: 1 }, { from: 0, to: 2 })

  const q = { crewId: 'crew-1', startTs: start - 3_600_000, endTs: start + 3_600_000, page: 0, pageSize: 10, timeZone: 'UTC', groupByTime: 'hour' as const }
  const fromBlocks = await executeReport(sourcesOf(store, true), report, 'acme', q)
  t.same(fromBlocks, await executeReport(sourcesOf(store, false), report, 'acme', q))
  t.same(
    fromBlocks.data.map(row => [row.metrics.sessions, row.metrics.live, row.metrics.completed, row.metrics.messages, row.metrics.avgDuration]),
    [[0, 0, 0, 0, null], [2, 1, 1, 6, 60_000], [0, 0, 0, 0, null]],
    'two sessions, one closed once with the counts it had when it closed',
  )
  const total = (await sessionsDetail(sourcesOf(store, true), clock(start + 100_000), 'acme', { crewId: 'crew-1', startTs: q.startTs, endTs: q.endTs, page: 0, pageSize: 10 })).pagination.total
  t.equal(total, 2)
})

t.test('sessions opening and closing at once (their block updates merged into one write per block) add up exactly', async t => {
  const dir = mkdtempSync(join(tmpdir(), 'sb-slots-'))
  const store = new LmdbStore({ path: dir, sweepIntervalMs: 0 })
  t.teardown(async () => {
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  })
  const recorder = new SessionRecorder(store)
  await recorder.ensureIndexes()
  const start = Date.parse('2026-06-01T09:50:00Z')
  const statuses: SessionStatus[] = ['completed', 'abandoned', 'error', 'transferred_to_human']
  const sessions = Array.from({ length: 60 }, (_, i) => ({ id: `m${i}`, startTime: start + i * 97_000, agentId: i % 3 ? 'agent-a' : 'agent-b' }))
  await Promise.all(sessions.map(s => recorder.opened({ accountId: 'acme', crewId: 'crew-1', agentId: s.agentId, sessionId: s.id, startTime: s.startTime })))
  await Promise.all(sessions.map((s, i) => recorder.counted(s.id, { userMessages: i % 5, assistantMessages: i % 4 }, { from: 0, to: 10 })))
  // Two thirds end, all in the same turn, with durations spread over many histogram bins.
  await Promise.all(
    sessions.filter((_, i) => i % 3 !== 2).map((s, i) => recorder.closed(s.id, { endTime: s.startTime + 1_000 * (i + 1) ** 2, status: statuses[i % 4]!, reason: i % 2 ? 'hangup' : 'idle_timeout' })),
  )
  const now = clock(start + 10 * 3_600_000)
  for (const groupByTime of ['hour', 'day', null] as const) {
    for (const timeZone of ['UTC', 'Asia/Kolkata']) {
      const q = { crewId: 'crew-1', startTs: start - 3_600_000, endTs: start + 3 * 3_600_000, page: 0, pageSize: 100, timeZone, groupByTime }
      t.same(await executeReport(sourcesOf(store, true), report, 'acme', q), await executeReport(sourcesOf(store, false), report, 'acme', q), `execute-report by ${groupByTime} in ${timeZone}: blocks equal records`)
    }
  }
  const detail = await sessionsDetail(sourcesOf(store, true), now, 'acme', { crewId: 'crew-1', startTs: start - 3_600_000, endTs: start + 3 * 3_600_000, page: 0, pageSize: 10 })
  t.equal(detail.pagination.total, 60, 'every session counted once')
})

t.test('sessions-detail still answers when a block lost an update (a crash between two writes)', async t => {
  const store = new MemoryStore()
  t.teardown(() => store.close())
  const recorder = new SessionRecorder(store)
  await recorder.ensureIndexes()
  const start = Date.parse('2026-06-01T00:00:00Z')
  await recorder.insert(withIds(Array.from({ length: 300 }, (_, i) => ({
    accountId: 'acme', crew_id: 'crew-1', agent_id: 'a', agents: ['a'], start_time: start + i * 60_000, end_time: start + i * 60_000 + 1,
    duration: 1, status: 'completed' as SessionStatus, messages: 0, user_messages: 0, assistant_messages: 0, tool_calls: 0, transfers: 0, end_reason: 'hangup',
  }))))
  // The 1-hour blocks of the third hour lost their count; the 4-hour block above them kept it.
  await store.collection(SLOT_COUNTS).deleteMany({ level: 1, slot: start + 2 * 3_600_000 })
  const q = { crewId: 'crew-1', startTs: start, endTs: start + 86_400_000, page: 3, pageSize: 60, asOf: start + 86_400_000 }
  const page = await sessionsDetail(sourcesOf(store, true), clock(q.asOf), 'acme', q)
  t.equal(page.pagination.total, 300)
  t.same(page.data, (await sessionsDetail(sourcesOf(store, false), clock(q.asOf), 'acme', q)).data, 'here the 4-hour block still places the page')
})

t.test('records written before the blocks are migrated at start, in slices', async t => {
  for (const kind of ['memory', 'lmdb', 'mongo'] as const) {
    t.test(kind, async t => {
      const dir = kind === 'lmdb' ? mkdtempSync(join(tmpdir(), 'sb-slots-')) : null
      const store = kind === 'memory' ? new MemoryStore() : dir ? new LmdbStore({ path: dir, sweepIntervalMs: 0 }) : await MongoStore.connect(await mongoUrlFor(t))
      t.teardown(async () => {
        await store.close()
        if (dir) rmSync(dir, { recursive: true, force: true })
      })
      const recorder = new SessionRecorder(store)
      await recorder.ensureIndexes()
      const start = Date.parse('2026-06-01T00:00:00Z')
      const legacy = withIds(
        Array.from({ length: 1_234 }, (_, i) => {
          const live = i % 10 === 0
          const s = start + i * 61_000
          return {
            accountId: 'acme', crew_id: 'crew-1', agent_id: 'agent-a', agents: ['agent-a'], start_time: s,
            end_time: live ? null : s + 1000 + i, duration: live ? null : 1000 + i, status: (live ? 'active' : 'completed') as SessionStatus,
            messages: i % 7, user_messages: i % 3, assistant_messages: (i % 7) - (i % 3), tool_calls: 0, transfers: 0, end_reason: live ? null : 'hangup',
          }
        }),
      )
      // The old writer's shape: no slot, no slotted.
      await store.collection(SESSION_RECORDS).insertMany(legacy)
      const migration = new SlotMigration(recorder, createLogger('silent'))
      const q = { crewId: 'crew-1', startTs: start, endTs: start + 2 * 86_400_000, page: 0, pageSize: 100, timeZone: 'Asia/Kolkata', groupByTime: 'hour' as const }
      const expected = await executeReport(sourcesOf(store, false), report, 'acme', q)
      await migration.start()
      t.notOk(migration.ready(), 'more than one slice to go after start')
      // A legacy live session closes while the migration runs: added once, by the close.
      await recorder.closed(legacy[0]!._id, { endTime: start + 5_000, status: 'abandoned', reason: 'idle_timeout' })
      const after = await executeReport(sourcesOf(store, false), report, 'acme', q)
      t.not(JSON.stringify(after), JSON.stringify(expected))
      await migration.stop() // stops between slices
      const resumed = new SlotMigration(recorder, createLogger('silent'))
      await resumed.start()
      while (!resumed.ready()) await new Promise(resolve => setTimeout(resolve, 10))
      t.ok(await recorder.slotsComplete(), 'marked done in the store')
      t.same(await executeReport(sourcesOf(store, true), report, 'acme', q), after)
      const dq = { crewId: 'crew-1', startTs: start, endTs: start + 2 * 86_400_000, page: 7, pageSize: 100, asOf: start + 3 * 86_400_000 }
      const now = clock(dq.asOf)
      t.same(await sessionsDetail(sourcesOf(store, true), now, 'acme', dq), await sessionsDetail(sourcesOf(store, false), now, 'acme', dq))
      const again = new SlotMigration(recorder, createLogger('silent'))
      await again.start()
      t.ok(again.ready(), 'a later start skips it')
      await again.stop()
    })
  }
})

t.test("a live session's counts are added once per span of its history; a record of an older version takes its first span", async t => {
  const store = new MemoryStore()
  t.teardown(() => store.close())
  const recorder = new SessionRecorder(store)
  await recorder.ensureIndexes()
  const start = Date.parse('2026-06-01T10:07:00Z')
  await recorder.opened({ accountId: 'acme', crewId: 'crew-1', agentId: 'agent-a', startTime: start, sessionId: 'new' })
  t.equal(await recorder.countedUpTo('new'), 0, 'a new record covers no entry yet')
  await recorder.counted('new', { userMessages: 1, assistantMessages: 1 }, { from: 0, to: 4 })
  await recorder.counted('new', { userMessages: 1, assistantMessages: 1 }, { from: 0, to: 4 })
  await recorder.counted('new', { userMessages: 5 }, { from: 2, to: 9 })
  t.match(await store.collection('session_records').findOne({ _id: 'new' }), { user_messages: 1, assistant_messages: 1, messages: 2, log_position: 4 }, 'repeated and stale spans are not counted')
  t.equal(await recorder.countedUpTo('new'), 4)

  // Written by an older version: no log_position.
  await store.collection('session_records').insertOne({ _id: 'old', accountId: 'acme', crew_id: 'crew-1', session_id: 'old', agent_id: 'a', agents: ['a'], start_time: start, end_time: null, duration: null, status: 'active', messages: 2, user_messages: 1, assistant_messages: 1, tool_calls: 0, transfers: 0, end_reason: null })
  t.equal(await recorder.countedUpTo('old'), undefined, 'an older record does not say what it covers')
  await recorder.counted('old', { userMessages: 1 }, { from: 7, to: 9 })
  await recorder.counted('old', { userMessages: 1 }, { from: 7, to: 9 })
  t.match(await store.collection('session_records').findOne({ _id: 'old' }), { user_messages: 2, log_position: 9 }, 'its first span takes, once')
  t.equal(await recorder.countedUpTo('nobody'), null, 'no live record')
})
