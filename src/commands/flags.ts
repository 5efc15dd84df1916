// Every `serve` setting in one table: its flag, its environment twin, the configuration key it
// sets and its help line. The parseArgs options, the environment mapping, the configuration
// built from them (serve-config.ts) and `--help` all come from here, so they cannot disagree.
import { MAX_WORKERS } from '../config/config.js'
import { ENGINE_LOAD_INTERVAL, ENGINE_LOAD_INTERVAL_MS, STALE_INTERVALS } from '../config/engine-load.js'

/** `entries`: repeatable, each value one entry that may hold a space (`URL PORT`); the variable separates entries by commas only. */
export type FlagKind = 'string' | 'int' | 'number' | 'boolean' | 'list' | 'entries'

export interface FlagSpec {
  /** The flag without its dashes. */
  name: string
  /** Its environment twin. */
  env: string
  kind: FlagKind
  /** The configuration key it sets; none for flags serve-config.ts handles by name. */
  key?: readonly string[]
  /** The value's placeholder in --help, e.g. N. */
  arg?: string
  help: string
  /** Only `serve` takes it (`route` is a dry run: no fleet to start). */
  serveOnly?: boolean
}

export const FLAGS: readonly FlagSpec[] = [
  { name: 'config', env: 'PREFIX_ROUTER_CONFIG', kind: 'string', arg: 'FILE', help: 'YAML or JSON configuration (see docs/configuration.md); flags override it' },
  { name: 'upstream', env: 'PREFIX_ROUTER_UPSTREAMS', kind: 'list', arg: 'URL', help: 'an instance, e.g. http://10.0.0.5:8000 (repeat for each; the variable takes a comma- or space-separated list)' },
  {
    name: 'prefill',
    env: 'PREFIX_ROUTER_PREFILL',
    kind: 'entries',
    arg: 'URL [PORT]',
    help: "a prefill instance of a disaggregated fleet, optionally with its SGLang bootstrap port, as vLLM's and SGLang's routers take it (repeat for each; the variable: comma-separated, each URL or 'URL PORT'); with --upstream and --decode, replaces the first endpoint's instances",
  },
  { name: 'decode', env: 'PREFIX_ROUTER_DECODE', kind: 'entries', arg: 'URL', help: 'a decode instance of a disaggregated fleet (repeat for each; the variable: comma-separated)' },
  { name: 'pd-connector', env: 'PREFIX_ROUTER_PD_CONNECTOR', kind: 'string', key: ['disaggregation', 'connector'], arg: 'C', help: "with prefill and decode instances: how the KV cache moves: nixl (vLLM's NixlConnector: prefill, then decode; default) or sglang (SGLang's bootstrap: both legs at once)" },
  { name: 'pd-order', env: 'PREFIX_ROUTER_PD_ORDER', kind: 'string', key: ['disaggregation', 'order'], arg: 'O', help: 'which instance is chosen first: decode-first (default: its cache decides whether to split at all) or prefill-first' },
  {
    name: 'pd-threshold',
    env: 'PREFIX_ROUTER_PD_THRESHOLD',
    kind: 'int',
    key: ['disaggregation', 'threshold'],
    arg: 'N',
    help: 'tokens of the prompt the decode instance lacks below which a request runs there whole, 0-1048576 (default 256; 0: split every request)',
  },
  {
    name: 'pd-decode-prefill-cap',
    env: 'PREFIX_ROUTER_PD_DECODE_PREFILL_CAP',
    kind: 'int',
    key: ['disaggregation', 'decodePrefillCap'],
    arg: 'N',
    help: 'past the threshold, a request still runs whole on its decode instance when its first token comes sooner that way, the requests decoding there lose less than it gains, and that instance has at most N tokens of prompts queued with it, 0-1048576 (default 2048; 0: the threshold alone decides)',
  },
  { name: 'pd-when-no-prefill', env: 'PREFIX_ROUTER_PD_WHEN_NO_PREFILL', kind: 'string', key: ['disaggregation', 'whenNoPrefill'], arg: 'W', help: 'no prefill instance can take a request: decode (run it whole on the decode instance; default) or fail (503)' },
  {
    name: 'pd-kv-hold-ms',
    env: 'PREFIX_ROUTER_PD_KV_HOLD_MS',
    kind: 'int',
    key: ['disaggregation', 'kvHoldMs'],
    arg: 'N',
    help: "a decode leg failing before its first byte is tried on another decode instance within N ms of the prefill's answer, while the prefill instance holds the blocks, 0-3600000 (default 20000)",
  },
  {
    name: 'pd-prefill-timeout-ms',
    env: 'PREFIX_ROUTER_PD_PREFILL_TIMEOUT_MS',
    kind: 'int',
    key: ['disaggregation', 'prefillTimeoutMs'],
    arg: 'N',
    help: "a prefill leg's answer (it comes when the prompt is computed) must come within N ms, else it is tried on another prefill instance, 1-3600000 (default 60000)",
  },
  {
    name: 'sidecar',
    env: 'PREFIX_ROUTER_SIDECAR',
    kind: 'boolean',
    key: ['sidecar', 'enabled'],
    serveOnly: true,
    help: "on a decode pod, in front of its vLLM (--upstream): a request whose x-prefiller-host-port header (set by the endpoint picker) names a prefill pod is prefilled there first, then sent on with the KV parameters (llm-d's routing sidecar)",
  },
  {
    name: 'sidecar-allow',
    env: 'PREFIX_ROUTER_SIDECAR_ALLOW',
    kind: 'list',
    key: ['sidecar', 'allow'],
    arg: 'HOST',
    serveOnly: true,
    help: 'with --sidecar: a prefill pod the header may name: a host, an IP address or a CIDR range, each with an optional :port (repeat; default: any, with a warning)',
  },
  { name: 'demo', env: 'PREFIX_ROUTER_DEMO', kind: 'boolean', serveOnly: true, help: 'no instances of your own: start an embedded fleet of simulated vLLM workers (answers are simulated)' },
  { name: 'sim-instances', env: 'PREFIX_ROUTER_SIM_INSTANCES', kind: 'int', arg: 'N', serveOnly: true, help: 'with --demo: workers in the simulated fleet, 1-64 (default 4)' },
  { name: 'strategy', env: 'PREFIX_ROUTER_STRATEGY', kind: 'string', key: ['routing', 'strategy'], arg: 'NAME', help: "longest_prefix (default: the instance holding most of the prompt, weighed against its queue), prefix_aware (SageMaker's PREFIX_AWARE exactly: a hash of the first prefix-length characters), least_outstanding_requests, random" },
  { name: 'prefix-length', env: 'PREFIX_ROUTER_PREFIX_LENGTH', kind: 'int', key: ['routing', 'prefixLength'], arg: 'N', help: 'routing prefix: bytes (invoke) or code points (OpenAI), 1024-65536 (default 4096)' },
  {
    name: 'concurrency-threshold',
    env: 'PREFIX_ROUTER_CONCURRENCY_THRESHOLD',
    kind: 'int',
    key: ['routing', 'concurrencyThreshold'],
    arg: 'N',
    help: 'in-flight requests at an instance before overflow, 1-1024 (default 10; longest_prefix: none, it bounds load itself; a value given is a hard cap)',
  },
  {
    name: 'placement',
    env: 'PREFIX_ROUTER_PLACEMENT',
    kind: 'string',
    key: ['routing', 'placement'],
    arg: 'P',
    help: 'longest_prefix: where a prompt no instance holds goes: balanced (default; the least queued of a few; one router) or hash (router replicas agree)',
  },
  { name: 'load-factor', env: 'PREFIX_ROUTER_LOAD_FACTOR', kind: 'number', key: ['routing', 'loadFactor'], arg: 'F', help: "longest_prefix: an instance is full above F x the fleet's mean in flight (default 3)" },
  { name: 'prefill-weight', env: 'PREFIX_ROUTER_PREFILL_WEIGHT', kind: 'number', key: ['routing', 'prefillWeight'], arg: 'W', help: 'longest_prefix: a block to compute here, against one queued here (default 6)' },
  { name: 'match-length', env: 'PREFIX_ROUTER_MATCH_LENGTH', kind: 'int', key: ['routing', 'matchLength'], arg: 'N', help: 'longest_prefix: code points of the prompt it matches, 1024-262144 (default 65536)' },
  {
    name: 'workers',
    env: 'PREFIX_ROUTER_WORKERS',
    kind: 'string',
    key: ['workers'],
    arg: 'N',
    serveOnly: true,
    help: `processes serving the front port, sharing one routing state, 1-${MAX_WORKERS} (default 1; auto: one per core)`,
  },
  {
    name: 'kv-events-port',
    env: 'PREFIX_ROUTER_KV_EVENTS_PORT',
    kind: 'string',
    key: ['kvEvents', 'port'],
    arg: 'P',
    help: "the exact cache view: read each instance's vLLM KV events from tcp://<instance host>:P (vLLM's default 5557), or +N/-N from the instance's own port (instances sharing a host)",
  },
  { name: 'kv-events-replay-port', env: 'PREFIX_ROUTER_KV_EVENTS_REPLAY_PORT', kind: 'string', key: ['kvEvents', 'replayPort'], arg: 'P', help: "with --kv-events-port: vLLM's replay socket, P or +N/-N, where missed event batches are asked for (default none)" },
  { name: 'kv-events-topic', env: 'PREFIX_ROUTER_KV_EVENTS_TOPIC', kind: 'string', key: ['kvEvents', 'topic'], arg: 'T', help: 'with --kv-events-port: the topic vLLM publishes on (default empty: all)' },
  { name: 'kv-events-dp-ranks', env: 'PREFIX_ROUTER_KV_EVENTS_DP_RANKS', kind: 'int', key: ['kvEvents', 'dataParallelRanks'], arg: 'N', help: 'with --kv-events-port: data-parallel ranks per instance, rank r publishing on P + r, 1-64 (default 1)' },
  { name: 'kv-block-size', env: 'PREFIX_ROUTER_KV_BLOCK_SIZE', kind: 'int', key: ['routing', 'exactBlockSize'], arg: 'N', help: "with --kv-events-port: tokens per KV block, as vLLM's --block-size, 1-1024 (default 16)" },
  {
    name: 'tokenizer',
    env: 'PREFIX_ROUTER_TOKENIZER',
    kind: 'string',
    key: ['tokenizer', 'mode'],
    arg: 'MODE',
    help: "with --kv-events-port: how a request's token ids are had: remote (the default: the instance's POST /tokenize), local (--tokenizer-path), or bytes / o200k (the simulator's tokenizers)",
  },
  { name: 'tokenizer-path', env: 'PREFIX_ROUTER_TOKENIZER_PATH', kind: 'string', key: ['tokenizer', 'path'], arg: 'DIR', help: "with --tokenizer local: the model's directory holding tokenizer.json and tokenizer_config.json (or a tokenizer.json file)" },
  { name: 'tokenizer-timeout-ms', env: 'PREFIX_ROUTER_TOKENIZER_TIMEOUT_MS', kind: 'int', key: ['tokenizer', 'timeoutMs'], arg: 'N', help: 'with --tokenizer remote: longest wait for /tokenize, plus 0.5 ms per KiB of body, before the request is routed on the approximate view (default 50)' },
  {
    name: 'engine-load',
    env: 'PREFIX_ROUTER_ENGINE_LOAD',
    kind: 'string',
    key: ['engineLoad', 'mode'],
    arg: 'MODE',
    help: "load from the engines: auto (default) reads each instance's vLLM /metrics (requests running and waiting) for longest_prefix; on: also least_outstanding_requests and prefix_aware's threshold count every client's requests; off",
  },
  {
    name: 'engine-load-interval-ms',
    env: 'PREFIX_ROUTER_ENGINE_LOAD_INTERVAL_MS',
    kind: 'int',
    key: ['engineLoad', 'intervalMs'],
    arg: 'N',
    help: `with --engine-load auto or on: how often each instance's /metrics is read, ${ENGINE_LOAD_INTERVAL.min}-${ENGINE_LOAD_INTERVAL.max} (default ${ENGINE_LOAD_INTERVAL_MS}); unanswered for ${STALE_INTERVALS} intervals, the router goes by its own counts`,
  },
  {
    name: 'share-load',
    env: 'PREFIX_ROUTER_SHARE_LOAD',
    kind: 'string',
    key: ['shareLoad', 'url'],
    arg: 'URL',
    serveOnly: true,
    help: "router replicas share their queued prefill through this Redis or Valkey: redis://HOST:PORT[/DB], rediss:// for TLS (default: off)",
  },
  { name: 'share-load-interval-ms', env: 'PREFIX_ROUTER_SHARE_LOAD_INTERVAL_MS', kind: 'int', key: ['shareLoad', 'intervalMs'], arg: 'N', serveOnly: true, help: 'with --share-load: how often this replica publishes its queued prefill when it changed, 1-1000 (default 10)' },
  { name: 'share-load-prefix', env: 'PREFIX_ROUTER_SHARE_LOAD_PREFIX', kind: 'string', key: ['shareLoad', 'prefix'], arg: 'NAME', serveOnly: true, help: 'with --share-load: the channel is NAME:load, so fleets can share one Redis (default prefix-router)' },
  { name: 'replica-id', env: 'PREFIX_ROUTER_REPLICA_ID', kind: 'string', key: ['replicaId'], arg: 'ID', serveOnly: true, help: "this router replica's id among the others (default: hostname-pid-random)" },
  { name: 'host', env: 'PREFIX_ROUTER_HOST', kind: 'string', key: ['listen', 'host'], arg: 'H', help: 'front address (default 0.0.0.0)' },
  { name: 'port', env: 'PREFIX_ROUTER_PORT', kind: 'int', key: ['listen', 'port'], arg: 'N', help: 'front port (default 8080; 0: any free port)' },
  { name: 'admin-host', env: 'PREFIX_ROUTER_ADMIN_HOST', kind: 'string', key: ['admin', 'host'], arg: 'H', help: 'admin address: /metrics, /admin/instances, /admin/reload (default 127.0.0.1)' },
  { name: 'admin-port', env: 'PREFIX_ROUTER_ADMIN_PORT', kind: 'int', key: ['admin', 'port'], arg: 'N', help: 'admin port (default 9090; 0: any free port)' },
  { name: 'tls-cert', env: 'PREFIX_ROUTER_TLS_CERT', kind: 'string', key: ['tls', 'cert'], arg: 'FILE', help: 'with --tls-key: serve TLS with ALPN h2 and http/1.1 (PEM)' },
  { name: 'tls-key', env: 'PREFIX_ROUTER_TLS_KEY', kind: 'string', key: ['tls', 'key'], arg: 'FILE', help: "the TLS certificate's private key (PEM)" },
  { name: 'upstream-protocol', env: 'PREFIX_ROUTER_UPSTREAM_PROTOCOL', kind: 'string', key: ['upstream', 'protocol'], arg: 'P', help: 'http1 (default), h2c (HTTP/2 prior knowledge) or h2 (TLS upstreams)' },
  { name: 'probe-token-file', env: 'PREFIX_ROUTER_PROBE_TOKEN_FILE', kind: 'string', key: ['probeAuth', 'tokenFile'], arg: 'FILE', serveOnly: true, help: "instances behind an API key (vLLM --api-key): the probes (/health, /v1/models, /metrics) send the token in FILE as a bearer token; client requests keep their own Authorization" },
  { name: 'probe-token-env', env: 'PREFIX_ROUTER_PROBE_TOKEN_ENV', kind: 'string', key: ['probeAuth', 'tokenEnv'], arg: 'NAME', serveOnly: true, help: 'as --probe-token-file, the token from the environment variable NAME (e.g. VLLM_API_KEY)' },
  { name: 'max-body-bytes', env: 'PREFIX_ROUTER_MAX_BODY_BYTES', kind: 'int', key: ['limits', 'maxBodyBytes'], arg: 'N', help: 'request body limit (default 16777216)' },
  {
    name: 'body-timeout-ms',
    env: 'PREFIX_ROUTER_BODY_TIMEOUT_MS',
    kind: 'int',
    key: ['limits', 'bodyTimeoutMs'],
    arg: 'N',
    help: "the whole request body within N ms of its headers, else 408 request_timeout (default 30000; 0: no limit); epp: of its stream's opening",
  },
  { name: 'drain-delay-ms', env: 'PREFIX_ROUTER_DRAIN_DELAY_MS', kind: 'int', key: ['drain', 'delayMs'], arg: 'N', help: 'on SIGTERM: /health answers 503 and connections are still accepted for N ms (default 5000)' },
  { name: 'drain-timeout-ms', env: 'PREFIX_ROUTER_DRAIN_TIMEOUT_MS', kind: 'int', key: ['drain', 'timeoutMs'], arg: 'N', help: 'then requests in flight get up to N ms to finish (default 30000); a second signal exits at once' },
  {
    name: 'warmup-requests',
    env: 'PREFIX_ROUTER_WARMUP_REQUESTS',
    kind: 'int',
    key: ['warmup', 'requests'],
    arg: 'N',
    help: 'before the front port opens, send N requests through a throwaway copy of the proxy to a loopback sink, so the first real ones do not wait on the JIT (default 1000; 0: off)',
  },
  { name: 'debug-headers', env: 'PREFIX_ROUTER_DEBUG_HEADERS', kind: 'boolean', key: ['debugHeaders'], help: 'add x-prefix-router-instance, -decision and -retries to responses' },
  { name: 'log-level', env: 'PREFIX_ROUTER_LOG_LEVEL', kind: 'string', key: ['log', 'level'], arg: 'L', help: 'fatal, error, warn, info (default), debug, trace, silent' },
  {
    name: 'log-format',
    env: 'PREFIX_ROUTER_LOG_FORMAT',
    kind: 'string',
    key: ['log', 'format'],
    arg: 'F',
    help: 'json (default: one JSON object a line, for log shippers) or pretty (one line a record for a person: time, level, message, key=value; requests as method, path, status, instance, duration)',
  },
  { name: 'log-prompts', env: 'PREFIX_ROUTER_LOG_PROMPTS', kind: 'boolean', key: ['log', 'prompts'], help: 'log routing text (off by default: prompts are never logged otherwise)' },
  {
    name: 'upstream-dns',
    env: 'PREFIX_ROUTER_UPSTREAM_DNS',
    kind: 'list',
    arg: 'URL',
    serveOnly: true,
    help: 'instances from DNS: each A/AAAA address of NAME in http://NAME:PORT is one, re-resolved every 5 s (repeat for more names; adds to --upstream)',
  },
  { name: 'prefill-dns', env: 'PREFIX_ROUTER_PREFILL_DNS', kind: 'list', arg: 'URL', serveOnly: true, help: 'as --upstream-dns, each address a prefill instance (a name for the prefill pods)' },
  { name: 'decode-dns', env: 'PREFIX_ROUTER_DECODE_DNS', kind: 'list', arg: 'URL', serveOnly: true, help: 'as --upstream-dns, each address a decode instance' },
  { name: 'dns-server', env: 'PREFIX_ROUTER_DNS_SERVER', kind: 'string', arg: 'IP:PORT', serveOnly: true, help: 'with --upstream-dns, --prefill-dns or --decode-dns: the resolver to ask instead of the system one' },
]

/** The environment variables' common prefix: any other variable with it is a mistake. */
export const ENV_PREFIX = 'PREFIX_ROUTER_'

type Option = { type: 'string'; multiple?: boolean } | { type: 'boolean' }

/** node:util parseArgs options for the given flags. */
export function parseArgsOptions(flags: readonly FlagSpec[]): Record<string, Option> {
  return Object.fromEntries(
    flags.map((f) => [f.name, f.kind === 'boolean' ? { type: 'boolean' } : f.kind === 'list' || f.kind === 'entries' ? { type: 'string', multiple: true } : { type: 'string' }]),
  )
}

/** The flags' --help lines, each with its environment twin in brackets, wrapped under a column. */
export function helpLines(flags: readonly FlagSpec[], extra: readonly { usage: string; help: string }[] = []): string {
  const rows = [...flags.map((f) => ({ usage: `--${f.name}${f.arg ? ` ${f.arg}` : ''}`, help: `${f.help} [${f.env}]` })), ...extra]
  const col = Math.max(...rows.map((r) => r.usage.length)) + 4
  const width = Math.max(60, 100 - col)
  return rows
    .map((r) => {
      const words = r.help.split(' ')
      const lines: string[] = []
      let line = ''
      for (const w of words) {
        if (line && line.length + 1 + w.length > width) {
          lines.push(line)
          line = w
        } else line = line ? `${line} ${w}` : w
      }
      lines.push(line)
      return lines.map((l, i) => `${i === 0 ? `  ${r.usage}`.padEnd(col + 2) : ' '.repeat(col + 2)}${l}`).join('\n')
    })
    .join('\n')
}
