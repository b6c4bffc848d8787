// Building blocks shared by several bodies.
export const nonEmptyString = { type: 'string', minLength: 1, 'x-code': 'REQUIRED' } as const
export const uuid = { type: 'string', format: 'uuid' } as const
export const errorBody = {
  type: 'object',
  required: ['code', 'message'],
  properties: { code: { type: 'string' }, message: { type: 'string' } },
} as const

/**
 * A key the client chooses that becomes a stored field name (customFields): it must not start
 * with `$`, hold a dot (both would be read as update-path syntax) or be a name that reaches an
 * object's prototype.
 */
export const safeFieldName = {
  type: 'string',
  minLength: 1,
  maxLength: 100,
  pattern: '^(?!(?:__proto__|constructor|prototype)$)[^.$][^.]*$',
  'x-code': 'INVALID_FIELD_NAME',
  'x-expected': '1 to 100 characters, not starting with $, without dots, not __proto__, constructor or prototype',
} as const
