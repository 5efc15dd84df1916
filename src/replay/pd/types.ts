// What a disaggregated replay lane asks its router: for each request, the decode instance and
// the prefill instance (or none: the whole request runs on the decode instance), and the flow
// that hands the KV cache over (vLLM's NIXL: prefill, then decode; SGLang's bootstrap: both
// legs at once). Our lanes and the peers' re-implementations (src/replay/peers/*-pd.ts) speak it.
import type { KvEvent } from '../../fleet/events/types.js'
import type { SimEngine } from '../../sim/engine.js'
import type { PreparedRequest } from '../prepare.js'

/** Where one request's legs go, and what to tell the router as they progress. */
export interface PdPlacement {
  /** Engine index of the instance that decodes (and, without a prefill leg, prefills too). */
  decode: number
  /** Engine index of the prefill leg's instance; null: no prefill leg (run whole on `decode`). */
  prefill: number | null
  /** How the legs hand the KV cache over: `nixl` (vLLM: the decode leg is sent once the prefill answered) or `bootstrap` (SGLang: both at once). */
  flow: 'nixl' | 'bootstrap'
  /** The prefill leg answered (its request ended on the prefill instance). */
  prefillDone?(): void
  /** The client's first token (the decode instance's first token). */
  firstToken?(): void
  /** The request finished or failed: release whatever the router counts. */
  finish(): void
}

export interface PdRouter {
  route(req: PreparedRequest, now: number): PdPlacement
  /** Routers fed by the engines' KV events (as ReplayRouter.kvEvents): every engine's batches. */
  kvEvents?: ((instance: number, events: readonly KvEvent[], atMs: number) => void) | undefined
  close(): void
}

export interface PdContext {
  /** Instance ids by engine index ("sim-0", …). */
  ids: readonly string[]
  engines: readonly SimEngine[]
  /** Engine indexes of the prefill instances and of the decode instances; an aggregated lane has all in `decode` and none in `prefill`. */
  prefill: readonly number[]
  decode: readonly number[]
  model: string
  kvBlocks: number
  blockSize: number
  prefixLength: number
  seed: number
}

export interface PdRouterFactory {
  /** Name in reports and on the command line. */
  name: string
  /** Where it comes from, for the report. */
  source: string
  /** True for a lane over an aggregated fleet (every instance does both legs). */
  aggregated?: boolean
  /** True when the router reads the engines' KV events (its prompts need token ids). */
  kvEvents?: boolean
  create(ctx: PdContext): PdRouter
}
