import { buildInfo } from '../core/build-info.js'
import { parseFlags } from '../command-line/parse-flags.js'

const HELP = `usage: prefix-router info

Prints the build information as JSON: the SIMD path in use, the SHA-256 of the native sources
the binary was built from, and which binary was loaded.
`

export async function run(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, { help: { type: 'boolean', short: 'h' } })
  if (values.help) {
    process.stdout.write(HELP)
    return 0
  }
  process.stdout.write(`${JSON.stringify(buildInfo(), null, 2)}\n`)
  return 0
}
