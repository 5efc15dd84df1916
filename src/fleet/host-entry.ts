// What the owner of an endpoint's membership takes from whoever lists instances: the entries
// (the configuration's, or a discovery source's) and the one call that hands a source's list
// over. Defined here, beside the owner, so that discovery depends on the owner and not the
// other way round.
import type { EndpointConfig } from '../config/config.js'

/** One instance as `instances` lists it (after validation), or as a discovery source reports it. */
export type HostEntry = EndpointConfig['instances'][number]

/** The owner as a discovery source's runner sees it. */
export interface DiscoveryTarget {
  readonly name: string
  /** How many instances it routes to now (the log line of a failing source says how many it keeps). */
  readonly size: number
  /**
   * A source's current list (undefined: the source was removed). Returns the ids that join or
   * leave, and a promise that settles once those joining have had their first probe.
   */
  setDiscovered(source: string, list: HostEntry[] | undefined): { added: string[]; removed: string[]; joined: Promise<void> }
}

/** The id an entry's instance has: its URL without a trailing slash. */
export const hostId = (e: Pick<HostEntry, 'url'>): string => e.url.replace(/\/+$/, '')
