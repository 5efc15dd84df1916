// The `discovery` sources an endpoint may list: where its instances come from besides
// `instances`. Validated with the rest of the configuration.
import { isIP } from 'node:net'
import { z } from 'zod'
import { RoleSchema } from './disaggregation.js'

/** The label llm-d's deployments put on their model-server pods: a pod's role, unless `roleLabel` names another. */
export const LLMD_ROLE_LABEL = 'llm-d.ai/role'

function parsedUrl(s: string): URL | undefined {
  try {
    return new URL(s)
  } catch {
    return undefined
  }
}

const httpScheme = (u: URL | undefined) => u !== undefined && (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== ''

/** http://NAME:PORT/path: the name is resolved, the rest applies to every address. */
export const dnsUrl = z.string().refine((s) => httpScheme(parsedUrl(s)), 'must be an http:// or https:// URL naming the host to resolve (http://NAME:PORT)')

/** A resolver's address, HOST:PORT with HOST an IP address ([v6]:PORT for IPv6); node:dns talks to it directly. */
export const dnsServer = z.string().refine((s) => {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(s)
  if (!m) return false
  const host = m[1] ?? m[2]!
  const port = Number(m[3])
  return isIP(host) !== 0 && port >= 1 && port <= 65535
}, 'must be IP:PORT (an address, not a name: [v6]:PORT for IPv6)')

/** The role of the instances a source finds, unless it reads one of its own (a file entry's, a pod's label); unset: both. */
const sourceRole = RoleSchema.optional()

/** A label key (an optional DNS-subdomain prefix and a name), as Kubernetes takes it. */
const labelKey = z
  .string()
  .regex(/^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/, 'must be a label key (prefix/name, e.g. llm-d.ai/role)')

/** The pod label that says each pod's role (llm-d's by default); false: the pods' labels are not read. */
const roleLabel = z.union([labelKey, z.literal(false)]).default(LLMD_ROLE_LABEL)

const FileSource = z
  .object({
    type: z.literal('file'),
    /** YAML or JSON list of instances, in the form of `instances`; watched for changes. */
    path: z.string().min(1),
    /** For the entries that give no `role` of their own. */
    role: sourceRole,
  })
  .strict()

const DnsSource = z
  .object({
    type: z.literal('dns'),
    url: dnsUrl,
    intervalMs: z.number().int().min(100).max(24 * 3600 * 1000).default(5000),
    server: dnsServer.optional(),
    /** The name is an SRV name: its records give each target's host and port. */
    srv: z.boolean().default(false),
    /** Every address's role: a name per role (a headless Service for the prefill pods, one for the decode pods). */
    role: sourceRole,
  })
  .strict()

const KubernetesSource = z
  .object({
    type: z.literal('kubernetes'),
    service: z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'must be a Service name (lower-case letters, digits and -)').optional(),
    labelSelector: z.string().min(1).optional(),
    namespace: z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'must be a namespace name (lower-case letters, digits and -)').optional(),
    /** A port's name in the EndpointSlice, or a number to use as it is; unset: the slice's first port. */
    port: z.union([z.number().int().min(1).max(65535), z.string().min(1)]).optional(),
    scheme: z.enum(['http', 'https']).default('http'),
    /** The role of endpoints whose pod carries no role label (or whose pods cannot be read). */
    role: sourceRole,
    /**
     * Read from the pods the endpoints target (EndpointSlices carry no pod labels): needs
     * get/list/watch on pods; false to read none.
     */
    roleLabel,
  })
  .strict()
  .refine((s) => s.service !== undefined || s.labelSelector !== undefined, { message: "give service (a Service's name) or labelSelector", path: ['service'] })

/** An InferencePool's name: a DNS-1123 subdomain, as any object's. */
const objectName = z
  .string()
  .max(253)
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/, 'must be an object name (lower-case letters, digits, - and .)')

const InferencePoolSource = z
  .object({
    type: z.literal('inferencePool'),
    /** The InferencePool (inference.networking.k8s.io/v1) whose ready pods are the instances. */
    name: objectName,
    /** Unset: the pod's own namespace (its service account's), required outside a cluster. */
    namespace: z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'must be a namespace name (lower-case letters, digits and -)').optional(),
    scheme: z.enum(['http', 'https']).default('http'),
    /** The role of pods without a role label. */
    role: sourceRole,
    /** The pod label that gives each pod's role; false: every pod takes `role`. */
    roleLabel,
  })
  .strict()

export const DiscoverySourceSchema = z.discriminatedUnion('type', [FileSource, DnsSource, KubernetesSource, InferencePoolSource])

export type DiscoverySourceConfig = z.infer<typeof DiscoverySourceSchema>
export type FileSourceConfig = z.infer<typeof FileSource>
export type DnsSourceConfig = z.infer<typeof DnsSource>
export type KubernetesSourceConfig = z.infer<typeof KubernetesSource>
export type InferencePoolSourceConfig = z.infer<typeof InferencePoolSource>

/** How a source is named in the logs: what it reads, and the role it gives when one is set. */
export function describeSource(s: DiscoverySourceConfig): string {
  return s.role === undefined ? describeWhere(s) : `${describeWhere(s)} (${s.role})`
}

function describeWhere(s: DiscoverySourceConfig): string {
  switch (s.type) {
    case 'file':
      return `file ${s.path}`
    case 'dns':
      return `dns ${s.srv ? 'srv ' : ''}${s.url}${s.server ? ` @${s.server}` : ''}`
    case 'kubernetes':
      return `kubernetes ${s.namespace !== undefined ? `${s.namespace}/` : ''}${s.service ?? s.labelSelector}`
    case 'inferencePool':
      return `inferencePool ${s.namespace !== undefined ? `${s.namespace}/` : ''}${s.name}`
  }
}
