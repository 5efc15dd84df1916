import { buildInfo } from '../core/build-info.js'
import { parseFlags } from '../command-line/parse-flags.js'

export async function run(argv: string[]): Promise<number> {
  parseFlags(argv, {})
  process.stdout.write(`${JSON.stringify(buildInfo(), null, 2)}\n`)
  return 0
}
