// Prefill/decode disaggregation: what each instance does, and how an endpoint whose instances
// split the work runs a request over two of them. The schema lives here, below the fleet and the
// scheduler that read it.
import { z } from 'zod'

/**
 * What an instance does in a disaggregated fleet: `prefill` computes prompts' KV caches and hands
 * them over, `decode` receives them and generates, `both` does either (and a whole request).
 */
export const ROLES = ['prefill', 'decode', 'both'] as const
export type Role = (typeof ROLES)[number]
export const RoleSchema = z.enum(ROLES)

/** How the two legs hand the KV cache over: vLLM's NixlConnector (prefill, then decode) or SGLang's bootstrap (both at once). */
export const CONNECTORS = ['nixl', 'sglang'] as const
export type Connector = (typeof CONNECTORS)[number]

/** Which instance is chosen first: the decode one (its cache decides whether to split at all), or the prefill one. */
export const PD_ORDERS = ['decode-first', 'prefill-first'] as const
export type PdOrder = (typeof PD_ORDERS)[number]

/** vLLM's default KV-block lease on the prefill instance (kv_lease_duration, 30 s), less a margin for the decode to pull within. */
export const DEFAULT_KV_HOLD_MS = 20_000

/** Tokens of prompt the decode instance lacks below which the request skips the prefill leg (16 blocks of 16). */
export const DEFAULT_PD_THRESHOLD = 256

/**
 * Tokens of prompts a decode instance may have queued, a request's own included, when it takes one
 * whole because the prefill pool is busier (Dynamo's bypass bound, 2,048 tokens: one such prefill
 * adds ~56 ms to a decode step of the p5 profile).
 */
export const DEFAULT_PD_DECODE_PREFILL_CAP = 2048

export const DisaggregationSchema = z
  .object({
    connector: z.enum(CONNECTORS).default('nixl'),
    order: z.enum(PD_ORDERS).default('decode-first'),
    /**
     * Tokens of the prompt the chosen decode instance does not hold, below which the request
     * runs there whole (no prefill leg): moving a short remainder costs more than computing it. 0:
     * disaggregate every request.
     */
    threshold: z.number().int().min(0).max(1 << 20).default(DEFAULT_PD_THRESHOLD),
    /**
     * Past the threshold, a request still runs whole on its decode instance when its first token
     * comes sooner that way (the decode instance's queued prefill against the least-queued prefill
     * instance's, the transfer and the second request's cost), the requests decoding there lose
     * less than it gains, and the decode instance's queued prefill with this one's stays within
     * this many tokens (src/schedule/profiles/pd.ts, runsWhole). 0: only the threshold decides.
     */
    decodePrefillCap: z.number().int().min(0).max(1 << 20).default(DEFAULT_PD_DECODE_PREFILL_CAP),
    /** No prefill instance can take the request: run it whole on the decode instance (`decode`), or answer 503 (`fail`). */
    whenNoPrefill: z.enum(['decode', 'fail']).default('decode'),
    /**
     * A decode leg that fails before its first byte is tried on another decode instance with the
     * same KV parameters within this long of the prefill's answer (while the prefill instance still
     * holds the blocks); later, the prompt is prefilled again.
     */
    kvHoldMs: z.number().int().min(0).max(3_600_000).default(DEFAULT_KV_HOLD_MS),
    /**
     * A prefill try's answer must come within this (it comes whole, when the prompt is computed,
     * so queueing behind other prefills counts); then the leg is tried on another prefill instance.
     */
    prefillTimeoutMs: z.number().int().min(1).max(3_600_000).default(60_000),
  })
  .strict()

export type DisaggregationConfig = z.infer<typeof DisaggregationSchema>

/** The roles an instance of `role` plays: `both` is either. */
export function plays(role: Role, leg: 'prefill' | 'decode'): boolean {
  return role === 'both' || role === leg
}

/**
 * serve as a decode pod's sidecar (llm-d's routing sidecar): a request whose header names a
 * prefill pod (x-prefiller-host-port, set by the endpoint picker) has its prefill leg sent there,
 * then goes on to the pod's own vLLM (the endpoint's instances) with the KV parameters.
 */
export const SidecarSchema = z
  .object({
    enabled: z.boolean().default(false),
    /**
     * Prefill pods the header may name: host names, IP addresses or CIDR ranges, each with an
     * optional :port. Empty: any (as llm-d's sidecar without its SSRF protection), with a warning
     * at start: anyone who can set the header can make the sidecar send requests where they like.
     */
    allow: z.array(z.string().min(1)).default([]),
  })
  .strict()

export type SidecarConfig = z.infer<typeof SidecarSchema>
