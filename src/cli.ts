#!/usr/bin/env -S node --initial-old-space-size=128
// The V8 flag: a proxy allocates a few KB per request, and with V8's default initial old-space
// limit a full collection ran every ~0.5 s at 1,000 req/s, each stalling requests 10-20 ms
// (bench/proxy.bench.ts, docs/benchmarks.md "Router overhead"); 128 MB spaces them ~4 s apart. Not allowed
// in NODE_OPTIONS, hence the shebang; `npm start` and the benchmarks pass it too.
// `prefix-router <command>`: each command is a module in src/commands/ loaded on demand,
// so `prefix-router hash` does not pay for the proxy's imports.
import { CliError } from './command-line/cli-error.js'
import { MissingPackageError } from './core/optional-packages.js'

// A command whose modules need optional packages loads them itself once it has looked for
// them (with everything else its flags ask for), so that its --help needs none of them.
const COMMANDS: Record<string, { summary: string; load: () => Promise<{ run(argv: string[]): Promise<number> }> }> = {
  hash: { summary: 'XXH3-64 of files or stdin, in xxhsum -H3 format', load: () => import('./commands/hash.js') },
  info: { summary: 'build information: SIMD path, native sources hash, binary in use', load: () => import('./commands/info.js') },
  sim: { summary: 'simulated vLLM workers: prefix cache, continuous batching, vLLM metrics, faults', load: () => import('./commands/sim.js') },
  serve: { summary: 'run the router in front of your instances (--demo: an embedded simulated fleet)', load: () => import('./commands/serve.js') },
  epp: { summary: 'the endpoint picker of a Gateway API inference gateway (Envoy ext_proc over gRPC)', load: () => import('./commands/epp.js') },
  'epp-check': { summary: 'a gateway in one command: one chat through a running endpoint picker and the pod it names', load: () => import('./commands/epp-check.js') },
  route: { summary: 'dry run: which instance a request body would go to, and why', load: () => import('./commands/route.js') },
  replay: { summary: 'replay a workload or trace through the virtual fleet with each strategy', load: () => import('./commands/replay.js') },
  'make-trace': { summary: 'write a production-shaped hash-id trace (chat, mixed) for replay', load: () => import('./commands/make-trace.js') },
}

function usage(): string {
  const rows = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`)
  return `usage: prefix-router <command> [options]\n       prefix-router --version\n\ncommands:\n${rows.join('\n')}\n\nRun prefix-router <command> --help for its options.\n`
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(usage())
    return name === undefined ? 2 : 0
  }
  if (name === '--version' || name === '-v') {
    const { version } = await import('./commands/version.js')
    process.stdout.write(`${version()}\n`)
    return 0
  }
  const cmd = COMMANDS[name]
  if (cmd === undefined) {
    const { didYouMean } = await import('./config/suggest.js')
    process.stderr.write(`prefix-router: unknown command '${name}'${didYouMean(name, Object.keys(COMMANDS))}\n\n${usage()}`)
    return 2
  }
  return (await cmd.load()).run(rest)
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (err: unknown) => {
    // A missing optional package: the message names it and the npm command, with its code for
    // scripts to match; a stack adds nothing.
    if (err instanceof CliError || err instanceof MissingPackageError) {
      process.stderr.write(`prefix-router: ${err instanceof MissingPackageError ? `${err.code}: ` : ''}${err.message}\n`)
      process.exitCode = err instanceof CliError ? err.exitCode : 1
    } else {
      process.stderr.write(`prefix-router: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`)
      process.exitCode = 1
    }
  },
)
