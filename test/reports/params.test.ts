// Every query-parameter rule of the two report endpoints, auth, and the published parameters.
// Validation does not touch the store, so this runs on the embedded store only.
import t from 'tap'
import { call, KEYS, startTestService } from '../support/harness.js'
import { ER, KEEP_FOREVER, query, SD } from './support.js'

const T0 = Date.parse('2026-03-01T00:00:00Z')
const T1 = Date.parse('2026-04-01T00:00:00Z')
const detailParams = { crew_id: 'crew-1', start_ts: T0, end_ts: T1, page: 0, pageSize: 10 }
const reportParams = { ...detailParams, timeZone: 'Europe/Madrid', groupByTime: 'day' }
const REPORT = `${ER}/sessions-overview`

const endpoints = [
  { name: 'sessions-detail', path: SD, params: detailParams as Record<string, string | number | undefined> },
  { name: 'execute-report', path: REPORT, params: reportParams as Record<string, string | number | undefined> },
]

t.test('parameter rules', async t => {
  const { base } = await startTestService(t, { env: KEEP_FOREVER })
  const get = (path: string, params: Record<string, string | number | undefined>, key: string = KEYS.acme) =>
    call(base, 'GET', path + query(params), { key })

  const expect400 = async (
    t: typeof import("tap").default,
    path: string,
    params: Record<string, string | number | undefined>,
    parameter: string,
    message?: RegExp,
  ) => {
    const res = await get(path, params)
    t.equal(res.status, 400, `${JSON.stringify(params)} -> 400`)
    t.equal(res.json?.code, 'INVALID_PARAMETER')
    t.equal(res.json?.parameter, parameter, `names ${parameter}`)
    if (message) t.match(res.json?.message, message)
    t.ok(Array.isArray(res.json?.details) && res.json.details.some((d: any) => d.parameter === parameter), 'details list it')
  }

  for (const { name, path, params } of endpoints) {
    t.test(`${name}: valid parameters answer 200`, async t => {
      const res = await get(path, params)
      t.equal(res.status, 200, JSON.stringify(res.json))
      t.same(Object.keys(res.json.pagination).slice(0, 4), ['page', 'pageSize', 'total', 'hasMore'])
      const max = await get(path, { ...params, pageSize: 1000 })
      t.equal(max.status, 200, 'pageSize 1000 is the maximum')
      const extra = await get(path, { ...params, _: 'cache-buster' })
      t.equal(extra.status, 200, 'unknown parameters are ignored')
    })

    t.test(`${name}: every required parameter`, async t => {
      for (const required of Object.keys(params).filter(p => p !== 'groupByTime')) {
        await expect400(t, path, { ...params, [required]: undefined }, required, new RegExp(`^${required} is required$`))
        await expect400(t, path, { ...params, [required]: '' }, required, new RegExp(`^${required} is required$`))
      }
    })

    t.test(`${name}: start_ts and end_ts are 13-digit Unix ms, end after start`, async t => {
      for (const bad of ['12', '999999999999', '12345678901234', 'abc', '1.7e12', '-1772323200000', '1772323200000.5', ' 1772323200000', '0x19C9A0E4000']) {
        await expect400(t, path, { ...params, start_ts: bad }, 'start_ts', /^start_ts must be a 13-digit Unix time in milliseconds$/)
        await expect400(t, path, { ...params, end_ts: bad }, 'end_ts', /^end_ts must be a 13-digit Unix time in milliseconds$/)
      }
      await expect400(t, path, { ...params, end_ts: T0 }, 'end_ts', /greater than start_ts/)
      await expect400(t, path, { ...params, end_ts: T0 - 1 }, 'end_ts', /greater than start_ts/)
      t.equal((await get(path, { ...params, end_ts: T0 + 1 })).status, 200, 'a 1 ms range is fine')
      t.equal((await get(path, { ...params, start_ts: '1000000000000', end_ts: '9999999999999' })).status, 200, 'the 13-digit extremes')
    })

    t.test(`${name}: page and pageSize`, async t => {
      for (const bad of ['-1', 'x', '1.5', '99999999999999999', '1e3']) await expect400(t, path, { ...params, page: bad }, 'page', /^page must be an integer from 0$/)
      for (const bad of ['0', '-5', '1001', 'ten', '2.0']) {
        await expect400(t, path, { ...params, pageSize: bad }, 'pageSize', /^pageSize must be an integer from 1 to 1000$/)
      }
      const far = await get(path, { ...params, page: 1_000_000 })
      t.equal(far.status, 200, 'a page past the end is empty, not an error')
      t.same(far.json.data, [])
      t.equal(far.json.pagination.hasMore, false)
    })

    t.test(`${name}: crew_id`, async t => {
      await expect400(t, path, { ...params, crew_id: 'x'.repeat(201) }, 'crew_id', /crew_id must be a crew id of 1 to 200 characters/)
    })

    t.test(`${name}: a repeated parameter`, async t => {
      const res = await call(base, 'GET', path + query(params) + '&crew_id=crew-2', { key: KEYS.acme })
      t.equal(res.status, 400)
      t.equal(res.json.parameter, 'crew_id')
      t.equal(res.json.message, 'crew_id must be given once')
    })

    t.test(`${name}: several problems: the first in documented order, all in details`, async t => {
      const res = await get(path, { ...params, pageSize: 0, start_ts: 'x', crew_id: undefined })
      t.equal(res.status, 400)
      t.equal(res.json.parameter, 'crew_id')
      t.same(res.json.details.map((d: any) => d.parameter), ['crew_id', 'start_ts', 'pageSize'])
    })

    t.test(`${name}: 401 without a valid key, 403 without the reports role`, async t => {
      const none = await call(base, 'GET', path + query(params), { key: null })
      t.equal(none.status, 401)
      t.equal(none.json.code, 'UNAUTHORIZED')
      t.equal((await get(path, params, 'not-a-key-0000000000000')).status, 401)
      const dialer = await get(path, params, KEYS.acmeDialerOnly)
      t.equal(dialer.status, 403)
      t.equal(dialer.json.code, 'FORBIDDEN')
      t.equal((await get(path, params, KEYS.acmeReportsOnly)).status, 200, 'the reports role is enough')
      t.equal((await call(base, 'GET', path + '?page=x', { key: null })).status, 401, 'auth is checked before parameters')
    })
  }

  t.test('execute-report: timeZone is an IANA name', async t => {
    for (const bad of ['Mars/Olympus_Mons', '+05:00', 'UTC+5', 'GMT+05:30', 'Europe', 'Europe/', 'Madrid', '../../etc']) {
      const res = await get(REPORT, { ...reportParams, timeZone: bad })
      t.equal(res.status, 400, bad)
      t.equal(res.json.parameter, 'timeZone')
      t.equal(res.json.details[0].code, 'UNKNOWN_TIME_ZONE')
      t.match(res.json.message, /^timeZone must be an IANA time zone name/)
    }
    await expect400(t, REPORT, { ...reportParams, timeZone: 'x'.repeat(65) }, 'timeZone')
    for (const good of ['UTC', 'Asia/Kolkata', 'Asia/Kathmandu', 'America/Argentina/Buenos_Aires', 'America/New_York', 'europe/madrid']) {
      const res = await get(REPORT, { ...reportParams, timeZone: good })
      t.equal(res.status, 200, good)
      t.equal(res.json.timeZone, good)
    }
    // URL-encoded as the spec says (%2F); a raw slash works too.
    const raw = await call(base, 'GET', `${REPORT}${query({ ...reportParams, timeZone: undefined })}&timeZone=Asia/Kolkata`, { key: KEYS.acme })
    t.equal(raw.status, 200)
  })

  t.test('execute-report: groupByTime', async t => {
    for (const bad of ['year', 'HOUR', 'days', 'minute']) {
      await expect400(t, REPORT, { ...reportParams, groupByTime: bad }, 'groupByTime', /^groupByTime must be hour, day, week, month or empty$/)
    }
    for (const good of ['hour', 'day', 'week', 'month']) t.equal((await get(REPORT, { ...reportParams, groupByTime: good })).status, 200)
    const long = { ...reportParams, start_ts: Date.parse('2020-01-01T00:00:00Z'), end_ts: Date.parse('2025-01-02T00:00:00Z') }
    await expect400(t, REPORT, { ...long, groupByTime: 'hour' }, 'groupByTime', /at most 1827 days/)
    t.equal((await get(REPORT, { ...long, groupByTime: 'hour', end_ts: Date.parse('2025-01-01T00:00:00Z') })).status, 200, '5 years of hours')
    for (const g of ['day', 'week', 'month', undefined]) {
      t.equal((await get(REPORT, { ...reportParams, start_ts: '1000000000000', end_ts: '9999999999999', groupByTime: g })).status, 200, `${g}: no range limit`)
    }
    for (const none of ['', undefined]) {
      const res = await get(REPORT, { ...reportParams, groupByTime: none })
      t.equal(res.status, 200)
      t.equal(res.json.groupByTime, null)
      t.equal(res.json.pagination.total, 1)
    }
  })

  t.test('execute-report: unknown report id is 404, checked before the parameters', async t => {
    const res = await get(`${ER}/no-such-report`, reportParams)
    t.equal(res.status, 404)
    t.equal(res.json.code, 'REPORT_NOT_FOUND')
    t.equal((await get(`${ER}/no-such-report`, { page: 'x' })).status, 404)
    t.equal((await call(base, 'GET', `${ER}/`, { key: KEYS.acme })).status, 404)
  })

  t.test('sessions-detail: asOf and cursor', async t => {
    await expect400(t, SD, { ...detailParams, asOf: '17' }, 'asOf', /^asOf must be a 13-digit Unix time/)
    await expect400(t, SD, { ...detailParams, cursor: 'garbage' }, 'cursor', /^cursor must be the pagination.nextCursor/)
    await expect400(t, SD, { ...detailParams, cursor: Buffer.from('{"v":2}').toString('base64url') }, 'cursor')
    await expect400(t, SD, { ...detailParams, cursor: 'x'.repeat(513) }, 'cursor')
  })

  t.test('the definitions listing', async t => {
    const res = await get('/engine/v1/api/reports/definitions', {})
    t.equal(res.status, 200)
    const overview = res.json.data.find((d: any) => d.id === 'sessions-overview')
    t.ok(overview)
    t.same(Object.keys(overview.metrics).sort(), ['abandoned', 'active', 'avgDurationMs', 'completed', 'errors', 'messages', 'p90DurationMs', 'sessions', 'transferred'])
    t.equal((await get('/engine/v1/api/reports/definitions', {}, KEYS.acmeDialerOnly)).status, 403)
  })

  t.test('the OpenAPI document publishes the query parameters and responses', async t => {
    const doc = (await call(base, 'GET', '/openapi.json', { key: null })).json
    const sd = doc.paths['/engine/v1/api/reports/sessions-detail'].get
    const byName = Object.fromEntries(sd.parameters.map((p: any) => [p.name, p]))
    t.same(Object.keys(byName), ['crew_id', 'start_ts', 'end_ts', 'page', 'pageSize', 'asOf', 'cursor'])
    t.equal(byName.pageSize.schema.maximum, 1000)
    t.equal(byName.start_ts.schema.type, 'integer')
    t.equal(byName.page.required, true)
    t.equal(byName.asOf.required, false)
    const er = doc.paths['/engine/v1/api/reports/execute-report/{reportId}'].get
    const names = er.parameters.map((p: any) => `${p.in}:${p.name}`)
    t.same(names, ['path:reportId', 'query:crew_id', 'query:start_ts', 'query:end_ts', 'query:page', 'query:pageSize', 'query:timeZone', 'query:groupByTime'])
    t.same(er.parameters.find((p: any) => p.name === 'groupByTime').schema.enum, ['hour', 'day', 'week', 'month'])
    t.ok(er.responses['404'])
    t.ok(doc.components.schemas['reports.report.page'])
  })
})
