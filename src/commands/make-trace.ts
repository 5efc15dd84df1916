// `prefix-router make-trace`: writes a hash-id trace (the format `replay --trace-format
// hash-ids` reads) of a production-shaped service, seeded and deterministic. The shapes are
// src/replay/traces/; this is flags, the window and the writing.
import { createWriteStream } from 'node:fs'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { MIN_BLOCK_TOKENS } from '../replay/block-text.js'
import { formatDuration, parseDuration } from '../replay/duration.js'
import { SHAPES, traceLine, traceWindow } from '../replay/traces/index.js'
import { describeParam, type WorkloadParam } from '../replay/types.js'
import { CliError } from '../command-line/cli-error.js'
import { parseFlags } from '../command-line/parse-flags.js'

const MAX_BLOCK_TOKENS = 65_536

const KNOBS = new Map<string, WorkloadParam>()
for (const s of Object.values(SHAPES)) for (const p of s.params) if (!KNOBS.has(p.flag)) KNOBS.set(p.flag, p)

function help(): string {
  const shapes = Object.values(SHAPES).map((s) => {
    const knobs = s.params.map((p) => `      --${p.flag.padEnd(19)} ${p.description} (default ${p.default})`)
    return `  ${s.name}: ${s.summary}\n${knobs.join('\n')}`
  })
  return `usage: prefix-router make-trace --shape NAME [options]

Writes a hash-id trace of a production-shaped service, one JSON object a line:
{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}
Replay it with: prefix-router replay --trace FILE --trace-format hash-ids

  --shape NAME                 ${Object.keys(SHAPES).join(' | ')} (default chat)
  --out FILE                   where to write (default stdout)
  --duration D                 the window's length: 1h, 10m, 90s (default 10m)
  --start D                    where the window starts in the service's time (default 0); the
                               service always runs from 0, so --start 30m is the next slice of
                               the same service, conversations begun earlier showing up mid-way
  --seed N                     seed (default 1)
  --block-tokens N             tokens per hash id (${MIN_BLOCK_TOKENS} to ${MAX_BLOCK_TOKENS}; default 512)
  --quiet                      no summary on stderr

shapes and their knobs:
${shapes.join('\n')}
`
}

function durationFlag(flag: string, raw: string, positive: boolean): number {
  const ms = parseDuration(raw)
  if (!Number.isFinite(ms) || ms < 0 || (positive && ms < 1)) throw new CliError(`--${flag} must be a duration such as 1h, 10m, 90s or 500ms; got '${raw}'`)
  return Math.round(ms)
}

function intFlag(flag: string, raw: string, min: number, max: number): number {
  const v = raw.trim() === '' ? NaN : Number(raw)
  if (!Number.isInteger(v) || v < min || v > max) throw new CliError(`--${flag} must be an integer from ${min} to ${max}; got '${raw}'`)
  return v
}

export async function run(argv: string[]): Promise<number> {
  const str = { type: 'string' } as const
  const { values } = parseFlags(argv, {
    shape: str,
    out: str,
    duration: str,
    start: str,
    seed: str,
    'block-tokens': str,
    quiet: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
    ...Object.fromEntries([...KNOBS.keys()].map((k) => [k, str])),
  })
  const v = values as Record<string, string | boolean | undefined>
  if (v.help === true) {
    process.stdout.write(help())
    return 0
  }
  const get = (k: string): string | undefined => (typeof v[k] === 'string' ? (v[k] as string) : undefined)

  const shapeName = get('shape') ?? 'chat'
  const shape = SHAPES[shapeName]
  if (shape === undefined) throw new CliError(`--shape must be one of ${Object.keys(SHAPES).join(', ')}; got '${shapeName}'`)
  const params: Record<string, number> = {}
  for (const p of shape.params) params[p.flag] = p.default
  for (const flag of KNOBS.keys()) {
    const raw = get(flag)
    if (raw === undefined) continue
    const p = shape.params.find((q) => q.flag === flag)
    if (p === undefined) throw new CliError(`--${flag} does not apply to --shape ${shape.name}`)
    const n = raw.trim() === '' ? NaN : Number(raw)
    if (!Number.isFinite(n) || n < p.min || n > p.max || (p.integer && !Number.isInteger(n))) throw new CliError(`--${flag} must be ${describeParam(p)}; got '${raw}'`)
    params[flag] = n
  }
  if (params['chat-share'] !== undefined && params['doc-share'] !== undefined && params['chat-share'] + params['doc-share'] > 1 + 1e-9) {
    throw new CliError(`--chat-share and --doc-share must add up to at most 1 (the rest are one-offs); got ${params['chat-share']} + ${params['doc-share']}`)
  }
  const durationMs = get('duration') === undefined ? 600_000 : durationFlag('duration', get('duration')!, true)
  const startMs = get('start') === undefined ? 0 : durationFlag('start', get('start')!, false)
  const seed = get('seed') === undefined ? 1 : intFlag('seed', get('seed')!, 0, 2 ** 31 - 1)
  const blockTokens = get('block-tokens') === undefined ? 512 : intFlag('block-tokens', get('block-tokens')!, MIN_BLOCK_TOKENS, MAX_BLOCK_TOKENS)
  const outPath = get('out')

  const stats = { requests: 0, input: 0, output: 0 }
  const rows = traceWindow(shape.generate(params, { seed, blockTokens }), startMs, durationMs)
  // Lines are written in chunks of about 1 MB: a trace of an hour is tens of MB at most.
  const chunks = function* (): Generator<string> {
    let parts: string[] = []
    let size = 0
    for (const r of rows) {
      stats.requests++
      stats.input += r.inputLength
      stats.output += r.outputLength
      const line = traceLine(r)
      parts.push(line, '\n')
      size += line.length + 1
      if (size >= 1 << 20) {
        yield parts.join('')
        parts = []
        size = 0
      }
    }
    if (parts.length > 0) yield parts.join('')
  }
  try {
    if (outPath === undefined) await pipeline(Readable.from(chunks()), process.stdout, { end: false })
    else await pipeline(Readable.from(chunks()), createWriteStream(outPath))
  } catch (err) {
    const e = err as NodeJS.ErrnoException
    // A reader that stops early (`| head`) is not an error.
    if (e.code === 'EPIPE') return 0
    if (outPath !== undefined && (e.code === 'ENOENT' || e.code === 'EISDIR' || e.code === 'EACCES')) throw new CliError(`--out cannot write '${outPath}': ${e.message}`)
    throw err
  }
  if (v.quiet !== true) {
    const n = stats.requests
    process.stderr.write(
      `make-trace: ${shape.name}, ${formatDuration(durationMs)} from ${startMs === 0 ? '0s' : formatDuration(startMs)}: ${n.toLocaleString('en-US')} requests` +
        (n > 0 ? `, mean input ${Math.round(stats.input / n).toLocaleString('en-US')} tokens, mean output ${Math.round(stats.output / n)}` : '') +
        (outPath === undefined ? '\n' : ` → ${outPath}\n`),
    )
  }
  return 0
}
