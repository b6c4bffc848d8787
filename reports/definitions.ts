// Report definitions: configuration (config/reports.json), each a named set of metrics over
// session records. A definition compiles to `$group` accumulators whose partial results can be
// merged (sums, counts, min, max) plus, for percentiles, a duration histogram (see metrics.ts).
import { existsSync, readFileSync } from 'node:fs'
import { dirname, isAbsolute, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { schemas } from '../schemas/index.js'
import { type METRIC_FIELDS, type METRIC_OPS, type WHERE_FIELDS } from '../schemas/reports.js'

export type MetricField = (typeof METRIC_FIELDS)[number]
export type WhereField = (typeof WHERE_FIELDS)[number]
export type MetricOp = (typeof METRIC_OPS)[number]

export interface MetricDefinition {
  op: MetricOp
  field?: MetricField
  where?: Partial<Record<WhereField, string | string[]>>
  /** Percentile rank, (0, 100]. */
  p?: number
  /** ratio: [numerator metric, denominator metric]. */
  of?: [string, string]
  description?: string
}

export interface ReportDefinition {
  id: string
  title?: string
  description?: string
  /** When present, only these accounts see the report (others get 404). */
  accounts?: string[]
  metrics: Record<string, MetricDefinition>
}

export class ReportDefinitionError extends Error {
  override name = 'ReportDefinitionError'
}

/** Checks a parsed definitions document; throws with every problem listed. */
export function parseDefinitions(document: unknown, source: string): Map<string, ReportDefinition> {
  const issues = schemas.validate('reports.definitionsFile', document)
  if (issues.length) {
    throw new ReportDefinitionError(`${source}: ${issues.map(i => `${i.field}: ${i.reason}`).join('; ')}`)
  }
  const reports = new Map<string, ReportDefinition>()
  for (const report of (document as { reports: ReportDefinition[] }).reports) {
    if (reports.has(report.id)) throw new ReportDefinitionError(`${source}: report id "${report.id}" is defined twice`)
    for (const [name, metric] of Object.entries(report.metrics)) {
      if (metric.op !== 'ratio') continue
      for (const ref of metric.of!) {
        const target = report.metrics[ref]
        if (!target) throw new ReportDefinitionError(`${source}: ${report.id}.${name} refers to unknown metric "${ref}"`)
        if (target.op === 'ratio') throw new ReportDefinitionError(`${source}: ${report.id}.${name} may not refer to another ratio`)
      }
    }
    reports.set(report.id, report)
  }
  return reports
}

/** A relative path is read from the working directory, else from the project root. */
export function resolveDefinitionsFile(path: string): string {
  if (isAbsolute(path)) return path
  const fromCwd = resolve(path)
  if (existsSync(fromCwd)) return fromCwd
  let dir = dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 4; i++) {
    if (existsSync(join(dir, 'package.json'))) return join(dir, path)
    dir = dirname(dir)
  }
  return fromCwd
}

export function loadDefinitions(path: string): Map<string, ReportDefinition> {
  const file = resolveDefinitionsFile(path)
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (error) {
    throw new ReportDefinitionError(`Cannot read report definitions ${file}: ${(error as Error).message}`)
  }
  let document: unknown
  try {
    document = JSON.parse(text)
  } catch (error) {
    throw new ReportDefinitionError(`${file} is not valid JSON: ${(error as Error).message}`)
  }
  return parseDefinitions(document, file)
}
