// The process-level policy for what escapes every other boundary (docs/operations.md,
// "Process-level policy"). The gateway already turns every request's failure into an answer,
// so what reaches here is a bug outside any request: a timer, an event emitter, a forgotten
// promise. One such error must not stop every session, stream and load of the process, but a
// process that keeps throwing has state nobody can vouch for, and a restart is safer.
import type { Logger } from './logger.js'
import type { Metrics } from './metrics.js'

export interface ProcessGuardOptions {
  logger: Logger
  metrics: Metrics
  /** Uncaught exceptions tolerated within the window; reaching it calls onFatal. */
  exceptionLimit: number
  exceptionWindowMs: number
  /** Called once, when the state is presumed unknown: drain and exit (non-zero). */
  onFatal: (reason: string) => void
}

/** Installs the handlers; returns their removal. */
export function installProcessGuards(options: ProcessGuardOptions): () => void {
  const { logger, metrics } = options
  let recent: number[] = []
  let fatal = false

  const onRejection = (reason: unknown) => {
    // A rejected promise nobody awaited: whatever it was for failed, nothing else is affected.
    logger.error('unhandled promise rejection', { error: reason })
    metrics.processErrors.inc({ kind: 'unhandled_rejection' })
  }

  const onException = (error: unknown) => {
    logger.error('uncaught exception', { error })
    metrics.processErrors.inc({ kind: 'uncaught_exception' })
    if (fatal) return
    const now = Date.now()
    recent = recent.filter(at => now - at < options.exceptionWindowMs)
    recent.push(now)
    // Node's own invariant broke: nothing after it can be trusted.
    const internal = (error as { code?: unknown } | null)?.code === 'ERR_INTERNAL_ASSERTION'
    if (recent.length >= options.exceptionLimit || internal) {
      fatal = true
      const reason = internal
        ? 'an internal assertion of Node.js failed'
        : `${recent.length} uncaught exceptions within ${options.exceptionWindowMs} ms`
      logger.error('process state presumed unknown: draining and exiting', { reason })
      options.onFatal(reason)
    }
  }

  process.on('unhandledRejection', onRejection)
  process.on('uncaughtException', onException)
  return () => {
    process.off('unhandledRejection', onRejection)
    process.off('uncaughtException', onException)
  }
}
