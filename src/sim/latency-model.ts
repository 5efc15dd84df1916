// Step time of a continuous-batching engine, as a linear model of what the step carries:
//
//   step_ms = stepBaseMs                       weights read once per step (memory-bound decode floor)
//           + prefillMsPerToken * prefill      compute-bound prefill of uncached prompt tokens
//           + decodeMsPerSeq    * decodes      per-sequence sampling and bookkeeping
//           + contextMsPerToken * context      attention over the KV already in the cache
//
// plus, per request and outside the engine loop (the API server's share: HTTP, chat
// template, tokenization), overhead_ms = requestOverheadMs + overheadMsPerPromptToken * prompt.
// Time to first token is then overhead + queueing + the steps that prefill the *uncached*
// part of the prompt; every later token costs one step. See profiles.ts for the numbers.

export interface LatencyParams {
  stepBaseMs: number
  prefillMsPerToken: number
  decodeMsPerSeq: number
  contextMsPerToken: number
  requestOverheadMs: number
  overheadMsPerPromptToken: number
}

export class LatencyModel {
  constructor(readonly params: Readonly<LatencyParams>) {}

  stepMs(prefillTokens: number, decodeSeqs: number, contextTokens: number): number {
    const p = this.params
    return (
      p.stepBaseMs +
      p.prefillMsPerToken * prefillTokens +
      p.decodeMsPerSeq * decodeSeqs +
      p.contextMsPerToken * contextTokens
    )
  }

  overheadMs(promptTokens: number): number {
    return this.params.requestOverheadMs + this.params.overheadMsPerPromptToken * promptTokens
  }

  /**
   * TTFT of a lone request on an idle engine, as the scheduler will produce it: chunked
   * prefill of the uncached tokens (the last token is always computed, as in vLLM).
   */
  idleTtftMs(promptTokens: number, cachedTokens: number, maxNumBatchedTokens: number): number {
    let computed = Math.min(cachedTokens, promptTokens - 1)
    let t = this.overheadMs(promptTokens)
    while (computed < promptTokens) {
      const chunk = Math.min(promptTokens - computed, maxNumBatchedTokens)
      t += this.stepMs(chunk, 0, computed)
      computed += chunk
    }
    return t
  }
}
