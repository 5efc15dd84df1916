// Every command's flags go through one strict parser, so that a typo is one line naming the
// flag (with the nearest known one) and exit status 2, the same in every command.
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { didYouMean } from '../config/suggest.js'
import { CliError } from './cli-error.js'

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
