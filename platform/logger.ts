// Structured JSON logs on stdout. Secrets never reach a log line: any field whose name looks
// like a credential is replaced before serialisation.

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent'
const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 99 }
const SECRET_FIELD = /^(apikey|api_key|authorization|password|secret|token|key)$/i

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void
  info(msg: string, fields?: Record<string, unknown>): void
  warn(msg: string, fields?: Record<string, unknown>): void
  error(msg: string, fields?: Record<string, unknown>): void
  child(fields: Record<string, unknown>): Logger
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

export function createLogger(
  level: LogLevel = 'info',
  base: Record<string, unknown> = {},
  write: (line: string) => void = line => process.stdout.write(line + '\n'),
): Logger {
  const min = ORDER[level]
  const emit = (lvl: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[lvl] < min) return
    let line: string
    try {
      line = JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...(redact({ ...base, ...fields }) as object) })
    } catch {
      // A getter that throws, or the like: the line still says what happened, without the fields.
      line = JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, fieldsUnserializable: true })
    }
    write(line)
  }
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: fields => createLogger(level, { ...base, ...fields }, write),
  }
}
