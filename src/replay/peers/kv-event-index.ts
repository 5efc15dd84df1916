// The index both event-fed peers (llm-d's precise scorer, Dynamo's KV router) keep: per pod,
// which blocks its engine holds, learnt only from the engine's KV events. Like both of them,
// it keys a block by its own hash of the block's token ids chained from its parent's key
// (llm-d-kv-cache's ChunkedTokenDatabase, Dynamo's compute_block_hash_for_seq), not by the
// engine's hash: the engine's hash is only the handle BlockRemoved and the next BlockStored's
// parent name it by, mapped per pod to the key it was stored under. A request's blocks are
// then keyed the same way from its token ids, and a pod's match is the count of the
// request's leading blocks it holds.
//
// Simplifications: XXH3 chained over the tokens' 4 little-endian bytes (our native chain)
// instead of llm-d's FNV/SHA-256 or Dynamo's XXH3 with its own seed layout (any good 64-bit
// hash routes the same); only GPU blocks (tier 0) are indexed, since the simulated engines
// offload nothing; the index is unbounded (llm-d's default in-memory index holds 10^8 keys,
// Dynamo's radix tree has no bound), which no replay comes near.
import { xxh3, xxh3Blocks } from '../../core/hash.js'
import { native } from '../../core/native.js'
import { mediumTier, type BlockStoredEvent, type EngineBlockHash, type KvEvent } from '../../fleet/events/types.js'

/** The key of a block: the low 52 bits of its chained hash, exact as a double. */
type Key = number

interface Stored {
  key: Key
  /** The whole 64-bit hash: the seed of the next block's. */
  hash: bigint
}

class PodBlocks {
  /** Engine hash → the block it names. */
  readonly byEngine = new Map<bigint | string, Stored>()
  /** Key → how many engine blocks hold it (two engine hashes can carry the same tokens). */
  readonly keys = new Map<Key, number>()

  add(engine: bigint | string, s: Stored): void {
    const old = this.byEngine.get(engine)
    if (old !== undefined) this.drop(old.key)
    this.byEngine.set(engine, s)
    this.keys.set(s.key, (this.keys.get(s.key) ?? 0) + 1)
  }

  remove(engine: bigint | string): void {
    const s = this.byEngine.get(engine)
    if (s === undefined) return
    this.byEngine.delete(engine)
    this.drop(s.key)
  }

  private drop(key: Key): void {
    const n = this.keys.get(key) ?? 0
    if (n <= 1) this.keys.delete(key)
    else this.keys.set(key, n - 1)
  }
}

export class KvEventIndex {
  private readonly pods: PodBlocks[]
  /** Events the index could not place: a parent it never saw stored, or tokens that do not fill the blocks. */
  skipped = 0

  constructor(
    pods: number,
    /** Tokens per block: the engines' block size, as both peers require it to be configured. */
    readonly blockSize: number,
    /** Names the hash chain (each peer seeds its own). */
    private readonly name: string,
  ) {
    this.pods = Array.from({ length: pods }, () => new PodBlocks())
  }

  /** The chain's seed for a model (or adapter) and an optional cache_salt. */
  seed(model: string, salt: string | undefined): bigint {
    return xxh3(`${this.name}\0${model}\0${salt ?? ''}`)
  }

  /** Applies one batch of pod `pod`'s events, in order. */
  apply(pod: number, events: readonly KvEvent[], model: string): void {
    const p = this.pods[pod]
    if (p === undefined) throw new RangeError(`pod must be from 0 to ${this.pods.length - 1}; got ${pod}`)
    for (const ev of events) {
      if (ev.type === 'AllBlocksCleared') this.pods[pod] = new PodBlocks()
      else if (ev.type === 'BlockRemoved') {
        if (mediumTier(ev.medium) !== 0) continue
        for (const h of ev.blockHashes) this.pods[pod]!.remove(handle(h))
      } else this.stored(this.pods[pod]!, ev, model)
    }
  }

  private stored(p: PodBlocks, ev: BlockStoredEvent, model: string): void {
    const bs = ev.blockSize
    if (mediumTier(ev.medium) !== 0) return
    if (bs !== this.blockSize || ev.tokenIds.length !== ev.blockHashes.length * bs) {
      this.skipped++
      return
    }
    let seed: bigint
    if (ev.parentBlockHash === null) {
      // Block 0 carries the adapter's name and cache_salt among its extra keys.
      const extra = ev.extraKeys?.[0] ?? null
      const salt = extra?.find((k) => typeof k === 'string' && k !== ev.loraName) as string | undefined
      seed = this.seed(ev.loraName ?? model, salt)
    } else {
      const parent = p.byEngine.get(handle(ev.parentBlockHash))
      if (parent === undefined) {
        this.skipped++
        return
      }
      seed = parent.hash
    }
    const hashes = xxh3Blocks(tokenBytes(Uint32Array.from(ev.tokenIds)), bs * 4, seed)
    const words = new Uint32Array(hashes.buffer)
    for (let i = 0; i < hashes.length; i++) p.add(handle(ev.blockHashes[i]!), { key: low52(words, i), hash: hashes[i]! })
  }

  /** The keys of a request's full blocks, from its token ids. */
  requestKeys(tokenIds: Uint32Array, seed: bigint): Float64Array {
    const bytes = tokenBytes(tokenIds)
    const out = new Float64Array(Math.floor(tokenIds.length / this.blockSize))
    native.xxh3_chain(bytes, this.blockSize * 4, seed, out)
    return out
  }

  /** Per pod, how many of `keys`' leading blocks it holds (consecutive from the first). */
  longestPrefix(keys: Float64Array, pods: readonly number[]): Map<number, number> {
    const out = new Map<number, number>()
    for (const pod of pods) {
      const held = this.pods[pod]!.keys
      let n = 0
      while (n < keys.length && held.has(keys[n]!)) n++
      out.set(pod, n)
    }
    return out
  }

  /** Whether pod `pod` holds the block with key `key`. */
  has(pod: number, key: number): boolean {
    return this.pods[pod]!.keys.has(key)
  }

  /** Blocks pod `pod` holds (Dynamo's tree size, its tie-break). */
  size(pod: number): number {
    return this.pods[pod]!.keys.size
  }
}

/** A Map key for an engine hash: the integer itself, or the bytes in hex (sha256 hashers). */
function handle(h: EngineBlockHash): bigint | string {
  return typeof h === 'bigint' ? h : Buffer.from(h.buffer, h.byteOffset, h.byteLength).toString('hex')
}

/** Token ids as the bytes hashed: 4 little-endian bytes each (the platform is little-endian). */
function tokenBytes(ids: Uint32Array): Uint8Array {
  return new Uint8Array(ids.buffer, ids.byteOffset, ids.byteLength)
}

/** The low 52 bits of the i-th uint64 of `words` (its little-endian 32-bit halves), as native xxh3_chain writes them. */
function low52(words: Uint32Array, i: number): number {
  return (words[2 * i + 1]! & 0xfffff) * 0x1_0000_0000 + words[2 * i]!
}
