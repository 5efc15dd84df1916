// How much of the prompt an instance lacks, by what its pick saw: the decision whether a
// request is worth a prefill leg of its own reads it.
import type { Lease, Router } from '../core/router.js'
import type { RequestView } from './types.js'

/**
 * Bytes of text per token when the prompt has not been tokenized: what English prose and code
 * average under the common BPE tokenizers, and what the approximate view's capacity estimates
 * assume too. An estimate; with the exact view the tokens are counted.
 */
export const APPROX_BYTES_PER_TOKEN = 4

/**
 * Tokens of the prompt the instance of `lease` does not hold. With the exact view the instance's
 * engine reported its blocks (heldShare of the prompt's tokens); with the approximate view the
 * match is in blocks of routing key, `blockTokens` tokens each. A strategy that matches no blocks
 * knows of nothing held: the whole prompt.
 */
export function uncachedTokens(lease: Lease, view: RequestView, blockTokens: number): number {
  if (lease.blocks === 0) return view.promptTokens
  if (lease.exact) return Math.round(view.promptTokens * (1 - lease.heldShare))
  return Math.max(0, view.promptTokens - Math.round(lease.heldBlocks * blockTokens))
}

/**
 * What exactMatch says each instance's engine reported holding of the prompt's lead, in tokens:
 * its GPU and offloaded blocks, not the pending ones. (A lead whose pending blocks come before
 * reported ones counts the latter too; a prompt's chain is reported from its start.)
 */
export function reportedLeadTokens(router: Router, view: RequestView, now: number | undefined): ((id: string) => number) | undefined {
  if (view.exact === undefined) return undefined
  const bs = router.params.exactBlockSize
  const held = new Map<string, number>()
  for (const m of router.exact.match(view.exact.ids, view.exact.seed, now)) {
    if (m.view === 'fresh') held.set(m.instance, (m.gpuBlocks + m.offloadedBlocks) * bs)
  }
  return (id) => held.get(id) ?? 0
}
