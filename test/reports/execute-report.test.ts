// execute-report over real HTTP on both stores: calendar buckets in time zones (DST changes,
// half- and quarter-hour offsets), metrics against values computed here, paging over buckets,
// account isolation, configured definitions.
import { writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { DateTime } from 'luxon'
import { call, KEYS, STORES, startTestService } from '../support/harness.js'
import { ER, KEEP_FOREVER, query, seed, sessionRecord } from './support.js'

const at = (iso: string) => DateTime.fromISO(iso, { setZone: true }).toMillis()

for (const store of STORES) {
  t.test(`${store} store`, async t => {
    const definitionsFile = join(tmpdir(), `reports-${process.pid}-${store}.json`)
    writeFileSync(
      definitionsFile,
      JSON.stringify({
        reports: [
          {
            id: 'sessions-overview',
            metrics: {
              sessions: { op: 'count' },
              completed: { op: 'count', where: { status: 'completed' } },
              abandoned: { op: 'count', where: { status: 'abandoned' } },
              transferred: { op: 'count', where: { status: 'transferred_to_human' } },
              avgDurationMs: { op: 'avg', field: 'duration' },
              p90DurationMs: { op: 'percentile', field: 'duration', p: 90 },
              messages: { op: 'sum', field: 'messages' },
            },
          },
          {
            id: 'acme-only',
            accounts: ['acme'],
            metrics: {
              sessions: { op: 'count' },
              ended: { op: 'count', where: { status: ['completed', 'abandoned', 'transferred_to_human', 'error'] } },
              endedShare: { op: 'ratio', of: ['ended', 'sessions'] },
              minCompletedMs: { op: 'min', field: 'duration', where: { status: 'completed' } },
              maxDurationMs: { op: 'max', field: 'duration' },
              completedDurationMs: { op: 'sum', field: 'duration', where: { status: 'completed' } },
              p50CompletedMs: { op: 'percentile', field: 'duration', p: 50, where: { status: 'completed' } },
              toolCalls: { op: 'sum', field: 'tool_calls' },
            },
          },
        ],
      }),
    )
    const { base, service } = await startTestService(t, { store, env: { REPORTS_FILE: definitionsFile, ...KEEP_FOREVER } })
    const report = async (
      params: Record<string, string | number | undefined>,
      options: { id?: string; key?: string } = {},
    ) => {
      const res = await call(base, 'GET', `${ER}/${options.id ?? 'sessions-overview'}` + query({ crew_id: 'crew-1', page: 0, pageSize: 100, ...params }), {
        key: options.key ?? KEYS.acme,
      })
      if (res.status !== 200) throw new Error(`${res.status} ${res.text}`)
      return res.json
    }
    const counts = (r: any) => r.data.map((row: any) => [row.date, row.metrics.sessions])

    t.test('Europe/Madrid around the 2026-10-25 fall-back', async t => {
      await seed(service.platform.store, [
        sessionRecord({ start_time: at('2026-10-24T23:30:00+02:00') }),
        sessionRecord({ start_time: at('2026-10-25T00:30:00+02:00') }),
        sessionRecord({ start_time: at('2026-10-25T02:30:00+02:00') }), // the first 02:30
        sessionRecord({ start_time: at('2026-10-25T02:30:00+01:00') }), // the second 02:30
        sessionRecord({ start_time: at('2026-10-25T02:45:00+01:00') }),
        sessionRecord({ start_time: at('2026-10-25T23:30:00+01:00') }),
        sessionRecord({ start_time: at('2026-10-26T00:30:00+01:00') }), // still Oct 25 in UTC
      ])
      const range = { start_ts: at('2026-10-24T00:00:00+02:00'), end_ts: at('2026-10-27T00:00:00+01:00'), timeZone: 'Europe/Madrid' }
      t.same(counts(await report({ ...range, groupByTime: 'day' })), [
        ['2026-10-24T00:00:00+02:00', 1],
        ['2026-10-25T00:00:00+02:00', 5],
        ['2026-10-26T00:00:00+01:00', 1],
      ])
      const hours = await report({ ...range, start_ts: at('2026-10-25T01:00:00+02:00'), end_ts: at('2026-10-25T04:00:00+01:00'), groupByTime: 'hour' })
      t.same(counts(hours), [
        ['2026-10-25T01:00:00+02:00', 0],
        ['2026-10-25T02:00:00+02:00', 1],
        ['2026-10-25T02:00:00+01:00', 2],
        ['2026-10-25T03:00:00+01:00', 0],
      ])
      t.same(hours.data[0].metrics, { sessions: 0, completed: 0, abandoned: 0, transferred: 0, avgDurationMs: null, p90DurationMs: null, messages: 0 }, 'an empty bucket')
      // The same sessions by UTC day: the 00:30 (+01:00) one falls on the 25th.
      t.same(counts(await report({ ...range, timeZone: 'UTC', groupByTime: 'day' })), [
        ['2026-10-23T00:00:00Z', 0],
        ['2026-10-24T00:00:00Z', 2],
        ['2026-10-25T00:00:00Z', 5],
        ['2026-10-26T00:00:00Z', 0],
      ])
    })

    t.test('America/New_York around the 2026-03-08 spring-forward', async t => {
      await seed(service.platform.store, [
        sessionRecord({ start_time: at('2026-03-08T01:59:00-05:00') }),
        sessionRecord({ start_time: at('2026-03-08T03:01:00-04:00') }),
        sessionRecord({ start_time: at('2026-03-08T23:30:00-04:00') }), // 03:30Z on the 9th
        sessionRecord({ start_time: at('2026-03-09T00:30:00-04:00') }),
      ])
      const range = { start_ts: at('2026-03-07T00:00:00-05:00'), end_ts: at('2026-03-10T00:00:00-04:00'), timeZone: 'America/New_York' }
      t.same(counts(await report({ ...range, groupByTime: 'day' })), [
        ['2026-03-07T00:00:00-05:00', 0],
        ['2026-03-08T00:00:00-05:00', 3],
        ['2026-03-09T00:00:00-04:00', 1],
      ])
      const hours = await report({ ...range, start_ts: at('2026-03-08T01:00:00-05:00'), end_ts: at('2026-03-08T04:00:00-04:00'), groupByTime: 'hour' })
      t.same(counts(hours), [
        ['2026-03-08T01:00:00-05:00', 1],
        ['2026-03-08T03:00:00-04:00', 1],
      ], 'the skipped 02:00 hour has no bucket')
      t.equal(hours.pagination.total, 2)
    })

    t.test('Asia/Kolkata (+05:30) and Asia/Kathmandu (+05:45) days', async t => {
      await seed(service.platform.store, [
        sessionRecord({ crew_id: 'crew-asia', start_time: at('2026-03-07T18:10:00Z') }), // 23:40 IST, 23:55 NPT
        sessionRecord({ crew_id: 'crew-asia', start_time: at('2026-03-07T18:20:00Z') }), // 23:50 IST, 00:05 NPT
        sessionRecord({ crew_id: 'crew-asia', start_time: at('2026-03-07T18:40:00Z') }), // 00:10 IST, 00:25 NPT
      ])
      const range = { crew_id: 'crew-asia', start_ts: at('2026-03-07T00:00:00Z'), end_ts: at('2026-03-08T06:00:00Z'), groupByTime: 'day' }
      t.same(counts(await report({ ...range, timeZone: 'Asia/Kolkata' })), [
        ['2026-03-07T00:00:00+05:30', 2],
        ['2026-03-08T00:00:00+05:30', 1],
      ])
      t.same(counts(await report({ ...range, timeZone: 'Asia/Kathmandu' })), [
        ['2026-03-07T00:00:00+05:45', 1],
        ['2026-03-08T00:00:00+05:45', 2],
      ])
      const hours = await report({ ...range, timeZone: 'Asia/Kathmandu', groupByTime: 'hour', start_ts: at('2026-03-07T17:15:00Z'), end_ts: at('2026-03-07T19:15:00Z') })
      t.same(counts(hours), [
        ['2026-03-07T23:00:00+05:45', 1],
        ['2026-03-08T00:00:00+05:45', 2],
      ])
    })

    t.test('weeks (ISO, Monday) and months in the zone', async t => {
      await seed(service.platform.store, [
        sessionRecord({ crew_id: 'crew-cal', start_time: at('2026-03-29T23:30:00+02:00') }), // Sunday, after the DST change
        sessionRecord({ crew_id: 'crew-cal', start_time: at('2026-03-30T00:30:00+02:00') }), // Monday
        sessionRecord({ crew_id: 'crew-cal', start_time: at('2026-03-31T23:30:00+02:00') }), // March
        sessionRecord({ crew_id: 'crew-cal', start_time: at('2026-04-01T00:30:00+02:00') }), // April (March 31 in UTC)
      ])
      const range = { crew_id: 'crew-cal', start_ts: at('2026-03-01T00:00:00+01:00'), end_ts: at('2026-05-01T00:00:00+02:00'), timeZone: 'Europe/Madrid' }
      t.same(counts(await report({ ...range, groupByTime: 'month' })), [
        ['2026-03-01T00:00:00+01:00', 3],
        ['2026-04-01T00:00:00+02:00', 1],
      ])
      const weeks = await report({ ...range, groupByTime: 'week', end_ts: at('2026-04-06T00:00:00+02:00') })
      t.same(counts(weeks), [
        ['2026-02-23T00:00:00+01:00', 0],
        ['2026-03-02T00:00:00+01:00', 0],
        ['2026-03-09T00:00:00+01:00', 0],
        ['2026-03-16T00:00:00+01:00', 0],
        ['2026-03-23T00:00:00+01:00', 1],
        ['2026-03-30T00:00:00+02:00', 3],
      ])
    })

    t.test('metrics match values computed from the records', async t => {
      const day = at('2026-06-10T00:00:00Z')
      const statuses = ['completed', 'completed', 'abandoned', 'transferred_to_human', 'error', 'active'] as const
      const records = Array.from({ length: 60 }, (_, i) =>
        sessionRecord({
          crew_id: 'crew-metrics',
          start_time: day + i * 23 * 60_000,
          status: statuses[i % statuses.length],
          duration: 1_000 + ((i * 7919) % 600_000),
          messages: i % 9,
          tool_calls: i % 3,
        }),
      )
      await seed(service.platform.store, records)
      const expected = (rows: typeof records) => {
        const ended = rows.filter(r => r.duration !== null).map(r => r.duration!)
        ended.sort((a, b) => a - b)
        return {
          sessions: rows.length,
          completed: rows.filter(r => r.status === 'completed').length,
          abandoned: rows.filter(r => r.status === 'abandoned').length,
          transferred: rows.filter(r => r.status === 'transferred_to_human').length,
          avgDurationMs: ended.length ? Math.round((ended.reduce((a, b) => a + b, 0) / ended.length) * 100) / 100 : null,
          p90: ended.length ? ended[Math.ceil(0.9 * ended.length) - 1]! : null,
          messages: rows.reduce((a, r) => a + r.messages, 0),
        }
      }
      const range = { crew_id: 'crew-metrics', start_ts: day, end_ts: day + 24 * 3_600_000, timeZone: 'UTC' }
      const whole = await report(range)
      t.equal(whole.pagination.total, 1)
      t.equal(whole.data[0].date, '2026-06-10T00:00:00Z')
      const check = (metrics: any, rows: typeof records, label: string) => {
        const { p90, ...exact } = expected(rows)
        const { p90DurationMs, ...got } = metrics
        t.same(got, exact, `${label}: counts, sums, average`)
        if (p90 === null) t.equal(p90DurationMs, null)
        else t.ok(p90DurationMs >= p90 && p90DurationMs <= p90 * 1.0101 + 1, `${label}: p90 ${p90DurationMs} within 1% above ${p90}`)
      }
      check(whole.data[0].metrics, records, 'whole range')
      const hours = await report({ ...range, groupByTime: 'hour', pageSize: 24 })
      t.equal(hours.data.length, 24)
      for (const row of hours.data) {
        const from = Date.parse(row.date)
        check(row.metrics, records.filter(r => r.start_time >= from && r.start_time < from + 3_600_000), row.date)
      }
      // Small durations are exact: one bin per value below ~100 ms.
      await seed(service.platform.store, [5, 17, 42, 42, 99].map(d => sessionRecord({ crew_id: 'crew-small', start_time: day + d, duration: d })))
      const small = await report({ ...range, crew_id: 'crew-small' })
      t.equal(small.data[0].metrics.p90DurationMs, 99)

      const custom = await report(range, { id: 'acme-only' })
      const completed = records.filter(r => r.status === 'completed').map(r => r.duration!).sort((a, b) => a - b)
      const m = custom.data[0].metrics
      t.equal(m.sessions, 60)
      t.equal(m.ended, 50)
      t.equal(m.endedShare, Math.round((50 / 60) * 10_000) / 10_000)
      t.equal(m.minCompletedMs, completed[0])
      t.equal(m.maxDurationMs, Math.max(...records.filter(r => r.duration !== null).map(r => r.duration!)))
      t.equal(m.completedDurationMs, completed.reduce((a, b) => a + b, 0))
      const p50 = completed[Math.ceil(0.5 * completed.length) - 1]!
      t.ok(m.p50CompletedMs >= p50 && m.p50CompletedMs <= p50 * 1.0101 + 1, `p50 of completed ${m.p50CompletedMs} ~ ${p50}`)
      t.equal(m.toolCalls, records.reduce((a, r) => a + r.tool_calls, 0))
      t.equal((await report({ ...range, crew_id: 'nobody' }, { id: 'acme-only' })).data[0].metrics.endedShare, null, 'x/0 is null')
    })

    t.test('paging over buckets', async t => {
      const range = { crew_id: 'crew-metrics', start_ts: at('2026-06-09T00:00:00Z'), end_ts: at('2026-06-12T00:00:00Z'), timeZone: 'Europe/Madrid', groupByTime: 'hour' }
      const all = await report({ ...range, pageSize: 1000 })
      t.equal(all.pagination.total, 72)
      t.equal(all.data[0].date, '2026-06-09T02:00:00+02:00')
      const pages = []
      for (let page = 0; page < 4; page++) pages.push(await report({ ...range, page, pageSize: 20 }))
      t.same(pages.map(p => [p.pagination.page, p.data.length, p.pagination.hasMore, p.pagination.total]), [
        [0, 20, true, 72],
        [1, 20, true, 72],
        [2, 20, true, 72],
        [3, 12, false, 72],
      ])
      t.same(pages.flatMap(p => p.data), all.data, 'pages concatenate to the whole series')
      t.equal(all.data.reduce((a: number, r: any) => a + r.metrics.sessions, 0), 60)
      const past = await report({ ...range, page: 4, pageSize: 20 })
      t.same([past.data, past.pagination.hasMore], [[], false])
      const none = await report({ ...range, groupByTime: undefined, page: 1 })
      t.same([none.data, none.pagination.total, none.pagination.hasMore], [[], 1, false])
    })

    t.test('account isolation and per-account definitions', async t => {
      const range = { crew_id: 'crew-metrics', start_ts: at('2026-06-10T00:00:00Z'), end_ts: at('2026-06-11T00:00:00Z'), timeZone: 'UTC' }
      await seed(service.platform.store, [sessionRecord({ accountId: 'globex', crew_id: 'crew-metrics', start_time: at('2026-06-10T12:00:00Z') })])
      t.equal((await report(range)).data[0].metrics.sessions, 60)
      t.equal((await report(range, { key: KEYS.globex })).data[0].metrics.sessions, 1)
      const hidden = await call(base, 'GET', `${ER}/acme-only` + query({ ...range, page: 0, pageSize: 10 }), { key: KEYS.globex })
      t.equal(hidden.status, 404, 'a report restricted to other accounts does not exist for this one')
      const listed = await call(base, 'GET', '/engine/v1/api/reports/definitions', { key: KEYS.globex })
      t.same(listed.json.data.map((d: any) => d.id), ['sessions-overview'])
    })
  })
}
