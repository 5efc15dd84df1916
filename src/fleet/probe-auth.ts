// The bearer token the probes send, from probeAuth (a file or an environment variable). The
// token goes into the probes' Authorization header and nowhere else: errors and logs name
// where it comes from, never what it is. Client requests are forwarded with their own
// Authorization, untouched.
import { readFileSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { ConfigError } from '../config/config.js'
import type { ProbeAuthConfig } from '../config/probe-auth.js'

export class ProbeToken {
  /** Where the token comes from, as an error may name it ("file /run/key", "$VLLM_API_KEY"). */
  readonly source: string
  #header: string

  /** Reads the token now: a missing file or variable is a configuration error at start. */
  constructor(
    readonly auth: ProbeAuthConfig,
    key = 'probeAuth',
    env: NodeJS.ProcessEnv = process.env,
  ) {
    if (auth.tokenFile !== undefined) {
      this.source = `file ${auth.tokenFile}`
      let text: string
      try {
        text = readFileSync(auth.tokenFile, 'utf8')
      } catch (err) {
        throw new ConfigError(`${key}.tokenFile: cannot read '${auth.tokenFile}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
      }
      this.#header = bearer(text, () => new ConfigError(`${key}.tokenFile: '${auth.tokenFile}' is empty`))
    } else {
      const name = auth.tokenEnv!
      this.source = `$${name}`
      this.#header = bearer(env[name] ?? '', () => new ConfigError(`${key}.tokenEnv: the environment variable ${name} is not set (or empty)`))
    }
  }

  /** The Authorization header's value. */
  get header(): string {
    return this.#header
  }

  /**
   * After a 401 or 403: the file may have been rotated (a Secret updated in place), so read it
   * again; the old token stays if the file cannot be read or is empty.
   */
  async refresh(): Promise<void> {
    if (this.auth.tokenFile === undefined) return
    try {
      this.#header = bearer(await readFile(this.auth.tokenFile, 'utf8'), () => new Error('empty'))
    } catch {
      // Keeps the token it has; the probe's error already says the instance refused it.
    }
  }
}

function bearer(raw: string, empty: () => Error): string {
  const token = raw.trim()
  if (token === '') throw empty()
  return `Bearer ${token}`
}

/**
 * A probe answered 401 or 403: the instance wants an API key. Says which setting gives the
 * probes one, or that the one given was refused.
 */
export function authRefused(what: string, status: number, token: ProbeToken | undefined): string {
  return token === undefined
    ? `${what} answered ${status}: the instance wants an API key (vLLM --api-key); give the probes one with probeAuth.tokenFile or probeAuth.tokenEnv (--probe-token-file, --probe-token-env)`
    : `${what} answered ${status} to the probe token from ${token.source}: is it the instance's API key (probeAuth)?`
}
