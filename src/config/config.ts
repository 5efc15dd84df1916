// The proxy's configuration: one zod schema, its defaults, and errors that name the key.
// Sources, later ones winning: defaults < config file (YAML or JSON) < environment < flags.
import { readFileSync } from 'node:fs'
import { parse as parseYaml } from 'yaml'
import { z } from 'zod'
import { knownKeysAt } from './keys.js'
import { ABI } from '../core/abi.js'
import { LIMITS, parseStrategy, PLACEMENTS } from '../core/options.js'
import { didYouMean } from './suggest.js'
import { upstreamUrlProblem } from './upstream-url.js'
import { DiscoverySourceSchema } from './discovery.js'
import { PrefixRouterError } from '../core/errors.js'
import { InstanceKvEventsSchema, KvEventsSchema } from './kv-events.js'
import { EngineLoadSchema } from './engine-load.js'
import { replicaIdSchema, ShareLoadSchema } from './share-load.js'
import { ProbeAuthSchema } from './probe-auth.js'
import { DisaggregationSchema, RoleSchema, SidecarSchema } from './disaggregation.js'

const int = (min: number, max: number) => z.number().int().min(min).max(max)
const ms = (def: number) => int(0, 24 * 3600 * 1000).default(def)

const strategy = z.string().transform((s, ctx) => {
  try {
    return parseStrategy(s)
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message.replace(/^strategy /, '') })
    return z.NEVER
  }
})

/** serve's, epp's and route's strategy unless the configuration names one (see Routing below). */
export const DEFAULT_STRATEGY = 'longest_prefix'

const routingFields = {
  strategy,
  prefixLength: int(LIMITS.prefixLength.min, LIMITS.prefixLength.max),
  concurrencyThreshold: int(LIMITS.concurrencyThreshold.min, LIMITS.concurrencyThreshold.max),
  vnodes: int(LIMITS.vnodes.min, LIMITS.vnodes.max),
  blockSize: int(LIMITS.blockSize.min, LIMITS.blockSize.max),
  indexBlocks: int(LIMITS.indexBlocks.min, LIMITS.indexBlocks.max),
  placement: z.enum(PLACEMENTS),
  matchLength: int(LIMITS.matchLength.min, LIMITS.matchLength.max),
  loadFactor: z.number().min(LIMITS.loadFactor.min).max(LIMITS.loadFactor.max),
  prefillWeight: z.number().min(LIMITS.prefillWeight.min).max(LIMITS.prefillWeight.max),
  exactBlockSize: int(LIMITS.exactBlockSize.min, LIMITS.exactBlockSize.max),
  exactCapacity: int(LIMITS.exactCapacity.min, LIMITS.exactCapacity.max),
  cpuBlockWeight: z.number().min(LIMITS.cpuBlockWeight.min).max(LIMITS.cpuBlockWeight.max),
  pendingMs: int(LIMITS.pendingMs.min, LIMITS.pendingMs.max),
  engineLoadAll: z.boolean(),
}
const Routing = z
  .object({
    // longest_prefix, the strategy we recommend: it keeps a prompt with the instance holding the
    // most of it, where prefix_aware hashes the first prefixLength code points, which spreads
    // prompts that share a long opening but not its whole key. `--strategy prefix_aware` is
    // SageMaker's PREFIX_AWARE exactly. (The library's Router keeps prefix_aware as its default.)
    strategy: routingFields.strategy.default(DEFAULT_STRATEGY),
    prefixLength: routingFields.prefixLength.default(LIMITS.prefixLength.default),
    // Unset: the strategy's own default (10, or none for longest_prefix; see defaultThreshold).
    concurrencyThreshold: routingFields.concurrencyThreshold.optional(),
    vnodes: routingFields.vnodes.default(LIMITS.vnodes.default),
    blockSize: routingFields.blockSize.default(LIMITS.blockSize.default),
    indexBlocks: routingFields.indexBlocks.default(LIMITS.indexBlocks.default),
    placement: routingFields.placement.default('balanced'),
    matchLength: routingFields.matchLength.default(LIMITS.matchLength.default),
    loadFactor: routingFields.loadFactor.default(LIMITS.loadFactor.default),
    prefillWeight: routingFields.prefillWeight.default(LIMITS.prefillWeight.default),
    /** The exact view: tokens per engine KV block (vLLM's --block-size). */
    exactBlockSize: routingFields.exactBlockSize.default(LIMITS.exactBlockSize.default),
    /** The exact view's bound: blocks held across all instances (stores beyond it are dropped, counted). */
    exactCapacity: routingFields.exactCapacity.default(LIMITS.exactCapacity.default),
    /** What a CPU-offloaded block saves, against a block in GPU memory (0-1). */
    cpuBlockWeight: routingFields.cpuBlockWeight.default(LIMITS.cpuBlockWeight.default),
    /** How long blocks routed to an instance count as held there before its events confirm them. */
    pendingMs: routingFields.pendingMs.default(LIMITS.pendingMs.default),
    /** The engines' reported load in least_outstanding_requests and prefix_aware's threshold too (longest_prefix always counts it). */
    engineLoadAll: routingFields.engineLoadAll.default(false),
  })
  .strict()
const RoutingOverride = z.object(routingFields).partial().strict()

/** A shared router's process table (the addon's, checked at load) has a row for the primary and one per worker. */
export const MAX_WORKERS = ABI.maxProcesses - 1

/** Processes serving the front port: a count, or `auto` for one per core the process may use. */
const workers = z.union([z.number(), z.string()]).transform((v, ctx) => {
  if (v === 'auto') return 'auto' as const
  const n = typeof v === 'number' ? v : /^\d+$/.test(v) ? Number(v) : NaN
  if (Number.isInteger(n) && n >= 1 && n <= MAX_WORKERS) return n
  ctx.addIssue({ code: 'custom', message: `must be auto or a whole number of processes from 1 to ${MAX_WORKERS}` })
  return z.NEVER
})

const upstreamUrl = z.string().superRefine((s, ctx) => {
  const p = upstreamUrlProblem(s)
  if (p !== undefined) ctx.addIssue({ code: 'custom', message: `${p.problem}; got ${JSON.stringify(s)}${p.meant ? ` (did you mean ${JSON.stringify(p.meant)}?)` : ''}` })
})

export const Instance = z.union([
  upstreamUrl.transform((url) => ({ url, weight: 1, models: [] as string[], indexBlocks: undefined as number | undefined, kvEvents: undefined, role: 'both' as const, bootstrapPort: undefined as number | undefined })),
  z
    .object({
      url: upstreamUrl,
      weight: z.number().min(LIMITS.weight.min).max(LIMITS.weight.max).default(1),
      /** Declared models and adapters; discovery from /v1/models adds to them. */
      models: z.array(z.string().min(1)).default([]),
      /** longest_prefix: blocks remembered for this instance (default: from its KV capacity, else routing.indexBlocks). */
      indexBlocks: int(1, LIMITS.indexBlocks.max).optional(),
      /** Where this instance publishes KV events, when the endpoint's port rule does not fit it. */
      kvEvents: InstanceKvEventsSchema.optional(),
      /** Disaggregated serving: prefill, decode, or both (a whole request; the default). */
      role: RoleSchema.default('both'),
      /** SGLang's connector: the prefill instance's --disaggregation-bootstrap-port (unset: SGLang's 8998). */
      bootstrapPort: int(1, 65535).optional(),
    })
    .strict(),
])

const Endpoint = z
  .object({
    name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, 'must be 1–63 letters, digits, . _ or -'),
    instances: z.array(Instance).default([]),
    /** Where more instances come from (files, DNS, Kubernetes), merged with `instances`. */
    discovery: z.array(DiscoverySourceSchema).optional(),
    routing: RoutingOverride.default({}),
    /** This endpoint's KV-event publishers (replaces the top-level kvEvents for it). */
    kvEvents: KvEventsSchema.optional(),
    /** The probes' bearer token for this endpoint's instances (replaces the top-level probeAuth for it). */
    probeAuth: ProbeAuthSchema.optional(),
    /** How requests run over prefill and decode instances (replaces the top-level disaggregation for it). */
    disaggregation: DisaggregationSchema.optional(),
  })
  .strict()
  .refine((ep) => ep.instances.length > 0 || (ep.discovery?.length ?? 0) > 0, { message: 'must list at least one instance, or discovery sources', path: ['instances'] })

const Tokenizer = z
  .object({
    /** remote: the instance's POST /tokenize; local: a tokenizer.json loaded here; bytes, o200k: the simulator's own. */
    mode: z.enum(['remote', 'local', 'bytes', 'o200k']),
    /** local: a directory with tokenizer.json and tokenizer_config.json (its chat_template), or a tokenizer.json file. */
    path: z.string().min(1).optional(),
    /** remote: longest wait for /tokenize; then the request is routed on the approximate view. */
    timeoutMs: int(1, 60_000).default(50),
  })
  .strict()
  .refine((t) => t.mode !== 'local' || t.path !== undefined, { message: 'local needs path (--tokenizer-path): the directory holding tokenizer.json and tokenizer_config.json', path: ['path'] })
  .refine((t) => t.mode === 'local' || t.path === undefined, { message: 'path is for mode local only', path: ['path'] })

const Listen = (port: number, host: string) =>
  z.object({ host: z.string().min(1).default(host), port: int(0, 65535).default(port) }).strict()

export const ConfigSchema = z
  .object({
    listen: Listen(8080, '0.0.0.0').default({ host: '0.0.0.0', port: 8080 }),
    admin: Listen(9090, '127.0.0.1').default({ host: '127.0.0.1', port: 9090 }),
    tls: z.object({ cert: z.string().min(1), key: z.string().min(1) }).strict().optional(),
    routing: Routing.default(Routing.parse({})),
    limits: z
      .object({
        maxBodyBytes: int(1024, 1 << 30).default(16 << 20),
        /** JSON bodies nested deeper than this are refused with a 400 before they are parsed. */
        maxJsonDepth: int(1, 10_000).default(256),
        /** A connection has this long from its first byte (or its previous request) to complete a request's headers. */
        headersTimeoutMs: ms(15_000),
        /** An idle keep-alive connection or HTTP/2 session is closed after this long. */
        keepAliveTimeoutMs: ms(65_000),
        /** The whole request body must arrive within this long of its headers. */
        bodyTimeoutMs: ms(30_000),
        requestTimeoutMs: ms(300_000),
        /** Front connections open at once; unset: sized from the file-descriptor limit. */
        maxConnections: int(1, 1 << 20).optional(),
      })
      .strict()
      .prefault({}),
    upstream: z
      .object({
        protocol: z.enum(['http1', 'h2c', 'h2']).default('http1'),
        connections: int(1, 4096).default(128),
        connectTimeoutMs: ms(5_000),
        headersTimeoutMs: ms(300_000),
        bodyTimeoutMs: ms(300_000),
        /**
         * An idle connection to an instance is closed after this long, unless the instance's
         * Keep-Alive hint says less. Below vLLM's 5 s (uvicorn, which sends no hint), so the
         * router closes first and never writes a request to a connection being closed.
         */
        keepAliveTimeoutMs: ms(4_000),
      })
      .strict()
      .prefault({}),
    retries: z
      .object({
        /** Further tries after the first, each on another instance. */
        max: int(0, 10).default(2),
        /** Retries in flight may be at most this percent of requests in flight (Envoy's retry budget)... */
        budgetPercent: z.number().min(0).max(100).default(20),
        /** ...or this many, whichever is more, so a quiet router can still retry. */
        minRetryConcurrency: int(0, 10_000).default(3),
        /** Time allowed for an instance's response headers on a streaming request (0: upstream.headersTimeoutMs). */
        perTryTimeoutMs: ms(30_000),
        /** Retry a request whose connection was reset after its body was sent (the instance may have started it). */
        onReset: z.boolean().default(false),
      })
      .strict()
      .prefault({}),
    health: z
      .object({
        path: z.string().startsWith('/').default('/health'),
        intervalMs: ms(5_000),
        timeoutMs: ms(2_000),
        /** Consecutive passing probes before a down instance takes traffic again. */
        healthyThreshold: int(1, 100).default(2),
        /** Consecutive failing probes before a healthy instance is taken out. */
        unhealthyThreshold: int(1, 100).default(3),
      })
      .strict()
      .prefault({}),
    /** The probes' bearer token (instances behind an API key); client requests keep their own Authorization. */
    probeAuth: ProbeAuthSchema.optional(),
    outlier: z
      .object({
        /** Consecutive 5xx answers (or failures to answer) that eject an instance; 0 turns it off. */
        consecutive5xx: int(0, 1000).default(5),
        /** Consecutive gateway failures (502/503/504, connect failures, resets, per-try timeouts); 0 turns it off. */
        consecutiveGatewayFailure: int(0, 1000).default(5),
        /** First ejection; each further one lasts this much longer, up to maxEjectionTimeMs. */
        baseEjectionTimeMs: ms(30_000),
        maxEjectionTimeMs: ms(300_000),
        /** At most this share of an endpoint's instances is ejected at once (at least one of two or more). */
        maxEjectionPercent: int(0, 100).default(50),
      })
      .strict()
      .prefault({}),
    drain: z
      .object({
        /** After SIGTERM: keep accepting connections this long, while /health says 503, for the load balancer to react. */
        delayMs: ms(5_000),
        /** Then wait this long for requests in flight before ending them. */
        timeoutMs: ms(30_000),
      })
      .strict()
      .prefault({}),
    discovery: z
      .object({ modelsIntervalMs: ms(30_000), metricsIntervalMs: ms(10_000) })
      .strict()
      .prefault({}),
    warmup: z
      .object({
        /** Requests sent through a throwaway copy of the proxy before the front port opens; 0 skips it. */
        requests: int(0, 1_000_000).default(1000),
        /** The warm-up stops here even if requests are left, so a slow start stays bounded. */
        timeoutMs: ms(10_000),
        /** Connections opened to each instance in rotation before the front port opens (at most upstream.connections); 0: none. */
        connections: int(0, 4096).default(16),
      })
      .strict()
      .prefault({}),
    /** The instances' KV-cache events (vLLM's ZeroMQ publisher): the exact cache view. */
    kvEvents: KvEventsSchema.optional(),
    /** Load from the engines: each instance's /metrics (requests running and waiting) read into the router. */
    engineLoad: EngineLoadSchema.prefault({}),
    /** How a request's token ids are had for the exact view. */
    tokenizer: Tokenizer.optional(),
    /** Endpoints with prefill and decode instances: how a request runs over two of them. */
    disaggregation: DisaggregationSchema.prefault({}),
    /** serve on a decode pod, in front of its vLLM: prefill legs to the pod the endpoint picker names (x-prefiller-host-port). */
    sidecar: SidecarSchema.prefault({}),
    /** Router replicas sharing their queued prefill through Redis (--share-load). */
    shareLoad: ShareLoadSchema.optional(),
    /** This replica's id among the others (default: host, pid and random bytes). */
    replicaId: replicaIdSchema.optional(),
    debugHeaders: z.boolean().default(false),
    workers: workers.default(1),
    log: z
      .object({
        level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
        /** json: one JSON object a line (pino's, for log shippers); pretty: one line a record for a person to read. */
        format: z.enum(['json', 'pretty']).default('json'),
        prompts: z.boolean().default(false),
        /** One `info` line per request (the access log); false leaves it out whatever the level. */
        accessLog: z.boolean().default(true),
      })
      .strict()
      .default({ level: 'info', format: 'json', prompts: false, accessLog: true }),
    endpoints: z
      .array(Endpoint)
      .default([])
      .refine((eps) => new Set(eps.map((e) => e.name)).size === eps.length, 'endpoint names must be unique'),
  })
  .strict()

export type Config = z.infer<typeof ConfigSchema>
export type EndpointConfig = Config['endpoints'][number]
export type RoutingConfig = Config['routing']

export class ConfigError extends PrefixRouterError {
  declare readonly code: 'ERR_CONFIG'
  constructor(message: string, options: { cause?: unknown } = {}) {
    super('ERR_CONFIG', message, options)
    this.name = 'ConfigError'
  }
}

function keyPath(path: readonly PropertyKey[]): string {
  return path.reduce<string>((acc, p) => (typeof p === 'number' ? `${acc}[${p}]` : acc ? `${acc}.${String(p)}` : String(p)), '')
}

/** The value at `path` in the raw input, so that an error can show what it was given. */
function valueAt(raw: unknown, path: readonly PropertyKey[]): unknown {
  let v = raw
  for (const k of path) {
    if (v === null || typeof v !== 'object') return undefined
    v = (v as Record<PropertyKey, unknown>)[k]
  }
  return v
}

type Issue = z.core.$ZodIssue

/**
 * An instance is a URL string or an object, and zod reports a bad one as the union's bare
 * "Invalid input". The branch whose type fits (a string for a string) says what is wrong.
 */
function unionFit(issues: readonly Issue[], prefix: readonly PropertyKey[] = []): Issue[] {
  return issues.flatMap((i) => {
    const path = [...prefix, ...i.path]
    if (i.code === 'invalid_union') {
      const fits = i.errors.filter((b) => !b.some((e) => e.code === 'invalid_type' && e.path.length === 0))
      if (fits.length === 1) return unionFit(fits[0]!, path)
    }
    return [{ ...i, path }]
  })
}

/** Top-level keys people give the instances under; the nearest real key (`upstream`) would mislead. */
const INSTANCE_LIST_KEYS = new Set(['upstreams', 'instances'])

/** Where instances typed at the top level go, shown with the first one given. */
function instancesHint(value: unknown): string {
  const first = Array.isArray(value) ? value[0] : value
  return `instances belong to an endpoint: endpoints: [{ name: default, instances: [${typeof first === 'string' ? `${first}, ` : ''}...] }]`
}

/**
 * Validates raw config; throws ConfigError listing every bad key (`key: problem`). `originOf`
 * names the flag or environment variable that set a key, so the line says what was typed.
 */
export function parseConfig(raw: unknown, source = 'config', originOf?: (keyPath: string) => string | undefined): Config {
  const r = ConfigSchema.safeParse(raw ?? {})
  if (r.success) return r.data
  const lines = unionFit(r.error.issues).map((i) => {
    const at = keyPath(i.path)
    if (i.code === 'unrecognized_keys') {
      const known = knownKeysAt(ConfigSchema, i.path)
      const keys = i.keys.map((k) =>
        i.path.length === 0 && INSTANCE_LIST_KEYS.has(k) ? `'${k}': ${instancesHint(valueAt(raw, [k]))}` : `'${k}'${didYouMean(k, known, (s) => `'${s}'`).replace(/^;/, ',')}`,
      )
      return `${at ? `${at}: ` : ''}unknown key${i.keys.length > 1 ? 's' : ''} ${keys.join('; ')}`
    }
    const got = valueAt(raw, i.path)
    const shown = got === undefined || (typeof got === 'object' && got !== null) || /; got /.test(i.message) ? '' : `; got ${JSON.stringify(got)}`
    const origin = originOf?.(at)
    const hint = at === 'upstream' && (Array.isArray(got) || typeof got === 'string') ? `; upstream is the connection settings (timeouts, connections); ${instancesHint(got)}` : ''
    return `${at || '(top level)'}: ${i.message}${shown}${hint}${origin ? ` (from ${origin})` : ''}`
  })
  throw new ConfigError(`invalid ${source}:\n  ${lines.join('\n  ')}`)
}

export function readConfigFile(file: string): unknown {
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (err) {
    throw new ConfigError(`cannot read config file '${file}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
  }
  try {
    return file.endsWith('.json') ? JSON.parse(text) : parseYaml(text)
  } catch (err) {
    throw new ConfigError(`config file '${file}' is not valid ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${(err as Error).message}`)
  }
}

/** Routing of an endpoint: the global routing with the endpoint's overrides on top. */
export function endpointRouting(config: Config, ep: EndpointConfig): RoutingConfig {
  const o = Object.fromEntries(Object.entries(ep.routing).filter(([, v]) => v !== undefined))
  return { ...config.routing, ...o }
}
