// What goes wrong inside the modules, in their own terms: a thing not found, a move the state
// does not allow, input that is not valid, a limit reached, a service not available now. Every
// module may import this file and none of them knows what an HTTP status is: the gateway maps a
// kind to a status in one place (platform/http.ts), and the wire protocol between gateways and
// engine nodes carries the kind, so the error is rebuilt as itself on the other side.
//
// `code` is the stable, machine-readable code clients see (SESSION_NOT_FOUND, ...), `extra` the
// fields clients see next to it (details, limits, the state refused...).

/** The kinds of domain error; each has one HTTP status and one name on the wire. */
export const ERROR_KINDS = [
  'invalid',
  'unauthenticated',
  'forbidden',
  'not_found',
  'expired',
  'invalid_state',
  'unsupported',
  'limit_reached',
  'unavailable',
  'timed_out',
  'internal',
] as const
export type ErrorKind = (typeof ERROR_KINDS)[number]

export interface DomainErrorOptions {
  /** When trying again may succeed (sent to clients as Retry-After). */
  retryAfterSeconds?: number
}

export abstract class DomainError extends Error {
  abstract readonly kind: ErrorKind
  readonly retryAfterSeconds?: number

  constructor(
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
    options: DomainErrorOptions = {},
  ) {
    super(message)
    if (options.retryAfterSeconds !== undefined) this.retryAfterSeconds = options.retryAfterSeconds
  }
}

/** The input is not valid (a body, a parameter, a name that does not resolve); `extra` says why. */
export class Invalid extends DomainError {
  readonly kind = 'invalid'
}

/** The caller could not be identified (a missing or wrong signature). */
export class Unauthenticated extends DomainError {
  readonly kind = 'unauthenticated'
}

/** The caller is known but may not do this. */
export class Forbidden extends DomainError {
  readonly kind = 'forbidden'
}

export class NotFound extends DomainError {
  readonly kind = 'not_found'
}

/** What was asked for existed but is no longer kept (past its retention). */
export class Expired extends DomainError {
  readonly kind = 'expired'
}

/** The thing exists but its state does not allow the request (a conflict). */
export class InvalidState extends DomainError {
  readonly kind = 'invalid_state'
}

/** The input comes in a form this does not take (e.g. a file that is not CSV). */
export class Unsupported extends DomainError {
  readonly kind = 'unsupported'
}

/** A quota or a limit of the caller's is used up; it may retry after `retryAfterSeconds`. */
export class LimitReached extends DomainError {
  readonly kind = 'limit_reached'
}

/** The service cannot take the request now (overloaded, a dependency away); retrying may work. */
export class Unavailable extends DomainError {
  readonly kind = 'unavailable'
}

/** This process (or node) is stopping: the request belongs elsewhere. */
export class ShuttingDown extends Unavailable {
  constructor(message: string, options: DomainErrorOptions = {}) {
    super('SHUTTING_DOWN', message, {}, options)
  }
}

/** Another node did not answer in time; what was asked may or may not have been done. */
export class TimedOut extends DomainError {
  readonly kind = 'timed_out'
}

/** An unexpected failure another node reported (its details stay in that node's log). */
export class Internal extends DomainError {
  readonly kind = 'internal'
}

const CLASSES: Record<ErrorKind, new (code: string, message: string, extra?: Record<string, unknown>, options?: DomainErrorOptions) => DomainError> = {
  invalid: Invalid,
  unauthenticated: Unauthenticated,
  forbidden: Forbidden,
  not_found: NotFound,
  expired: Expired,
  invalid_state: InvalidState,
  unsupported: Unsupported,
  limit_reached: LimitReached,
  unavailable: Unavailable,
  timed_out: TimedOut,
  internal: Internal,
}

/** The domain error of a kind (rebuilding one that crossed a thread or the wire). */
export function domainError(kind: ErrorKind, code: string, message: string, extra: Record<string, unknown> = {}, options: DomainErrorOptions = {}): DomainError {
  return new CLASSES[kind](code, message, extra, options)
}

/** The session asked for does not exist, or not for this account. */
export const sessionNotFound = (sessionId: string) => new NotFound('SESSION_NOT_FOUND', `Session ${sessionId} not found`)
