// The reports module: session records (written by the engine) and the report endpoints
// (spec 4.4): sessions-detail, execute-report/{REPORT_ID}, plus a listing of report definitions.
import { NotFound } from '../platform/errors.js'
import type { JsonRoute, ServiceModule } from '../platform/http.js'
import type { Platform } from '../platform/index.js'
import { loadDefinitions, type ReportDefinition } from './definitions.js'
import { executeReport } from './execute-report.js'
import { CompiledReport } from './metrics.js'
import { parseExecuteReportQuery, parseSessionsDetailQuery } from './params.js'
import { SessionRecorder } from './session-records.js'
import { sessionsDetail } from './sessions-detail.js'
import { SlotMigration } from './slot-migration.js'
import { ReportRetention } from './retention.js'

export { SessionRecorder, type LastMessage, type SessionRecordDoc, type SessionStatus, type TurnCounts, SESSION_RECORDS } from './session-records.js'
export { loadDefinitions, parseDefinitions, type ReportDefinition, type MetricDefinition } from './definitions.js'

export const REPORTS_BASE = '/engine/v1/api/reports'

/** A JSON route whose query parameters are published from a schema (schemas/openapi.ts). */
type QueryRoute = JsonRoute & { querySchema: string }

const ERRORS = {
  '400': { description: 'A bad parameter: {code: INVALID_PARAMETER, message, parameter, details}', schema: 'reports.error' },
  '401': { description: 'Missing or unknown apikey' },
  '403': { description: 'The key lacks the reports role' },
  '410': { description: 'The range reaches back past what is kept: {code: DATA_EXPIRED, message, parameter, retainedFrom, details} (README "Retention")', schema: 'reports.error' },
}

export interface ReportsOptions {
  /** Definitions instead of platform.config.reportsFile (tests). */
  definitions?: Map<string, ReportDefinition>
}

export function createReports(platform: Platform, options: ReportsOptions = {}): ServiceModule {
  const definitions = options.definitions ?? loadDefinitions(platform.config.reportsFile)
  const compiled = new Map([...definitions].map(([id, d]) => [id, new CompiledReport(d)]))
  const recorder = new SessionRecorder(platform.store)
  const { records } = recorder
  const migration = new SlotMigration(recorder, platform.logger)
  const retention = new ReportRetention(platform.store, platform.clock, platform.logger, platform.config.retention)
  const sources = { records, counts: recorder.counts, stats: recorder.stats, slotsReady: () => migration.ready() }

  const visible = (id: string, accountId: string) => {
    const report = compiled.get(id)
    const accounts = report?.definition.accounts
    return report && (!accounts || accounts.includes(accountId)) ? report : undefined
  }

  const routes: (JsonRoute | QueryRoute)[] = [
    {
      method: 'get',
      path: `${REPORTS_BASE}/sessions-detail`,
      role: 'reports',
      tag: 'reports',
      summary: 'Sessions of a crew over a time range, page by page (start_time, then session id)',
      querySchema: 'reports.sessionsDetail.query',
      responses: { '200': { description: 'A page of session rows', schema: 'reports.sessionsDetail.page' }, ...ERRORS },
      async handle(ctx) {
        const q = parseSessionsDetailQuery(ctx.query)
        retention.checkRecords(q.startTs)
        return { status: 200, body: await sessionsDetail(sources, platform.clock, ctx.principal.accountId, q) }
      },
    },
    {
      method: 'get',
      path: `${REPORTS_BASE}/execute-report/:reportId`,
      role: 'reports',
      tag: 'reports',
      summary: 'Runs a configured report, grouped by hour, day, week or month in a time zone',
      querySchema: 'reports.executeReport.query',
      responses: {
        '200': { description: 'One row per time bucket', schema: 'reports.report.page' },
        ...ERRORS,
        '404': { description: 'No report with this id' },
      },
      async handle(ctx) {
        const report = visible(ctx.params.reportId ?? '', ctx.principal.accountId)
        if (!report) throw new NotFound('REPORT_NOT_FOUND', `Report "${ctx.params.reportId}" not found`, { reportId: ctx.params.reportId })
        const q = parseExecuteReportQuery(ctx.query)
        retention.checkReport(q.startTs, q.endTs, migration.ready())
        return { status: 200, body: await executeReport(sources, report, ctx.principal.accountId, q) }
      },
    },
    {
      method: 'get',
      path: `${REPORTS_BASE}/definitions`,
      role: 'reports',
      tag: 'reports',
      summary: 'The report definitions this key can run',
      responses: { '200': { description: 'Report ids and their metrics', schema: 'reports.definitions' }, ...ERRORS },
      async handle(ctx) {
        const data = [...compiled.values()]
          .filter(r => visible(r.definition.id, ctx.principal.accountId))
          .map(({ definition: { id, title, description, metrics } }) => ({ id, title, description, metrics }))
        return { status: 200, body: { data } }
      },
    },
  ]

  return {
    name: 'reports',
    routes,
    start: async () => {
      await recorder.ensureIndexes()
      await retention.start()
      await migration.start()
    },
    stop: async () => {
      await migration.stop()
      await retention.stop()
    },
  }
}
