// The block size an engine publishes, when it is not the router's. Every block stored in
// another size is refused (the router's hashes of its tokens would never meet a request's),
// so such an engine's view stays empty whatever it caches: trusting it would send its
// prompts elsewhere. Blocks of another KV-cache group are left out: a hybrid model's other
// groups may use other sizes, and they are skipped anyway.
import type { KvEventBatch } from './types.js'

/** The first block size in `batch` other than `blockSize` (group 0 only), or undefined. */
export function foreignBlockSize(batch: KvEventBatch, blockSize: number): number | undefined {
  for (const ev of batch.events) {
    if (ev.type !== 'BlockStored' || (ev.groupIdx !== null && ev.groupIdx !== 0)) continue
    if (ev.blockSize !== blockSize) return ev.blockSize
  }
  return undefined
}
