import { PrefixRouterError } from '../core/errors.js'

/**
 * An error the user can act on: printed as one line (no stack trace). Exit status 2 for a
 * usage error (a bad flag, value or file), 1 for a failure to run (a port already in use).
 */
export class CliError extends PrefixRouterError {
  declare readonly code: 'ERR_CLI_USAGE' | 'ERR_CLI_FAILED'
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(exitCode === 2 ? 'ERR_CLI_USAGE' : 'ERR_CLI_FAILED', message)
    this.name = 'CliError'
  }
}
