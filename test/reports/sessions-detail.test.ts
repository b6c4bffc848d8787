// sessions-detail over real HTTP on both stores: order, range, paging, rows arriving while a
// client pages through, live sessions, account isolation.
import t from 'tap'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { SessionRecorder } from '../../reports/index.js'
import { KEEP_FOREVER, query, SD, seed, sessionRecord } from './support.js'

const T0 = Date.parse('2026-05-04T08:00:00Z')
const MIN = 60_000

for (const store of STORES) {
  t.test(`${store} store`, async t => {
    let now = T0 + 10 * 60 * MIN
    const { base, service } = await startTestService(t, { store, clock: { now: () => now }, env: KEEP_FOREVER })
    const get = async (params: Record<string, string | number | undefined>, key: string = KEYS.acme) => {
      const res = await call(base, 'GET', SD + query({ crew_id: 'crew-1', start_ts: T0, end_ts: T0 + 24 * 60 * MIN, ...params }), { key })
      if (res.status !== 200) throw new Error(`${res.status} ${res.text}`)
      return res.json
    }

    // 25 sessions of acme/crew-1, two of them starting at the same instant (ordered by id),
    // plus rows that must never show: other crew, other account, outside the range.
    const mine = Array.from({ length: 25 }, (_, i) =>
      sessionRecord({
        _id: `acme-${String(i).padStart(2, '0')}`,
        start_time: T0 + (i === 7 ? 6 : i) * 10 * MIN,
        status: i % 5 === 0 ? 'abandoned' : 'completed',
        duration: (i + 1) * 1000,
      }),
    )
    await seed(service.platform.store, [
      ...mine.slice().reverse(),
      sessionRecord({ _id: 'other-crew', crew_id: 'crew-2', start_time: T0 + MIN }),
      sessionRecord({ _id: 'globex-1', accountId: 'globex', start_time: T0 + MIN }),
      sessionRecord({ _id: 'globex-2', accountId: 'globex', start_time: T0 + 2 * MIN }),
      sessionRecord({ _id: 'before', start_time: T0 - 1 }),
      sessionRecord({ _id: 'at-end', start_time: T0 + 24 * 60 * MIN }),
    ])
    const expectedOrder = mine
      .slice()
      .sort((a, b) => a.start_time - b.start_time || (a._id < b._id ? -1 : 1))
      .map(r => r._id)

    t.test('order, range bounds and the paged envelope', async t => {
      const pages = [await get({ page: 0, pageSize: 10 }), await get({ page: 1, pageSize: 10 }), await get({ page: 2, pageSize: 10 })]
      t.same(pages.map(p => p.pagination.hasMore), [true, true, false])
      t.same(pages.map(p => p.pagination.total), [25, 25, 25])
      t.same(pages.map(p => p.data.length), [10, 10, 5])
      t.same(pages.flatMap(p => p.data.map((r: any) => r.session_id)), expectedOrder, 'start_time, then session id')
      t.equal(pages[0]!.pagination.page, 0)
      t.equal(pages[0]!.pagination.pageSize, 10)
      t.equal(pages[0]!.pagination.asOf, now)
      t.ok(pages[0]!.pagination.nextCursor)
      t.notOk(pages[2]!.pagination.nextCursor, 'no cursor on the last page')
      const row = pages[0]!.data[0]
      t.same(row, {
        session_id: 'acme-00',
        agent_id: 'agent-1',
        agents: ['agent-1'],
        crew_id: 'crew-1',
        start_time: T0,
        end_time: T0 + 1000,
        duration: 1000,
        status: 'abandoned',
        messages: 4,
        user_messages: 2,
        assistant_messages: 2,
        tool_calls: 0,
        transfers: 0,
        end_reason: 'user_ended',
      })
      const inclusive = await get({ page: 0, pageSize: 5, start_ts: T0, end_ts: T0 + 1 })
      t.same(inclusive.data.map((r: any) => r.session_id), ['acme-00'], 'start_ts inclusive, end_ts exclusive')
      const empty = await get({ page: 0, pageSize: 5, crew_id: 'nobody' })
      t.same(empty, { data: [], pagination: { page: 0, pageSize: 5, total: 0, hasMore: false, asOf: now } })
    })

    t.test('account isolation', async t => {
      const globex = await get({ page: 0, pageSize: 100 }, KEYS.globex)
      t.same(globex.data.map((r: any) => r.session_id), ['globex-1', 'globex-2'])
      const acme = await get({ page: 0, pageSize: 100 })
      t.notOk(acme.data.some((r: any) => r.session_id.startsWith('globex')))
      t.equal((await get({ page: 0, pageSize: 100 }, KEYS.acmeReportsOnly)).pagination.total, 25)
    })

    t.test('rows arriving mid-paging neither shift nor duplicate rows', async t => {
      const records = service.platform.store.collection('session_records')
      const first = await get({ page: 0, pageSize: 10 })
      const asOf = first.pagination.asOf
      // While the client reads, time passes and sessions arrive inside the range; one of them
      // is written late, with a start time before the rows already read.
      now += 5 * MIN
      await seed(service.platform.store, [
        sessionRecord({ _id: 'new-1', start_time: now - MIN, status: 'active' }),
        sessionRecord({ _id: 'new-2', start_time: now, status: 'active' }),
      ])
      t.teardown(() => records.deleteMany({ _id: { $in: ['new-1', 'new-2', 'late-1'] } }))

      // (a) asOf sent back: the snapshot stays exactly as the first page saw it.
      const a1 = await get({ page: 1, pageSize: 10, asOf })
      const a2 = await get({ page: 2, pageSize: 10, asOf })
      t.same([first, a1, a2].flatMap(p => p.data.map((r: any) => r.session_id)), expectedOrder)
      t.same([a1.pagination.total, a2.pagination.total, a2.pagination.hasMore], [25, 25, false])

      // (b) plain page/pageSize: new sessions sort last, so earlier pages do not move;
      // total and hasMore grow to take them in.
      const b1 = await get({ page: 1, pageSize: 10 })
      const b2 = await get({ page: 2, pageSize: 10 })
      t.same(b1.data, a1.data)
      t.same(b2.data.map((r: any) => r.session_id), [...expectedOrder.slice(20), 'new-1', 'new-2'])
      t.equal(b2.pagination.total, 27)

      // (c) cursor: even a late-written row with an older start time does not shift the walk.
      await seed(service.platform.store, [sessionRecord({ _id: 'late-1', start_time: T0 + 5, status: 'active' })])
      const c1 = await get({ page: 1, pageSize: 10, cursor: first.pagination.nextCursor })
      const c2 = await get({ page: 2, pageSize: 10, cursor: c1.pagination.nextCursor })
      const walked = [first, c1, c2].flatMap(p => p.data.map((r: any) => r.session_id))
      t.same(walked, expectedOrder, 'the same 25 rows, once each, in order')
      t.same([c1.pagination.total, c2.pagination.total, c2.pagination.hasMore], [25, 25, false])
      t.notOk(c2.pagination.nextCursor)
      t.equal(c1.pagination.asOf, asOf, 'the cursor carries the snapshot bound')

      // A cursor only fits its own query.
      const wrongPage = await call(base, 'GET', SD + query({ crew_id: 'crew-1', start_ts: T0, end_ts: T0 + 24 * 60 * MIN, page: 2, pageSize: 10, cursor: first.pagination.nextCursor }), { key: KEYS.acme })
      t.equal(wrongPage.status, 400)
      t.equal(wrongPage.json.parameter, 'page')
      const wrongQuery = await call(base, 'GET', SD + query({ crew_id: 'crew-1', start_ts: T0, end_ts: T0 + 24 * 60 * MIN, page: 1, pageSize: 5, cursor: first.pagination.nextCursor }), { key: KEYS.acme })
      t.equal(wrongQuery.status, 400)
      t.equal(wrongQuery.json.parameter, 'cursor')
      const wrongAsOf = await call(base, 'GET', SD + query({ crew_id: 'crew-1', start_ts: T0, end_ts: T0 + 24 * 60 * MIN, page: 1, pageSize: 10, asOf: asOf - 1, cursor: first.pagination.nextCursor }), { key: KEYS.acme })
      t.equal(wrongAsOf.status, 400)
      t.equal(wrongAsOf.json.parameter, 'asOf')
    })

    t.test('the engine writer: live sessions are listed, then closed', async t => {
      const recorder = new SessionRecorder(service.platform.store)
      const start = now
      await recorder.opened({ accountId: 'acme', crewId: 'crew-live', sessionId: 'live-1', agentId: 'bot', startTime: start })
      await recorder.opened({ accountId: 'acme', crewId: 'crew-live', sessionId: 'live-1', agentId: 'bot', startTime: start + 5 })
      await recorder.counted('live-1', { userMessages: 1, assistantMessages: 2, toolCalls: 1 }, { from: 0, to: 5 })
      await recorder.transferred('live-1', 'billing-bot')
      now += 90_000
      await recorder.statusChanged('live-1', 'paused')
      const range = { crew_id: 'crew-live', start_ts: start - MIN, end_ts: start + 60 * MIN, page: 0, pageSize: 10 }
      const live = await get(range)
      t.same(live.data, [
        {
          session_id: 'live-1', agent_id: 'billing-bot', agents: ['bot', 'billing-bot'], crew_id: 'crew-live',
          start_time: start, end_time: null, duration: 90_000, status: 'paused',
          messages: 3, user_messages: 1, assistant_messages: 2, tool_calls: 1, transfers: 1, end_reason: null,
        },
      ], 'opened twice is one record; a live session shows with end_time null')
      await recorder.statusChanged('live-1', 'active')
      await recorder.closed('live-1', { endTime: start + 120_000, status: 'transferred_to_human', reason: 'sip_transfer' })
      await recorder.closed('live-1', { endTime: start + 999_999, status: 'error', reason: 'late duplicate' })
      await recorder.statusChanged('live-1', 'paused')
      now += 60_000
      const ended = (await get(range)).data[0]
      t.same(
        [ended.status, ended.end_time, ended.duration, ended.end_reason],
        ['transferred_to_human', start + 120_000, 120_000, 'sip_transfer'],
        'the first close wins; later status changes do not reopen it',
      )
    })
  })
}
