// Every error the package throws carries a stable `code`, so callers branch on it rather than
// on messages, which may be reworded. Argument errors follow Node's own ERR_INVALID_ARG_TYPE /
// ERR_OUT_OF_RANGE and stay TypeError / RangeError; JavaScript has no multiple inheritance, so
// `instanceof PrefixRouterError` recognises them by a mark instead of by prototype.

// Symbol.for: a second copy of the package (two versions in one node_modules tree) marks
// its errors with the same symbol, so either copy's instanceof recognises both.
const MARK = Symbol.for('prefix-router.error')

function mark(err: Error): void {
  Object.defineProperty(err, MARK, { value: true })
}

export interface PrefixRouterErrorOptions {
  /** Machine-readable facts about the failure (the option's name, a limit), beyond the message. */
  details?: Readonly<Record<string, unknown>>
  cause?: unknown
}

/** The base of every error the package throws. */
export class PrefixRouterError extends Error {
  readonly code: string
  declare readonly details?: Readonly<Record<string, unknown>>

  constructor(code: string, message: string, options: PrefixRouterErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.code = code
    this.name = 'PrefixRouterError'
    if (options.details !== undefined) Object.defineProperty(this, 'details', { value: options.details, enumerable: true })
    mark(this)
  }

  // Subclasses keep the ordinary prototype test: only the base also accepts the marked
  // TypeError / RangeError subclasses below.
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this !== PrefixRouterError) return Function.prototype[Symbol.hasInstance].call(this, value)
    return typeof value === 'object' && value !== null && (value as { [MARK]?: unknown })[MARK] === true
  }
}

export class InvalidArgTypeError extends TypeError {
  readonly code = 'ERR_INVALID_ARG_TYPE'
  readonly details: Readonly<{ key: string; expected: string }>
  constructor(key: string, expected: string, got: unknown) {
    super(`${key} must be ${expected}; got ${describe(got)}`)
    this.name = 'TypeError'
    this.details = { key, expected }
    mark(this)
  }
}

export class OutOfRangeError extends RangeError {
  readonly code = 'ERR_OUT_OF_RANGE'
  readonly details: Readonly<{ key: string; allowed: string }>
  /** `message` replaces the usual "key must be allowed; got value" when a rule reads better in words of its own. */
  constructor(key: string, allowed: string, got: unknown, message = `${key} must be ${allowed}; got ${describe(got)}`) {
    super(message)
    this.name = 'RangeError'
    this.details = { key, allowed }
    mark(this)
  }
}

/** Thrown by Router.pick() when no instance can take the request; `code` says why. */
export class NoInstanceError extends PrefixRouterError {
  declare readonly code: 'ROUTER_NO_INSTANCES' | 'ROUTER_NO_GROUP'
  constructor(code: 'ROUTER_NO_INSTANCES' | 'ROUTER_NO_GROUP', message: string) {
    super(code, message)
    this.name = 'NoInstanceError'
  }
}

/** Thrown by a Router method called after close(). */
export class RouterClosedError extends PrefixRouterError {
  declare readonly code: 'ROUTER_CLOSED'
  constructor() {
    super('ROUTER_CLOSED', 'router is closed')
    this.name = 'RouterClosedError'
  }
}

/**
 * A router shared between processes: `ROUTER_READ_ONLY` when a process that attached to
 * another's state tries to change it (only the creator sets instances and parameters),
 * `ROUTER_SHARED_STATE` when the state file cannot be created or opened (the message names
 * the path and why).
 */
export class SharedRouterError extends PrefixRouterError {
  declare readonly code: 'ROUTER_READ_ONLY' | 'ROUTER_SHARED_STATE'
  constructor(code: 'ROUTER_READ_ONLY' | 'ROUTER_SHARED_STATE', message: string, options?: PrefixRouterErrorOptions) {
    super(code, message, options)
    this.name = 'SharedRouterError'
  }
}

/**
 * A request that cannot be routed as sent (a body without a prompt, a bad tenant id, a body
 * over the limit): `code` names the problem in OpenAI's style (`missing_messages`,
 * `invalid_tenant`) and `status` is the HTTP status a server answers it with.
 */
export class RequestError extends PrefixRouterError {
  constructor(
    code: string,
    message: string,
    readonly status = 400,
    options: PrefixRouterErrorOptions = {},
  ) {
    super(code, message, options)
    this.name = 'RequestError'
  }
}

export const requestTooLarge = (limit: number) =>
  new RequestError('request_too_large', `request body exceeds the limit of ${limit} bytes`, 413, { details: { limit } })

export const noHealthyInstance = (endpoint: string, retryAfterSeconds: number) =>
  new RequestError('no_healthy_instance', `no healthy instance for endpoint '${endpoint}'`, 503, { details: { endpoint, retryAfterSeconds } })

export function describe(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 80 ? `${v.slice(0, 77)}...` : v)
  if (typeof v === 'bigint') return `${v}n`
  if (v === null || v === undefined || typeof v !== 'object') return String(v)
  if (Array.isArray(v)) return `an array of length ${v.length}`
  return `an instance of ${(v as object).constructor?.name ?? 'Object'}`
}

/**
 * A local tokenizer that cannot be loaded: `details.file` names the file (tokenizer.json,
 * tokenizer_config.json, chat_template.jinja) and the message says what is wrong with it.
 */
export class TokenizerLoadError extends PrefixRouterError {
  declare readonly code: 'TOKENIZER_LOAD'
  declare readonly details: Readonly<{ file: string }>
  constructor(file: string, problem: string, options: { cause?: unknown } = {}) {
    super('TOKENIZER_LOAD', `${file}: ${problem}`, { details: { file }, ...options })
    this.name = 'TokenizerLoadError'
  }
}
