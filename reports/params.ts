// Query parameters of the report endpoints, validated against the published JSON Schemas
// (schemas/reports.ts). Every problem is a 400 naming the parameter:
//   { code: 'INVALID_PARAMETER', message, parameter, details: [{ parameter, code, message }] }
import { Invalid } from '../platform/errors.js'
import { type JsonSchema, schemas } from '../schemas/index.js'
import { reportsSchemas } from '../schemas/reports.js'
import { canonicalZone, type Grouping } from './time-buckets.js'

/** Hourly buckets need the zone's offset changes over the whole range: bounded to 5 years. */
export const MAX_HOUR_RANGE_MS = 1827 * 86_400_000

export interface ParameterIssue {
  parameter: string
  code: string
  message: string
}

export const invalidParameters = (issues: ParameterIssue[]) =>
  new Invalid('INVALID_PARAMETER', issues[0]!.message, { parameter: issues[0]!.parameter, details: issues })

export const invalidParameter = (parameter: string, message: string, code = 'INVALID_VALUE') =>
  invalidParameters([{ parameter, code, message }])

type QuerySchemaId = 'reports.sessionsDetail.query' | 'reports.executeReport.query'

/**
 * Query string -> object for the schema: empty values count as absent, a repeated parameter is an
 * error, and all-digit values of integer parameters become numbers (anything else stays a string
 * and fails the type check).
 */
function readQuery(id: QuerySchemaId, query: URLSearchParams): Record<string, any> {
  const properties = (reportsSchemas[id] as JsonSchema).properties as Record<string, JsonSchema>
  const out: Record<string, any> = {}
  const repeated: ParameterIssue[] = []
  for (const name of Object.keys(properties)) {
    const values = query.getAll(name)
    if (values.length > 1) repeated.push({ parameter: name, code: 'REPEATED', message: `${name} must be given once` })
    const raw = values[0]
    if (raw === undefined || raw === '') continue
    out[name] = properties[name]!.type === 'integer' && /^-?[0-9]{1,16}$/.test(raw) ? Number(raw) : raw
  }
  if (repeated.length) throw invalidParameters(repeated)
  return out
}

function validate(id: QuerySchemaId, query: URLSearchParams): Record<string, any> {
  const data = readQuery(id, query)
  const properties = (reportsSchemas[id] as JsonSchema).properties as Record<string, JsonSchema>
  const order = Object.keys(properties)
  const issues = schemas
    .validate(id, data)
    .map(issue => {
      const parameter = issue.field
      const expected = properties[parameter]?.['x-expected'] as string | undefined
      const message = issue.code === 'REQUIRED' ? `${parameter} is required` : `${parameter} must be ${expected ?? 'valid'}`
      return { parameter, code: issue.code, message }
    })
    .sort((a, b) => order.indexOf(a.parameter) - order.indexOf(b.parameter))
  if (issues.length) throw invalidParameters(issues)
  if (data.end_ts <= data.start_ts) throw invalidParameter('end_ts', 'end_ts must be greater than start_ts', 'OUT_OF_RANGE')
  return data
}

export interface RangeQuery {
  crewId: string
  startTs: number
  endTs: number
  page: number
  pageSize: number
}

export interface SessionsDetailQuery extends RangeQuery {
  asOf?: number
  cursor?: string
}

export interface ExecuteReportQuery extends RangeQuery {
  timeZone: string
  groupByTime: Grouping | null
}

export function parseSessionsDetailQuery(query: URLSearchParams): SessionsDetailQuery {
  const q = validate('reports.sessionsDetail.query', query)
  return {
    crewId: q.crew_id,
    startTs: q.start_ts,
    endTs: q.end_ts,
    page: q.page,
    pageSize: q.pageSize,
    asOf: q.asOf,
    cursor: q.cursor,
  }
}

export function parseExecuteReportQuery(query: URLSearchParams): ExecuteReportQuery {
  const q = validate('reports.executeReport.query', query)
  const timeZone = canonicalZone(q.timeZone)
  if (!timeZone) {
    throw invalidParameter('timeZone', `timeZone must be an IANA time zone name such as Europe/Madrid; "${q.timeZone}" is not one`, 'UNKNOWN_TIME_ZONE')
  }
  if (q.groupByTime === 'hour' && q.end_ts - q.start_ts > MAX_HOUR_RANGE_MS) {
    throw invalidParameter('groupByTime', 'groupByTime=hour covers at most 1827 days (5 years); narrow start_ts..end_ts or group by day', 'RANGE_TOO_LARGE')
  }
  return {
    crewId: q.crew_id,
    startTs: q.start_ts,
    endTs: q.end_ts,
    page: q.page,
    pageSize: q.pageSize,
    timeZone,
    groupByTime: q.groupByTime ?? null,
  }
}
