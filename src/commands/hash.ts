import { readFile } from 'node:fs/promises'
import { xxh3 } from '../core/hash.js'
import { CliError } from '../command-line/cli-error.js'
import { parseFlags } from '../command-line/parse-flags.js'

const HELP = `usage: prefix-router hash [--seed N] [FILE ...]

Prints XXH3-64 of each FILE (or of stdin) as xxhsum -H3 does: "XXH3 (name) = <16 hex>".
  --seed N   64-bit seed, decimal or 0x-hex (default 0)
`

async function readStdin(): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of process.stdin) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags(argv, { seed: { type: 'string' }, help: { type: 'boolean', short: 'h' } }, true)
  if (values.help) {
    process.stdout.write(HELP)
    return 0
  }
  let seed = 0n
  if (values.seed !== undefined) {
    try {
      seed = BigInt(values.seed)
    } catch {
      throw new CliError(`--seed must be an integer from 0 to 2^64-1; got '${values.seed}'`)
    }
    if (seed < 0n || seed >= 1n << 64n) throw new CliError(`--seed must be an integer from 0 to 2^64-1; got '${values.seed}'`)
  }
  const names = positionals.length > 0 ? positionals : ['-']
  for (const name of names) {
    let data: Buffer
    try {
      data = name === '-' ? await readStdin() : await readFile(name)
    } catch (err) {
      throw new CliError(`cannot read '${name}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
    }
    const label = name === '-' ? 'stdin' : name
    process.stdout.write(`XXH3 (${label}) = ${xxh3(data, seed).toString(16).padStart(16, '0')}\n`)
  }
  return 0
}
