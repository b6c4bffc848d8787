// Structured JSON logs on stdout, one line each (pino). Secrets never reach a log line: any field
// whose name looks like a credential is replaced before serialisation, and values are bounded.
import { pino } from 'pino'

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent'
const SECRET_FIELD = /^(apikey|api_key|authorization|password|secret|token|key)$/i

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void
  info(msg: string, fields?: Record<string, unknown>): void
  warn(msg: string, fields?: Record<string, unknown>): void
  error(msg: string, fields?: Record<string, unknown>): void
  child(fields: Record<string, unknown>): Logger
  /** Writes what is buffered, synchronously (before the process exits). */
  flush?(): void
}

const MAX_DEPTH = 6
const MAX_STRING = 2048
const MAX_ITEMS = 100

const clip = (text: string) => (text.length > MAX_STRING ? `${text.slice(0, MAX_STRING)}…[+${text.length - MAX_STRING} chars]` : text)

/**
 * A copy safe to serialize: credentials replaced, and bounded (depth, string length, items), so
 * that logging a client's value can neither overflow the stack nor write megabytes per line.
 */
export function redact(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return clip(value)
  if (typeof value === 'bigint') return value.toString()
  if (value === null || typeof value !== 'object') return value
  if (depth > MAX_DEPTH) return '[truncated]'
  if (value instanceof Error) {
    return { name: value.name, message: clip(value.message), ...(value.stack ? { stack: clip(value.stack) } : {}) }
  }
  if (Array.isArray(value)) return value.slice(0, MAX_ITEMS).map(v => redact(v, depth + 1))
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value).slice(0, MAX_ITEMS)) {
    out[k] = SECRET_FIELD.test(k) ? '[redacted]' : redact(v, depth + 1)
  }
  return out
}

/**
 * A logger on pino (the ecosystem's structured logger: level checks that cost nothing when off,
 * asynchronous writes to stdout so a burst of lines does not hold the event loop). Fields pass
 * through `redact` first. `write` takes each line instead of stdout (tests read them).
 */
export function createLogger(level: LogLevel = 'info', base: Record<string, unknown> = {}, write?: (line: string) => void): Logger {
  const destination: pino.DestinationStream & { flushSync?: () => void } = write
    ? { write: (chunk: string) => write(chunk.endsWith('\n') ? chunk.slice(0, -1) : chunk) }
    : pino.destination({ dest: 1, sync: false })
  const root = pino(
    {
      level,
      base: null,
      messageKey: 'msg',
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: label => ({ level: label }) },
    },
    destination,
  )
  return wrap(Object.keys(base).length ? root.child(safe(base)) : root, () => destination.flushSync?.())
}

function wrap(logger: pino.Logger, flush: () => void): Logger {
  const emit = (level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => {
    if (!logger.isLevelEnabled(level)) return
    if (fields === undefined) logger[level](msg)
    else logger[level](safe(fields), msg)
  }
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: fields => wrap(logger.child(safe(fields)), flush),
    flush,
  }
}

/** The fields as logged: redacted, or a marker when they cannot be read (a getter that throws). */
function safe(fields: Record<string, unknown>): Record<string, unknown> {
  try {
    const out = redact(fields) as Record<string, unknown>
    JSON.stringify(out)
    return out
  } catch {
    return { fieldsUnserializable: true }
  }
}
