import { parseArgs, type ParseArgsConfig } from 'node:util'
import { didYouMean } from '../config/suggest.js'
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

type Options = NonNullable<ParseArgsConfig['options']>

/** node:util parseArgs (strict) with its errors turned into CliError, an unknown flag with a suggestion. */
export function parseFlags<T extends Options>(
  argv: string[],
  options: T,
  allowPositionals = false,
): ReturnType<typeof parseArgs<{ args: string[]; options: T; allowPositionals: boolean; strict: true }>> {
  try {
    return parseArgs({ args: argv, options, allowPositionals, strict: true })
  } catch (err) {
    const e = err as Error & { code?: string }
    const unknown = e.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? /Unknown option '(-{1,2})([^'=]+)/.exec(e.message) : null
    if (unknown) {
      const [, dashes, name] = unknown
      const hint = didYouMean(name!, Object.keys(options), (s) => `--${s}`)
      throw new CliError(`unknown option '${dashes}${name}'${hint || '; see --help'}`)
    }
    throw new CliError(e.message)
  }
}
