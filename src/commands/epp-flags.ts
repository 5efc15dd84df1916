// `prefix-router epp`'s flags: serve's table without what belongs to an HTTP front (its port,
// TLS, warm-up, debug headers) or the demo, and the picker's own, each with its variable.
import { FLAGS, type FlagSpec } from './flags.js'
import { DEFAULT_MAX_STREAMS, MAX_STREAMS_LIMIT } from '../epp/limits.js'

/** serve's settings that have no meaning for a picker, which has no HTTP front of its own. */
const FRONT_ONLY = new Set(['demo', 'sim-instances', 'workers', 'host', 'port', 'tls-cert', 'tls-key', 'warmup-requests', 'debug-headers'])

/** The picker's own: read by name in epp.ts, not into the configuration. */
export const EPP_OWN_FLAGS: readonly FlagSpec[] = [
  { name: 'grpc-port', env: 'PREFIX_ROUTER_GRPC_PORT', kind: 'int', arg: 'N', help: "the ext_proc and gRPC health port, TLS unless --grpc-tls off (default 9002, the reference picker's; 0: any free port)" },
  { name: 'grpc-host', env: 'PREFIX_ROUTER_GRPC_HOST', kind: 'string', arg: 'H', help: 'the gRPC port\'s address (default 0.0.0.0)' },
  {
    name: 'grpc-tls',
    env: 'PREFIX_ROUTER_GRPC_TLS',
    kind: 'string',
    arg: 'on|off',
    help: 'TLS on the gRPC port (default on, as the reference picker; gateways skip verifying it): the pair given, else a self-signed certificate made at start, in memory only',
  },
  { name: 'grpc-tls-cert', env: 'PREFIX_ROUTER_GRPC_TLS_CERT', kind: 'string', arg: 'FILE', help: "with --grpc-tls-key: the gRPC port's certificate (PEM), read at start and again on SIGHUP" },
  { name: 'grpc-tls-key', env: 'PREFIX_ROUTER_GRPC_TLS_KEY', kind: 'string', arg: 'FILE', help: "with --grpc-tls-cert: its private key (PEM)" },
  {
    name: 'grpc-health-port',
    env: 'PREFIX_ROUTER_GRPC_HEALTH_PORT',
    kind: 'int',
    arg: 'N',
    help: "gRPC health in plaintext, for the kubelet's probes, which do not speak TLS (default 9003, the reference picker's, when TLS is on; with --grpc-tls off only if given; 0: any free port)",
  },
  {
    name: 'grpc-max-streams',
    env: 'PREFIX_ROUTER_GRPC_MAX_STREAMS',
    kind: 'int',
    arg: 'N',
    help: `streams one gateway connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS), 1-${MAX_STREAMS_LIMIT} (default ${DEFAULT_MAX_STREAMS}); a gateway needing more opens another connection`,
  },
  {
    name: 'body-mode',
    env: 'PREFIX_ROUTER_BODY_MODE',
    kind: 'string',
    arg: 'M',
    help: "the gateway's ext_proc processing mode for bodies: streamed (FULL_DUPLEX_STREAMED, default, what the inference extension configures) or buffered (BUFFERED)",
  },
]

export const EPP_FLAGS: readonly FlagSpec[] = [...FLAGS.filter((f) => !FRONT_ONLY.has(f.name)), ...EPP_OWN_FLAGS]
