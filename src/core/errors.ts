// Argument errors name the option and what it accepts, in the style of Node's own
// ERR_INVALID_ARG_TYPE / ERR_OUT_OF_RANGE, so callers can branch on `code`.

export class InvalidArgTypeError extends TypeError {
  readonly code = 'ERR_INVALID_ARG_TYPE'
  constructor(key: string, expected: string, got: unknown) {
    super(`${key} must be ${expected}; got ${describe(got)}`)
    this.name = 'TypeError'
  }
}

export class OutOfRangeError extends RangeError {
  readonly code = 'ERR_OUT_OF_RANGE'
  constructor(key: string, allowed: string, got: unknown) {
    super(`${key} must be ${allowed}; got ${describe(got)}`)
    this.name = 'RangeError'
  }
}

export function describe(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 80 ? `${v.slice(0, 77)}...` : v)
  if (typeof v === 'bigint') return `${v}n`
  if (v === null || v === undefined || typeof v !== 'object') return String(v)
  if (Array.isArray(v)) return `an array of length ${v.length}`
  return `an instance of ${(v as object).constructor?.name ?? 'Object'}`
}
