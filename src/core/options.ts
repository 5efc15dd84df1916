// Validation and defaults for Router options: the ranges every entry point (library, config,
// flags) shares, with errors that name the option.
import { ABI } from './abi.js'
import { InvalidArgTypeError, OutOfRangeError } from './errors.js'
import { STRATEGY_INFO, strategyInfo } from './strategies.js'

/**
 * Strategy names, read from the native core's registry (one entry per file under
 * native/strategy/), so a strategy added there is accepted here without a second list.
 */
export const STRATEGIES: readonly string[] = STRATEGY_INFO.map((s) => s.name)
/** A name from STRATEGIES: random, least_outstanding_requests, prefix_aware, longest_prefix, … */
export type Strategy = string

/**
 * longest_prefix: which instances may take a prompt that no instance holds. `balanced` (the
 * default): the home (the consistent hash's target), the next two instances clockwise and the
 * least queued one, whichever costs least, which evens out load for one router (or for routers
 * sharing one state) but lets independent replicas disagree. `hash`: the home only, as
 * prefix_aware places it, so independent router replicas agree.
 */
export const PLACEMENTS = ['hash', 'balanced'] as const
export type Placement = (typeof PLACEMENTS)[number]
/** Ring members from the key that a placement chooses among (native placement_choices). */
export const PLACEMENT_CHOICES: Record<Placement, number> = { hash: 1, balanced: 3 }

export const LIMITS = {
  prefixLength: { min: 1024, max: 65536, default: 4096 },
  // The default is SageMaker's, for every strategy but longest_prefix (see defaultThreshold).
  // The highest is the native strategies' "no threshold" (ABI.noThreshold).
  concurrencyThreshold: { min: 1, max: ABI.noThreshold, default: 10 },
  vnodes: { min: 16, max: 65536, default: 8192 },
  blockSize: { min: 16, max: 4096, default: 64 },
  matchLength: { min: 1024, max: 262144, default: 65536 },
  loadFactor: { min: 1, max: 100, default: 3 },
  prefillWeight: { min: 0, max: 100, default: 6 },
  indexBlocks: { min: 0, max: 1 << 28, default: 65536 },
  exactBlockSize: { min: ABI.exact.minBlockSize, max: ABI.exact.maxBlockSize, default: 16 },
  exactCapacity: { min: 1024, max: 67108864, default: 2097152 },
  cpuBlockWeight: { min: 0, max: 1, default: 0.5 },
  pendingMs: { min: 0, max: 600000, default: 10000 },
  weight: { min: 0.01, max: 100, default: 1 },
  instances: { max: 4096 },
  ringPoints: { max: 1 << 24 },
  idLength: { max: 1024 },
} as const

export interface InstanceSpec {
  /** Unique id, e.g. the upstream URL. */
  id: string
  /** Relative capacity, 0.01–100 (default 1): the share of keys is proportional to it. */
  weight?: number
  /** Names the instance serves (models, LoRA adapters); `pick(…, { group })` chooses among those listing it. */
  groups?: readonly string[]
  /** longest_prefix: prefix blocks remembered for this instance (default: the router's indexBlocks). */
  indexBlocks?: number
}

/**
 * TypeScript's limits as the addon's ranges (abi.ts addonRanges) must hold them: the routing
 * parameters, the vnodes, the membership's size and ids (one of idLength UTF-16 units is at
 * most 3 bytes a unit in UTF-8), and `slots`, the counter slots a router is made with.
 */
export function limitsAgainstAddon(slots: number): Record<string, { min: number; max: number }> {
  const { instances, idLength, ringPoints: _points, weight: _weight, ...params } = LIMITS
  const choices = Object.values(PLACEMENT_CHOICES)
  return {
    ...Object.fromEntries(Object.entries(params).map(([k, r]) => [k, { min: r.min, max: r.max }])),
    placementChoices: { min: Math.min(...choices), max: Math.max(...choices) },
    instances: { min: 1, max: instances.max },
    idBytes: { min: 1, max: idLength.max * 3 },
    slots: { min: slots, max: slots },
  }
}

export interface RoutingParams {
  strategy?: string
  prefixLength?: number
  /**
   * In-flight requests at which an instance is full (1–1024). Default 10 (SageMaker's); for
   * longest_prefix none (1024), as it bounds load itself: then it is only an operator's cap.
   */
  concurrencyThreshold?: number
  /** longest_prefix: bytes of routing key per block (16–4096, default 64: about 16 tokens). */
  blockSize?: number
  /** longest_prefix: blocks remembered per instance unless the instance says (0–2^28, default 65536). */
  indexBlocks?: number
  /** longest_prefix: where a prompt no instance holds goes, `balanced` (default) or `hash` (see PLACEMENTS). */
  placement?: string
  /** longest_prefix: code points of the prompt it indexes and matches (1024–262144, default 65536). */
  matchLength?: number
  /**
   * longest_prefix: an instance is full above loadFactor × the fleet's mean requests in flight
   * per unit of weight (consistent hashing with bounded loads; 1–100, default 3).
   */
  loadFactor?: number
  /** longest_prefix: cost of a block to prefill on the chosen instance against one queued there (0–100, default 6). */
  prefillWeight?: number
  /**
   * longest_prefix's exact view: tokens per engine KV block (vLLM's --block-size; 1–1024,
   * default 16). A BlockStored event of another size is refused (exact.store returns -3).
   */
  exactBlockSize?: number
  /** Exact view: entries (reported and pending blocks) held across all instances (1024–67108864, default 2097152). */
  exactCapacity?: number
  /** Exact view: prefill an offloaded (CPU) block saves, against a GPU block (0–1, default 0.5). */
  cpuBlockWeight?: number
  /** Exact view: ms a routed prompt's blocks count as held on its instance before its events arrive (0–600000, default 10000). */
  pendingMs?: number
  /**
   * Count the engines' reported load (Router.setEngineLoad) in least_outstanding_requests and
   * prefix_aware's concurrency threshold too (default false); longest_prefix always counts it.
   */
  engineLoadAll?: boolean
}

export interface RouterOptions extends RoutingParams {
  instances: readonly InstanceSpec[]
  /** Virtual nodes per unit of weight on the ring (16–65536, default 8192). */
  vnodes?: number
  /** Register the router under this name so worker threads can `Router.open(name)` it. */
  name?: string
}

export interface ResolvedParams {
  strategy: Strategy
  prefixLength: number
  concurrencyThreshold: number
  /** Whether concurrencyThreshold was given (else it follows the strategy's default). */
  thresholdSet: boolean
  blockSize: number
  indexBlocks: number
  placement: Placement
  matchLength: number
  loadFactor: number
  prefillWeight: number
  exactBlockSize: number
  exactCapacity: number
  cpuBlockWeight: number
  pendingMs: number
  engineLoadAll: boolean
}

/** Accepts any case and `-` or `_`: `PREFIX_AWARE`, `prefix-aware` and `prefix_aware` are one strategy. */
export function parseStrategy(value: unknown, key = 'strategy'): Strategy {
  if (typeof value !== 'string') throw new InvalidArgTypeError(key, `one of ${STRATEGIES.join(', ')}`, value)
  const norm = value.trim().toLowerCase().replace(/-/g, '_')
  if (!STRATEGIES.includes(norm)) {
    throw new OutOfRangeError(key, `one of ${STRATEGIES.join(', ')}`, value)
  }
  return norm
}

export function parsePlacement(value: unknown, key = 'placement'): Placement {
  if (typeof value !== 'string') throw new InvalidArgTypeError(key, `one of ${PLACEMENTS.join(', ')}`, value)
  const norm = value.trim().toLowerCase()
  if (!(PLACEMENTS as readonly string[]).includes(norm)) throw new OutOfRangeError(key, `one of ${PLACEMENTS.join(', ')}`, value)
  return norm as Placement
}

export function checkInt(key: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number') throw new InvalidArgTypeError(key, `an integer from ${min} to ${max}`, value)
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new OutOfRangeError(key, `an integer from ${min} to ${max}`, value)
  }
  return value
}

/**
 * The concurrency threshold a strategy uses when none is given, as the strategy says: SageMaker's
 * 10, or none (the highest allowed) for one that bounds load itself (longest_prefix: loadFactor,
 * queued prefill), for which a threshold is only an operator's cap. A fixed in-flight count is
 * too low for long requests (which sit decoding) and too high for short ones.
 */
export function defaultThreshold(strategy: Strategy): number {
  return strategyInfo(strategy).defaultThreshold
}

export function checkBoolean(key: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new InvalidArgTypeError(key, 'a boolean', value)
  return value
}

export function checkNumber(key: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number') throw new InvalidArgTypeError(key, `a number from ${min} to ${max}`, value)
  if (!Number.isFinite(value) || value < min || value > max) throw new OutOfRangeError(key, `a number from ${min} to ${max}`, value)
  return value
}

export function resolveParams(opts: RoutingParams, base?: ResolvedParams): ResolvedParams {
  const p = LIMITS.prefixLength
  const c = LIMITS.concurrencyThreshold
  const strategy = opts.strategy === undefined ? (base?.strategy ?? 'prefix_aware') : parseStrategy(opts.strategy)
  const thresholdSet = opts.concurrencyThreshold !== undefined || base?.thresholdSet === true
  return {
    strategy,
    prefixLength:
      opts.prefixLength === undefined
        ? (base?.prefixLength ?? p.default)
        : checkInt('prefixLength', opts.prefixLength, p.min, p.max),
    concurrencyThreshold:
      opts.concurrencyThreshold !== undefined
        ? checkInt('concurrencyThreshold', opts.concurrencyThreshold, c.min, c.max)
        : thresholdSet
          ? base!.concurrencyThreshold
          : defaultThreshold(strategy),
    thresholdSet,
    blockSize:
      opts.blockSize === undefined
        ? (base?.blockSize ?? LIMITS.blockSize.default)
        : checkInt('blockSize', opts.blockSize, LIMITS.blockSize.min, LIMITS.blockSize.max),
    indexBlocks:
      opts.indexBlocks === undefined
        ? (base?.indexBlocks ?? LIMITS.indexBlocks.default)
        : checkInt('indexBlocks', opts.indexBlocks, LIMITS.indexBlocks.min, LIMITS.indexBlocks.max),
    placement: opts.placement === undefined ? (base?.placement ?? 'balanced') : parsePlacement(opts.placement),
    matchLength:
      opts.matchLength === undefined
        ? (base?.matchLength ?? LIMITS.matchLength.default)
        : checkInt('matchLength', opts.matchLength, LIMITS.matchLength.min, LIMITS.matchLength.max),
    loadFactor: opts.loadFactor === undefined ? (base?.loadFactor ?? LIMITS.loadFactor.default) : checkNumber('loadFactor', opts.loadFactor, LIMITS.loadFactor.min, LIMITS.loadFactor.max),
    prefillWeight:
      opts.prefillWeight === undefined
        ? (base?.prefillWeight ?? LIMITS.prefillWeight.default)
        : checkNumber('prefillWeight', opts.prefillWeight, LIMITS.prefillWeight.min, LIMITS.prefillWeight.max),
    exactBlockSize:
      opts.exactBlockSize === undefined
        ? (base?.exactBlockSize ?? LIMITS.exactBlockSize.default)
        : checkInt('exactBlockSize', opts.exactBlockSize, LIMITS.exactBlockSize.min, LIMITS.exactBlockSize.max),
    exactCapacity:
      opts.exactCapacity === undefined
        ? (base?.exactCapacity ?? LIMITS.exactCapacity.default)
        : checkInt('exactCapacity', opts.exactCapacity, LIMITS.exactCapacity.min, LIMITS.exactCapacity.max),
    cpuBlockWeight:
      opts.cpuBlockWeight === undefined
        ? (base?.cpuBlockWeight ?? LIMITS.cpuBlockWeight.default)
        : checkNumber('cpuBlockWeight', opts.cpuBlockWeight, LIMITS.cpuBlockWeight.min, LIMITS.cpuBlockWeight.max),
    pendingMs:
      opts.pendingMs === undefined
        ? (base?.pendingMs ?? LIMITS.pendingMs.default)
        : checkNumber('pendingMs', opts.pendingMs, LIMITS.pendingMs.min, LIMITS.pendingMs.max),
    engineLoadAll: opts.engineLoadAll === undefined ? (base?.engineLoadAll ?? false) : checkBoolean('engineLoadAll', opts.engineLoadAll),
  }
}

export interface ResolvedInstances { ids: string[]; weights: number[]; groups: string[][]; indexBlocks: number[] }

export function resolveInstances(list: unknown, vnodes: number): ResolvedInstances {
  if (!Array.isArray(list)) throw new InvalidArgTypeError('instances', 'an array of { id, weight? }', list)
  if (list.length === 0) throw new OutOfRangeError('instances', 'a non-empty array', list, 'instances must list at least one instance; got an empty array')
  if (list.length > LIMITS.instances.max) {
    throw new OutOfRangeError('instances', `at most ${LIMITS.instances.max} entries`, list)
  }
  const ids: string[] = []
  const weights: number[] = []
  const groups: string[][] = []
  const indexBlocks: number[] = []
  const seen = new Set<string>()
  let points = 0
  list.forEach((entry: unknown, i) => {
    const key = `instances[${i}]`
    if (entry === null || typeof entry !== 'object') throw new InvalidArgTypeError(key, 'an object { id, weight? }', entry)
    const { id, weight, groups: g, indexBlocks: ib } = entry as { id?: unknown; weight?: unknown; groups?: unknown; indexBlocks?: unknown }
    if (typeof id !== 'string') throw new InvalidArgTypeError(`${key}.id`, 'a non-empty string', id)
    if (id.length === 0 || id.length > LIMITS.idLength.max) {
      throw new OutOfRangeError(`${key}.id`, `a string of 1 to ${LIMITS.idLength.max} characters`, id)
    }
    if (seen.has(id)) throw new OutOfRangeError(`${key}.id`, 'unique', id, `${key}.id must be unique; ${JSON.stringify(id)} appears more than once`)
    seen.add(id)
    const w = LIMITS.weight
    let wt: number = w.default
    if (weight !== undefined) {
      if (typeof weight !== 'number') throw new InvalidArgTypeError(`${key}.weight`, `a number from ${w.min} to ${w.max}`, weight)
      if (!Number.isFinite(weight) || weight < w.min || weight > w.max) {
        throw new OutOfRangeError(`${key}.weight`, `a number from ${w.min} to ${w.max}`, weight)
      }
      wt = weight
    }
    if (g !== undefined && (!Array.isArray(g) || g.some((x) => typeof x !== 'string' || x.length === 0))) {
      throw new InvalidArgTypeError(`${key}.groups`, 'an array of non-empty strings', g)
    }
    points += Math.max(1, Math.round(wt * vnodes))
    ids.push(id)
    weights.push(wt)
    groups.push(g === undefined ? [] : [...new Set(g as string[])])
    indexBlocks.push(ib === undefined ? 0 : checkInt(`${key}.indexBlocks`, ib, 1, LIMITS.indexBlocks.max))
  })
  if (points > LIMITS.ringPoints.max) {
    throw new OutOfRangeError(
      'vnodes',
      `at most ${LIMITS.ringPoints.max} ring points`,
      points,
      `instances × weight × vnodes make ${points} ring points, above the limit of ${LIMITS.ringPoints.max}; lower vnodes`,
    )
  }
  return { ids, weights, groups, indexBlocks }
}
