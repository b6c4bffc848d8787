// The error envelope every endpoint answers with: { code, message, ...extra }. The dialer's
// spec-defined bodies (VALIDATION_FAILED details, CONTACT_LIMIT_EXCEEDED fields) are extras.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message)
  }

  body() {
    return { code: this.code, message: this.message, ...this.extra }
  }
}

export const badRequest = (message: string, extra: Record<string, unknown> = {}, code = 'BAD_REQUEST') =>
  new ApiError(400, code, message, extra)
export const notFound = (what: string) => new ApiError(404, 'NOT_FOUND', `${what} not found`)
export const conflict = (code: string, message: string, extra: Record<string, unknown> = {}) =>
  new ApiError(409, code, message, extra)
