import { parseArgs, type ParseArgsConfig } from 'node:util'

/** A usage error: printed as one line naming the bad value, exit code 2. */
export class CliError extends Error {}

type Options = NonNullable<ParseArgsConfig['options']>

/** node:util parseArgs (strict) with its errors turned into CliError. */
export function parseFlags<T extends Options>(
  argv: string[],
  options: T,
  allowPositionals = false,
): ReturnType<typeof parseArgs<{ args: string[]; options: T; allowPositionals: boolean; strict: true }>> {
  try {
    return parseArgs({ args: argv, options, allowPositionals, strict: true })
  } catch (err) {
    throw new CliError((err as Error).message)
  }
}
