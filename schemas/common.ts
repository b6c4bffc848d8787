// Building blocks shared by several bodies.
export const nonEmptyString = { type: 'string', minLength: 1, 'x-code': 'REQUIRED' } as const
export const uuid = { type: 'string', format: 'uuid' } as const
export const errorBody = {
  type: 'object',
  required: ['code', 'message'],
  properties: { code: { type: 'string' }, message: { type: 'string' } },
} as const
