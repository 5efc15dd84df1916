// Packages that only one feature needs are optional peer dependencies: they are most of an
// install's weight (Kubernetes' client, Hugging Face's and OpenAI's tokenizers, ZeroMQ, gRPC,
// Vega), and a plain `npm install prefix-router` leaves them out. Each feature loads its
// packages where it starts, after requireFeature() has looked for them, so that a missing one
// is one clear error naming it and the command that installs it, not a stack from the loader.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { PrefixRouterError } from './errors.js'

export const OPTIONAL_FEATURES = {
  epp: { what: 'the endpoint picker (prefix-router epp, epp-check)', packages: ['@grpc/grpc-js', '@grpc/grpc-js-xds', '@grpc/proto-loader', 'protobufjs', 'selfsigned'] },
  kubernetes: { what: 'Kubernetes discovery (kubernetes and inferencePool sources)', packages: ['@kubernetes/client-node'] },
  kvEvents: { what: 'the exact cache view (kvEvents, --kv-events-port)', packages: ['zeromq'] },
  simKvEvents: { what: "the simulator's KV-event publisher (--kv-events-port)", packages: ['zeromq'] },
  shareLoad: { what: 'sharing queued prefill between replicas (shareLoad)', packages: ['@redis/client'] },
  localTokenizer: { what: 'a local tokenizer (--tokenizer local)', packages: ['tokenizers'] },
  o200k: { what: 'the o200k tokenizer', packages: ['gpt-tokenizer'] },
  charts: { what: 'prefix-router replay (for its charts)', packages: ['vega', 'vega-lite'] },
} as const satisfies Record<string, { what: string; packages: readonly string[] }>

export type OptionalFeature = keyof typeof OPTIONAL_FEATURES

/** A feature and the packages it needs that are not installed. */
export interface MissingNeed {
  feature: OptionalFeature
  packages: readonly string[]
}

/**
 * Optional packages that features need are not installed: all of them, for every feature the
 * command was asked for, so one install fixes the lot; `details.command` installs them.
 */
export class MissingPackageError extends PrefixRouterError {
  declare readonly code: 'ERR_MISSING_PACKAGE'
  declare readonly details: Readonly<{ features: readonly OptionalFeature[]; packages: readonly string[]; command: string }>
  constructor(needs: readonly MissingNeed[]) {
    const packages = [...new Set(needs.flatMap((n) => n.packages))]
    const command = `npm install ${packages.map((p) => `${p}@${testedVersion(p)}`).join(' ')}`
    const what = needs.map((n) => `${OPTIONAL_FEATURES[n.feature].what} needs ${and(n.packages)}`)
    super(
      'ERR_MISSING_PACKAGE',
      `${and(what)}, ${packages.length === 1 ? 'an optional package that is' : 'optional packages that are'} not installed; install ${packages.length === 1 ? 'it' : 'them'} beside prefix-router: ${command}`,
      { details: { features: needs.map((n) => n.feature), packages, command } },
    )
    this.name = 'MissingPackageError'
  }
}

/** "a", "a and b", "a, b and c". */
function and(items: readonly string[]): string {
  return items.length === 1 ? items[0]! : `${items.slice(0, -1).join(', ')} and ${items.at(-1)}`
}

const require = createRequire(import.meta.url)

/**
 * Whether `name` can be found from this package, as Node's resolution would look for it: in
 * each node_modules folder up from here (and NODE_PATH's), without loading it.
 */
function installed(name: string): boolean {
  return (require.resolve.paths(name) ?? []).some((dir) => {
    try {
      readFileSync(join(dir, name, 'package.json'))
      return true
    } catch {
      return false
    }
  })
}

/** Throws MissingPackageError when any package `feature` needs is not installed. */
export function requireFeature(feature: OptionalFeature): void {
  requireFeatures([feature])
}

/** Throws one MissingPackageError naming every package the features need that is not installed. */
export function requireFeatures(features: readonly OptionalFeature[]): void {
  const needs = [...new Set(features)].map((feature) => ({ feature, packages: OPTIONAL_FEATURES[feature].packages.filter((p) => !installed(p)) }))
  const missing = needs.filter((n) => n.packages.length > 0)
  if (missing.length > 0) throw new MissingPackageError(missing)
}

/** The version of `name` this release is tested with: its peer range's lower bound. */
function testedVersion(name: string): string {
  // Two folders up from src/core/ and from dist/core/ alike is the package's own package.json.
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { peerDependencies?: Record<string, string> }
  const range = pkg.peerDependencies?.[name]
  return range === undefined ? 'latest' : range.replace(/^[\^~]/, '')
}
