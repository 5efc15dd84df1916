// llm-d's disaggregated scheduling (llm-d/llm-d-inference-scheduler), re-implemented. Facts used:
//   handler   pkg/plugins/profile/disagg_profile_handler.go, Pick: the decode profile runs first;
//             then, if the PD decider says so for the decode endpoint it chose, the prefill
//             profile; otherwise the request is decode-only (the decode pod prefills it);
//   decider   pkg/plugins/profile/prefix_based_pd_decider.go, decide: inputTokens = bytes of the
//             prompt (completions) or of the JSON of the messages (chat) / AverageCharactersPerToken
//             (4); no disaggregation when inputTokens < nonCachedTokens, nor when
//             inputTokens − matchBlocks × blockSizeTokens < nonCachedTokens, the match being the
//             prefix plugin's for the chosen decode endpoint;
//   config    deploy/config/pd-epp-config.yaml: nonCachedTokens 16; both profiles
//             prefix-cache-scorer weight 2 (maxPrefixBlocksToMatch 256, lruCapacityPerServer
//             31,250) and queue-scorer weight 1, max-score picker, the prefill-filter / decode-filter
//             keeping each profile to its role's pods;
//   flow      the routing sidecar on the decode pod sends the prefill leg to the pod named in
//             x-prefiller-host-port, then the request to its own vLLM with the KV parameters
//             (NIXL: prefill, then decode).
// The scorers are ./llmd-default.ts's (the prefix plugin's 64-byte block hashes, 16 tokens at 4
// characters a token; queue = vllm:num_requests_waiting scraped every 50 ms), one per profile.
import type { PdContext, PdPlacement, PdRouter, PdRouterFactory } from '../pd/types.js'
import type { PreparedRequest } from '../prepare.js'
import { gieChatPrompt, LLMD_DEFAULTS, LlmdDefault, type EngineSignals, type LlmdConfig } from './llmd-default.js'

/** pd-epp-config.yaml's prefix-based-pd-decider nonCachedTokens. */
export const LLMD_NON_CACHED_TOKENS = 16
const AVERAGE_CHARACTERS_PER_TOKEN = 4

/** Both profiles of pd-epp-config.yaml: prefix-cache-scorer ×2, queue-scorer ×1 (no KV-utilization scorer). */
export const LLMD_PD_PROFILE: LlmdConfig = { ...LLMD_DEFAULTS, prefixWeight: 2, queueWeight: 1, kvWeight: 0 }

export const llmdPd: PdRouterFactory = {
  name: 'llmd_pd',
  source: 'llm-d disagg-profile-handler with prefix-based-pd-decider (nonCachedTokens 16), pd-epp-config.yaml profiles, re-implemented',
  create: (ctx) => new LlmdPd(ctx),
}

/** The decider's token estimate of the request (getUserInputLenInTokens). */
export function llmdInputTokens(req: Pick<PreparedRequest, 'api' | 'body'>): number {
  const b = req.body
  const bytes = req.api === 'completions' ? Buffer.byteLength(typeof b.prompt === 'string' ? b.prompt : '') : Buffer.byteLength(JSON.stringify(b.messages ?? null))
  return Math.floor(bytes / AVERAGE_CHARACTERS_PER_TOKEN)
}

export class LlmdPd implements PdRouter {
  readonly decodeProfile: LlmdDefault
  readonly prefillProfile: LlmdDefault
  private readonly blockTokens: number

  constructor(
    ctx: Pick<PdContext, 'prefill' | 'decode' | 'model' | 'seed'> & { engines: readonly EngineSignals[] },
    private readonly nonCachedTokens = LLMD_NON_CACHED_TOKENS,
  ) {
    this.decodeProfile = new LlmdDefault({ members: ctx.decode, engines: ctx.engines, model: ctx.model, seed: ctx.seed }, LLMD_PD_PROFILE)
    this.prefillProfile = new LlmdDefault({ members: ctx.prefill, engines: ctx.engines, model: ctx.model, seed: ctx.seed + 1 }, LLMD_PD_PROFILE)
    this.blockTokens = LLMD_PD_PROFILE.hashBlockSize / AVERAGE_CHARACTERS_PER_TOKEN
  }

  route(req: PreparedRequest, now: number): PdPlacement {
    const c = LLMD_PD_PROFILE
    const model = typeof req.body.model === 'string' ? req.body.model : undefined
    const prompt = gieChatPrompt(req, c.hashBlockSize * c.maxPrefixBlocks)
    // The prefix plugin's match for every decode pod, as it stood when the decode profile scored them.
    const hashes = this.decodeProfile.hashPrompt(prompt, model)
    const matched = this.decodeProfile.indexer.match(hashes)
    const d = this.decodeProfile.routePrompt(prompt, now, model)
    // The first hash is the model's (block 0 is keyed by it): the prompt's blocks follow.
    const matchBlocks = Math.max(0, (matched[d.instance] ?? 0) - 1)
    if (!this.decide(llmdInputTokens(req), matchBlocks)) return { decode: d.instance, prefill: null, flow: 'nixl', finish: () => {} }
    const p = this.prefillProfile.routePrompt(prompt, now, model)
    return { decode: d.instance, prefill: p.instance, flow: 'nixl', finish: () => {} }
  }

  /** prefix_based_pd_decider.go decide: true runs the prefill profile. */
  decide(inputTokens: number, matchBlocks: number): boolean {
    if (this.nonCachedTokens <= 0) return true
    if (inputTokens < this.nonCachedTokens) return false
    return inputTokens - matchBlocks * this.blockTokens >= this.nonCachedTokens
  }

  close(): void {}
}
