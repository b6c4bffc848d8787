// The wire protocol between the processes of a cluster (gateways, engine nodes, workers): every
// message on NATS is JSON with a protocol version `v` (absent: version 1, what builds wrote
// before it was versioned). A reader decodes at the transport's edge: the message parses, its
// version is one this build reads (WIRE_VERSIONS) and it matches that version's schema
// (schemas/wire.ts), or it is refused whole, with one log line and a count
// (switchboard_wire_refused_total), and nothing of it is applied.
//
// The rule for rolling upgrades (docs/deploy.md, "Wire protocol"): a build reads the previous
// version and its own; engine nodes (and workers) upgrade before gateways. A node answers each
// request in the version it was asked in, so a gateway not yet upgraded understands the answer.
// What nobody asked for (events, KV entries, work messages) is written in a version every
// running reader reads: NATS_WIRE_VERSION pins what a process writes to the previous version
// until the last older reader is gone.
import { WIRE_VERSIONS, wireProblem, type WireMessage, type WireVersion } from '../schemas/wire.js'
import { DomainError, domainError, ERROR_KINDS, type ErrorKind } from './errors.js'
import { HTTP_STATUS } from './http.js'
import type { Logger } from './logger.js'
import type { Metrics } from './metrics.js'

export { WIRE_VERSIONS, type WireMessage, type WireVersion } from '../schemas/wire.js'

/** The version this build writes (unless pinned lower). */
export const WIRE_VERSION: WireVersion = 3

/** Why a message was refused: not JSON, a version this build does not read, or not its version's schema. */
export type RefusalReason = 'json' | 'version' | 'schema'

export type Decoded<T> = { ok: true; v: WireVersion; message: T } | { ok: false; reason: RefusalReason; v?: number; problem: string }

/** An error as version 2 carries it: the domain error's kind and what clients see of it. */
export interface WireErrorV2 {
  kind: ErrorKind
  code: string
  message: string
  extra?: Record<string, unknown>
  retryAfterSeconds?: number
}

/** An error as version 1 carried it: with the HTTP status the answer would have. */
export interface WireErrorV1 {
  status: number
  code: string
  message: string
  extra?: Record<string, unknown>
}

export type WireError = WireErrorV1 | WireErrorV2

/** Version 1 carried statuses; each kind has its own (platform/http.ts), so the kind is known again. */
const KIND_OF_STATUS = new Map<number, ErrorKind>(ERROR_KINDS.map(kind => [HTTP_STATUS[kind], kind]))

/** A failure that is not a domain error: its details stay in the log of the node it happened on. */
const unexpected = (): DomainError => domainError('internal', 'INTERNAL', 'Unexpected engine error')

export interface WireOptions {
  /** The version this process writes (default WIRE_VERSION); only the previous one may be pinned. */
  writes?: WireVersion
  logger: Logger
  metrics?: Pick<Metrics, 'wireRefused'>
}

/** Encodes and decodes this process's NATS messages (one per process: its version, its log, its count). */
export class Wire {
  readonly writes: WireVersion
  private readonly logger: Logger
  private readonly metrics?: Pick<Metrics, 'wireRefused'>

  constructor(options: WireOptions) {
    this.writes = options.writes ?? WIRE_VERSION
    if (!WIRE_VERSIONS.includes(this.writes)) throw new Error(`wire version ${this.writes} is not one this build speaks (${WIRE_VERSIONS.join(', ')})`)
    this.logger = options.logger
    this.metrics = options.metrics
  }

  /** The JSON text of a message (a plain object) at `version` (a version-1 message has no `v`). */
  encode(message: object, version: WireVersion = this.writes): string {
    const text = JSON.stringify(message)
    if (version === 1) return text
    // `v` is appended to the text (no copy of the message), last: decode() takes it off again.
    return text.length > 2 ? `${text.slice(0, -1)},"v":${version}}` : `{"v":${version}}`
  }

  /**
   * Parses, checks and answers a message, or refuses it (logged once and counted). `data`: the
   * payload's bytes or text, or an already parsed value (a KV entry). The version is taken off
   * the message it answers.
   */
  decode<T>(name: WireMessage, data: unknown, where: Record<string, unknown> = {}): Decoded<T> {
    let value: unknown = data
    if (typeof data === 'string' || data instanceof Uint8Array) {
      const text = typeof data === 'string' ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8')
      // Version 1 pinged with an empty payload.
      if (text === '' && name === 'engine.ping') value = {}
      else {
        try {
          value = JSON.parse(text)
        } catch {
          return this.refuse(name, { ok: false, reason: 'json', problem: 'not JSON' }, where)
        }
      }
    }
    const declared = value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as { v?: unknown }).v : undefined
    const v = declared === undefined ? 1 : declared
    if (!WIRE_VERSIONS.includes(v as WireVersion)) {
      return this.refuse(name, { ok: false, reason: 'version', v: typeof v === 'number' ? v : undefined, problem: `version ${JSON.stringify(v)} is not one this build reads (${WIRE_VERSIONS.join(', ')})` }, where)
    }
    const problem = wireProblem(name, v as WireVersion, value)
    if (problem) return this.refuse(name, { ok: false, reason: 'schema', v: v as number, problem }, where)
    if (declared !== undefined) delete (value as { v?: unknown }).v
    return { ok: true, v: v as WireVersion, message: value as T }
  }

  private refuse<T>(name: WireMessage, refusal: Extract<Decoded<T>, { ok: false }>, where: Record<string, unknown>): Decoded<T> {
    try {
      this.metrics?.wireRefused.inc({ message: name, reason: refusal.reason })
      this.logger.warn('wire message refused', { message: name, reason: refusal.reason, version: refusal.v, problem: refusal.problem, ...where })
    } catch {
      // counting and logging must not stop the refusal
    }
    return refusal
  }

  /** An error as the asker's version carries it (version 1: with the HTTP status it answered). */
  errorToWire(error: unknown, version: WireVersion): WireError {
    const known = error instanceof DomainError ? error : unexpected()
    const extra = Object.keys(known.extra).length ? { extra: known.extra } : {}
    if (version === 1) return { status: HTTP_STATUS[known.kind], code: known.code, message: known.message, ...extra }
    return { kind: known.kind, code: known.code, message: known.message, ...extra, ...(known.retryAfterSeconds === undefined ? {} : { retryAfterSeconds: known.retryAfterSeconds }) }
  }

  /** The domain error a decoded error stands for (version 1: its kind from the status it carried). */
  errorFromWire(error: WireError): DomainError {
    if ('kind' in error) return domainError(error.kind, error.code, error.message, error.extra ?? {}, { retryAfterSeconds: error.retryAfterSeconds })
    return domainError(KIND_OF_STATUS.get(error.status) ?? 'internal', error.code, error.message, error.extra ?? {})
  }
}
