// Router: a thin class over one native handle. Validation lives here; the native side
// does the per-request work in one call (hash, ring lookup, overflow walk, counter).
import { ABI, addonRanges, checkRanges } from './abi.js'
import { InvalidArgTypeError, NoInstanceError, OutOfRangeError, RouterClosedError, SharedRouterError } from './errors.js'
import { ExactIndex } from './exact-index.js'
import { FleetRecord } from './fleet-record.js'
import { ExtractedKey } from './key/native-key.js'
import { checkTenant } from './key/tenant.js'
import { Lease, type LeaseOwner } from './lease.js'
import { bindingPath, native, type NativeHandle, type NativeInstance, type NativeStats } from './native.js'
import { checkInt, limitsAgainstAddon, LIMITS, resolveInstances, resolveParams, type InstanceSpec, type ResolvedParams, type RouterOptions, type RoutingParams } from './options.js'
import { configureNative, nativeCall, resolvedFromNative, sharedBacking } from './router-native.js'
import { MAX_U64 } from './u64.js'

// Re-exported: these were declared here before they had modules of their own.
export { NoInstanceError, Lease }
export { EXACT_BLOCK_SIZE, EXACT_CAPACITY, EXACT_NOT_MEMBER, EXACT_ORPHAN, ExactIndex, type ExactInstanceInfo, type ExactMatchInfo, type ExactView } from './exact-index.js'

const SLOT_CAPACITY = 8192
// TypeScript lets through only what the addon's backstop ranges accept (abi.ts).
checkRanges(limitsAgainstAddon(SLOT_CAPACITY), addonRanges(native.abi()), bindingPath)

export interface SharedRouterOptions extends RouterOptions {
  /**
   * Keep the state (counters, membership, parameters, prefix index) in memory that other
   * processes of this user map with `Router.attach(router.sharedPath)`: their picks and this
   * one's see each other's leases as one process would. `true`: anonymous shared memory
   * (Linux), or where the system has none a file in /dev/shm (else the temporary directory).
   * `{ directory }`: a file in that directory, for processes that cannot open this one's
   * /proc/<pid>/fd (another PID namespace sharing the directory, say).
   */
  shared?: boolean | { directory: string } | undefined
}

export interface PickOptions {
  /** Tenant id (SageMaker's X-Amzn-SageMaker-Prefix-Aware-Id): same prefix, different tenant, separate keys. */
  tenant?: string | undefined
  /** Only instances listing this group (a model or adapter name) are candidates. */
  group?: string | undefined
  /**
   * longest_prefix: how much of the prefix (UTF-16 units of a string, bytes of a Uint8Array)
   * places the request by consistent hash when no match decides; default all of it.
   */
  anchor?: number | undefined
  /**
   * Earlier tries of this request (a retry): their instances are not candidates, and the
   * strategy gives its next choice. At most 16 are honoured.
   */
  avoid?: readonly Lease[]
  /**
   * longest_prefix's exact view: the prompt's token ids as the engine will see them, and the
   * seed of their blocks (exactSeed(lora, salt)). Instances whose KV events the router
   * follows (exact.setView 'fresh') are then matched by what their engine really holds.
   */
  tokens?: ExactTokens | undefined
  /** With `tokens`: the time in ms pending blocks expire against (virtual in replays); default performance.now(). */
  now?: number | undefined
  /**
   * Rank this many next choices too (at most 8), best first, without taking their leases: the
   * lease's `alternates`. A caller naming fallbacks, or that may try a second instance, asks.
   */
  alternates?: number | undefined
}

/** A prompt's token ids and the seed of their block chain (exactSeed). */
export interface ExactTokens {
  ids: Uint32Array
  seed: bigint
}

/** A prompt's token ids and the seed of their block chain (exactSeed). */
export interface ExactTokens {
  ids: Uint32Array
  seed: bigint
}

// Words of a handle's io block (native/bind_pick.cc, router_pick_io): the pick's numeric
// arguments go in, its result comes back over the first four, so the native call reads no
// argument through V8 but the prefix (and a tenant, when there is one).
const {
  kind: IO_KIND,
  keyBytes: IO_KEY_BYTES,
  anchor: IO_ANCHOR,
  hashed: IO_HASHED,
  group: IO_GROUP,
  tenant: IO_TENANT,
  avoidCount: IO_AVOID_COUNT,
  avoid: IO_AVOID,
  maxAvoid: IO_MAX_AVOID,
  exact: IO_EXACT,
  now: IO_NOW,
  alternates: IO_ALTERNATES,
  maxAlternates: IO_MAX_ALTERNATES,
  outBlocks: IO_OUT_BLOCKS,
  outHeld: IO_OUT_HELD,
  outExact: IO_OUT_EXACT,
  outAlternates: IO_OUT_ALTERNATES,
  outAlternateSlot: IO_OUT_ALTERNATE_SLOT,
  outAlternateGeneration: IO_OUT_ALTERNATE_GENERATION,
} = ABI.io
const { slot: OUT_SLOT, generation: OUT_GENERATION, overflow: OUT_OVERFLOW, prefill: OUT_PREFILL, noGroup: NO_GROUP_SERVES } = ABI.pick
/** IO_GROUP: no group, or a group named by the call's argument (no id for it yet). */
const NO_GROUP = -1
const GROUP_BY_NAME = -2
// The binding's function, read once rather than off the binding object on every pick.
const pickIo = native.router_pick_io

export class Router {
  #handle: NativeHandle | null
  #params: ResolvedParams
  #attached = false
  // Last resort for a lease the embedder dropped without release(): the collector ends it,
  // and stats().leasesCollected counts it so the bug shows. Leases are registered without an
  // unregister token, which would cost every pick an insertion into the registry's table
  // (measured: 0.3-0.5 µs of a pick's JS) and every release a removal; a released lease is
  // marked instead, and its callback, run after the collection, off any request, does nothing.
  readonly #unreleased = new FinalizationRegistry<{ slot: number; prefill: number; released: boolean }>((held) => {
    if (!held.released && this.#handle !== null) native.router_lease_collected(this.#handle, held.slot, held.prefill)
  })
  // What this router's leases call on it.
  readonly #owner: LeaseOwner = {
    track: (lease, held) => this.#unreleased.register(lease, held),
    firstToken: (slot, prefill) => {
      if (this.#handle !== null) native.router_first_token(this.#handle, slot, prefill)
    },
    // A lease outliving a closed handle has nothing left to decrement through it.
    release: (slot, prefill) => {
      if (this.#handle !== null) native.router_release(this.#handle, slot, prefill)
    },
  }
  // Instance id per slot, cached with the slot's generation so a reused slot is re-read:
  // [id, generation] at [2 * slot, 2 * slot + 1].
  readonly #ids: (string | number)[] = []
  // This handle's io block, and the ids of the groups it has picked in. Ids are only given to
  // names some membership listed, so the map holds at most the groups the router has served.
  #io: Float64Array
  readonly #groupIds = new Map<string, number>()
  /** The exact view: the instances' KV events, which longest_prefix's picks match prompts against. */
  readonly exact = new ExactIndex(() => this.#h())
  /** Text published beside the membership in the shared state, for processes attached to it. */
  readonly fleetRecord = new FleetRecord(
    () => this.#h(),
    () => this.#writable(),
  )

  constructor(options: SharedRouterOptions)
  /** @internal used by Router.open */
  constructor(options: RouterOptions, handle: NativeHandle)
  constructor(options: SharedRouterOptions, handle?: NativeHandle) {
    if (handle !== undefined) {
      this.#handle = handle
      this.#params = resolveParams(options)
      this.#io = native.router_io(handle)
      return
    }
    if (options === null || typeof options !== 'object') throw new InvalidArgTypeError('options', 'an object', options)
    const params = resolveParams(options)
    const v = LIMITS.vnodes
    const vnodes = options.vnodes === undefined ? v.default : checkInt('vnodes', options.vnodes, v.min, v.max)
    const members = resolveInstances(options.instances, vnodes)
    if (options.name !== undefined && (typeof options.name !== 'string' || options.name.length === 0 || options.name.length > 256)) {
      throw new OutOfRangeError('name', 'a string of 1 to 256 characters', options.name)
    }
    const backing = sharedBacking(options.shared)
    const h = nativeCall(() => native.router_create(options.name, vnodes, SLOT_CAPACITY, backing?.dir, backing?.anonymous))
    configureNative(h, params)
    native.router_set_instances(h, members.ids, members.weights, members.groups, members.indexBlocks)
    this.#handle = h
    this.#params = params
    this.#io = native.router_io(h)
  }

  /**
   * Opens, from any thread of this process, the router created under `name`: counters and
   * membership are shared. Routing parameters are shared as well; the values reported by
   * `params` are those this handle last set or, for a fresh handle, the defaults.
   */
  static open(name: string): Router {
    if (typeof name !== 'string' || name.length === 0) throw new InvalidArgTypeError('name', 'a non-empty string', name)
    return new Router({ instances: [] }, native.router_open(name))
  }

  /**
   * Opens from another process the state a router created with `shared` keeps at `path`
   * (its `sharedPath`, valid while the creator holds the state). Picks, releases and the counters are shared with every process
   * that has it open; instances and parameters follow the creator's (setInstances and
   * configure throw SharedRouterError `ROUTER_READ_ONLY` here).
   */
  static attach(path: string): Router {
    if (typeof path !== 'string' || path.length === 0) throw new InvalidArgTypeError('path', 'a non-empty string', path)
    const r = new Router({ instances: [] }, nativeCall(() => native.router_attach(path)))
    r.#attached = true
    return r
  }

  /**
   * What `Router.attach` opens: `/proc/<pid>/fd/<fd>` for anonymous shared memory, else the
   * state file; undefined for a router private to this process.
   */
  get sharedPath(): string | undefined {
    return native.router_shared_path(this.#h())
  }

  get params(): Readonly<ResolvedParams> {
    // An attached router follows its creator's configure().
    if (this.#attached && this.#handle !== null) return resolvedFromNative(native.router_params(this.#handle))
    return this.#params
  }

  /** Changes routing parameters for every later pick, in every thread (published with the membership, never half-applied). */
  configure(params: RoutingParams): void {
    const h = this.#h()
    this.#writable()
    const next = resolveParams(params, this.#params)
    configureNative(h, next)
    this.#params = next
  }

  /**
   * Ends every lease process `pid` still holds on this router's shared state, and gives back
   * its queued prefill: call it when a process that attached exits. Returns the leases ended
   * (0 for a process that held none, or for a private router).
   */
  releaseProcess(pid: number): number {
    const h = this.#h()
    if (typeof pid !== 'number' || !Number.isInteger(pid) || pid < 1 || pid > 0x7fffffff) {
      throw new OutOfRangeError('pid', 'a positive integer process id', pid)
    }
    return native.router_release_process(h, pid)
  }

  /**
   * Picks an instance for a request whose routing prefix is `prefix`: the first
   * prefixLength bytes of a Uint8Array, or code points of a string (hashed as UTF-8). An
   * ExtractedKey (nativeRequest) stands for its string: it carries its own key and anchor
   * marks, and `opts.anchor` is not read.
   */
  pick(prefix: Uint8Array | string, opts?: PickOptions): Lease {
    if (opts === undefined) return this.pickWith(prefix, undefined, undefined, undefined, undefined, undefined)
    return this.pickWith(prefix, opts.tenant, opts.group, undefined, opts.anchor, opts.avoid, opts.tokens, opts.now, opts.alternates)
  }

  /**
   * pick() with its options as arguments, for callers on every request's path (serve's
   * endpoints): no options object to make and read. `groupId` is groupId(group) if the caller
   * kept it with its own record of the group (one map lookup per pick rather than two);
   * undefined looks it up.
   */
  pickWith(
    prefix: Uint8Array | string,
    tenant: string | undefined,
    group: string | undefined,
    groupId: number | undefined,
    anchor: number | undefined,
    avoid: readonly Lease[] | undefined,
    tokens?: ExactTokens,
    now?: number,
    alternates?: number,
  ): Lease {
    if (typeof prefix !== 'string' && !(prefix instanceof Uint8Array)) {
      throw new InvalidArgTypeError('prefix', 'a Uint8Array or a string', prefix)
    }
    const io = this.#io
    // Checked field by field, without closures or copies: this runs on every request.
    io[IO_TENANT] = 0
    if (tenant !== undefined) {
      tenant = checkTenant(tenant)
      io[IO_TENANT] = 1
    }
    if (group !== undefined && typeof group !== 'string') throw new InvalidArgTypeError('group', 'a string', group)
    io[IO_ANCHOR] = -1
    if (anchor !== undefined) {
      if (typeof anchor !== 'number' || !Number.isInteger(anchor) || anchor < 0) throw new OutOfRangeError('anchor', 'a non-negative integer', anchor)
      io[IO_ANCHOR] = anchor
    }
    let navoid = 0
    if (avoid !== undefined) {
      if (!Array.isArray(avoid)) throw new InvalidArgTypeError('avoid', 'an array of leases', avoid)
      for (let i = 0; i < avoid.length; i++) {
        const l: unknown = avoid[i]
        if (!(l instanceof Lease)) throw new InvalidArgTypeError('avoid', 'an array of leases', avoid)
        if (navoid < IO_MAX_AVOID) io[IO_AVOID + navoid++] = Lease.slotOf(l)
      }
    }
    io[IO_AVOID_COUNT] = navoid
    if (prefix instanceof ExtractedKey) {
      // The key carries its own anchor: `anchor` is not read.
      io[IO_KIND] = 1
      io[IO_KEY_BYTES] = prefix.keyBytes
      io[IO_ANCHOR] = prefix.anchorBytes ?? -1
      io[IO_HASHED] = prefix.hashed ? 1 : 0
    } else io[IO_KIND] = 0
    io[IO_GROUP] = group === undefined ? NO_GROUP : (groupId ?? this.groupId(group))
    let tokenIds: Uint32Array | undefined
    let seed: bigint | undefined
    io[IO_EXACT] = 0
    if (tokens !== undefined) {
      if (tokens === null || typeof tokens !== 'object') throw new InvalidArgTypeError('tokens', 'an object { ids: Uint32Array, seed: bigint }', tokens)
      tokenIds = tokens.ids
      seed = tokens.seed
      if (!(tokenIds instanceof Uint32Array)) throw new InvalidArgTypeError('tokens.ids', 'a Uint32Array', tokenIds)
      if (typeof seed !== 'bigint') throw new InvalidArgTypeError('tokens.seed', 'a bigint from 0n to 2n ** 64n - 1n', seed)
      if (seed < 0n || seed > MAX_U64) throw new OutOfRangeError('tokens.seed', 'from 0n to 2n ** 64n - 1n', seed)
      if (now === undefined) now = performance.now()
      else if (typeof now !== 'number' || !Number.isFinite(now)) throw new OutOfRangeError('now', 'a finite number of milliseconds', now)
      io[IO_EXACT] = 1
      io[IO_NOW] = now
    }
    io[IO_ALTERNATES] = 0
    if (alternates !== undefined && alternates !== 0) io[IO_ALTERNATES] = checkInt('alternates', alternates, 0, IO_MAX_ALTERNATES)
    const h = this.#h()
    const r = pickIo(h, prefix, tenant, group, tokenIds, seed)
    if (r === NO_GROUP_SERVES) throw new NoInstanceError('ROUTER_NO_GROUP', `no instance serves ${JSON.stringify(group)}`)
    if (r < 0) throw new NoInstanceError('ROUTER_NO_INSTANCES', 'router has no instances')
    const slot = io[OUT_SLOT]!
    const lease = new Lease(this.#owner, slot, this.#slotId(h, slot, io[OUT_GENERATION]!), io[OUT_OVERFLOW] === 1, io[OUT_PREFILL]!, io[IO_OUT_BLOCKS]!, io[IO_OUT_HELD]!, io[IO_OUT_EXACT] === 1)
    const n = io[IO_ALTERNATES] === 0 ? 0 : io[IO_OUT_ALTERNATES]!
    if (n > 0) {
      const alt: string[] = []
      for (let i = 0; i < n; i++) alt.push(this.#slotId(h, io[IO_OUT_ALTERNATE_SLOT + i]!, io[IO_OUT_ALTERNATE_GENERATION + i]!))
      lease.alternates = alt
    }
    return lease
  }

  /** The instance id of a slot as of its generation, cached: id and generation side by side, one array for the cache, not two. */
  #slotId(h: NativeHandle, slot: number, gen: number): string {
    const ids = this.#ids
    let id = ids[2 * slot] as string | undefined
    if (id === undefined || ids[2 * slot + 1] !== gen) {
      id = native.router_slot_id(h, slot)
      ids[2 * slot] = id
      ids[2 * slot + 1] = gen
    }
    return id
  }

  /**
   * The id pickWith() takes for a group (pick() asks it itself). Names some membership listed
   * get one, asked of the native side once; any other name is passed by name (and asked again
   * next time: it may be served by then).
   */
  groupId(group: string): number {
    let id = this.#groupIds.get(group)
    if (id === undefined) {
      id = native.router_group_id(this.#h(), group)
      if (id < 0) return GROUP_BY_NAME
      this.#groupIds.set(group, id)
    }
    return id
  }

  /** Replaces the membership atomically; leases taken before still release their own counters. */
  setInstances(instances: readonly InstanceSpec[], vnodes?: number): void {
    const h = this.#h()
    this.#writable()
    const v = LIMITS.vnodes
    const members = resolveInstances(instances, vnodes === undefined ? v.default : checkInt('vnodes', vnodes, v.min, v.max))
    native.router_set_instances(h, members.ids, members.weights, members.groups, members.indexBlocks)
  }

  /** Requests in flight on the instance (also on one removed but still draining); 0 for an unknown id. */
  inFlight(id: string): number {
    if (typeof id !== 'string') throw new InvalidArgTypeError('id', 'a string', id)
    return Math.max(0, native.router_in_flight(this.#h(), id))
  }

  /**
   * The load at instance `id` that this router's own leases do not count, as its engine
   * reports it: requests in flight there from other clients (other router replicas, traffic
   * sent past the router) and their queued prefill in the router's blocks. Strategies then
   * weigh in flight as own + `inFlight` (longest_prefix always; least_outstanding_requests and
   * prefix_aware with `engineLoadAll`), and longest_prefix queued prefill as own +
   * `prefillBlocks`. (0, 0) is no report: own counts only. False for an id no member has.
   * Any process of a shared router may write it; the last write wins.
   */
  setEngineLoad(id: string, inFlight: number, prefillBlocks = 0): boolean {
    if (typeof id !== 'string') throw new InvalidArgTypeError('id', 'a string', id)
    checkInt('inFlight', inFlight, 0, 0xffffffff)
    checkInt('prefillBlocks', prefillBlocks, 0, Number.MAX_SAFE_INTEGER)
    return native.router_set_engine_load(this.#h(), id, inFlight, prefillBlocks)
  }

  instances(): NativeInstance[] {
    return native.router_instances(this.#h())
  }

  stats(): NativeStats {
    return native.router_stats(this.#h())
  }

  /**
   * Releases this handle. The state goes when the last handle in the process closes; for a
   * shared router, leases this process still holds are ended then, and the creator's close
   * removes the state file if it made one. Anonymous shared memory goes with the last process
   * that maps it; a file a creator that crashed left behind goes when the next shared router
   * is created in its directory.
   */
  close(): void {
    if (this.#handle === null) return
    native.router_close(this.#handle)
    this.#handle = null
  }

  #writable(): void {
    if (this.#attached) {
      throw new SharedRouterError('ROUTER_READ_ONLY', 'this router is attached to another process\'s state: only the process that created it changes instances or parameters')
    }
  }

  #h(): NativeHandle {
    if (this.#handle === null) throw new RouterClosedError()
    return this.#handle
  }
}
