// The seed of the router's own chained block hash over a prompt's token ids (the exact view).
// vLLM keys a block by its tokens, its parent and its extra keys: the LoRA adapter's name
// on every block and cache_salt on the first. The router does not trust vLLM's hashes across
// processes (they repeat only with sha256_cbor and a fixed PYTHONHASHSEED), so it hashes the
// tokens itself, seeded by the same two names: a request and the engine's BlockStored events
// then meet on one chain. The base model needs no name: an instance serves one base model.
import { xxh3 } from './hash.js'

const seeds = new Map<string, bigint>()
const MAX_SEEDS = 10_000 // salts are per tenant: keep the memo bounded

/** Seed for blocks of `lora` (undefined: the base model) under `salt` (undefined: none). */
export function exactSeed(lora: string | undefined, salt: string | undefined): bigint {
  const key = `${lora ?? ''}\0${salt ?? ''}`
  let seed = seeds.get(key)
  if (seed === undefined) {
    seed = xxh3(`prefix-router-exact\0${lora === undefined ? 0 : 1}${key}`)
    if (seeds.size >= MAX_SEEDS) seeds.clear()
    seeds.set(key, seed)
  }
  return seed
}
