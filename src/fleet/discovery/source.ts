// What every discovery source is: something that reports the full list of instances it
// currently sees, again each time that list may have changed, until it is stopped.
import { PrefixRouterError } from '../../core/errors.js'
import type { Role } from '../../config/disaggregation.js'
import type { HostEntry } from '../host-entry.js'

/** One instance as a source reports it: the entry the endpoint's owner takes. */
export type InstanceEntry = HostEntry

export interface DiscoverySource {
  /**
   * Begins watching. `onChange` gets the whole current list (possibly unchanged), and what
   * failed in reading it when part of it is a last answer kept (`partial`: one DNS query of
   * two refused); `onError` a failure to read it (the caller keeps the last list: a hiccup
   * must not empty an endpoint).
   */
  start(onChange: (list: InstanceEntry[], partial?: Error) => void, onError: (err: Error) => void): void
  stop(): Promise<void>
}

/** An address and port as a URL authority: IPv6 addresses in brackets. */
export function hostPort(host: string, port: number | string): string {
  return `${host.includes(':') ? `[${host}]` : host}:${port}`
}

export const entry = (url: string): InstanceEntry => ({ url, weight: 1, models: [], indexBlocks: undefined, kvEvents: undefined, role: 'both', bootstrapPort: undefined })

/** The entries, each with the source's role (unset: both, as they are made). */
export function withRole(list: InstanceEntry[], role: Role | undefined): InstanceEntry[] {
  return role === undefined || role === 'both' ? list : list.map((e) => ({ ...e, role }))
}

/** A discovery source that cannot read its instances (a bad file, a failed DNS lookup, the Kubernetes API). */
export class DiscoveryError extends PrefixRouterError {
  declare readonly code: 'ERR_DISCOVERY'
  /**
   * A failure of its own even if the last one said the same (a file's next bad version):
   * reported again, where a repeated failure of the same lookup is reported once.
   */
  readonly distinct: boolean
  /**
   * For a partial answer: what the log line says happened (its message holds the detail).
   * Unset: a failed query answered with its last answer, the usual case.
   */
  readonly summary: string | undefined
  constructor(message: string, opts: { distinct?: boolean; summary?: string } = {}) {
    super('ERR_DISCOVERY', message)
    this.name = 'DiscoveryError'
    this.distinct = opts.distinct ?? false
    this.summary = opts.summary
  }
}
