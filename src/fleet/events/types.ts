// vLLM's KV-cache events (vllm/distributed/kv_events.py) as the router holds them once
// decoded: one batch per ZeroMQ message, each with the events of one engine step. Field
// names follow vLLM's, in camelCase. The codec (codec.ts) reads both encodings vLLM has
// used: each event a tagged array (before June 2026) or a map with a `type` key (since).

/** vLLM's ExternalBlockHash: an integer (64-bit, as a bigint) or bytes (sha256 hashers). */
export type EngineBlockHash = bigint | Uint8Array

export interface BlockStoredEvent {
  type: 'BlockStored'
  blockHashes: EngineBlockHash[]
  parentBlockHash: EngineBlockHash | null
  /** The tokens of every block in blockHashes, in order: blockHashes.length × blockSize ids. */
  tokenIds: number[]
  blockSize: number
  loraId: number | null
  /** 'GPU' (null means GPU), 'CPU' for CPU offloading, or a connector's name (LMCache). */
  medium: string | null
  loraName: string | null
  /** Per block: the extra keys vLLM hashed with it (LoRA name, multimodal ids, cache_salt on block 0). */
  extraKeys: (unknown[] | null)[] | null
  /** KV-cache group (hybrid models); null or 0 for the full-attention group. */
  groupIdx: number | null
}

export interface BlockRemovedEvent {
  type: 'BlockRemoved'
  blockHashes: EngineBlockHash[]
  medium: string | null
  groupIdx: number | null
}

export interface AllBlocksClearedEvent {
  type: 'AllBlocksCleared'
}

export type KvEvent = BlockStoredEvent | BlockRemovedEvent | AllBlocksClearedEvent

export interface KvEventBatch {
  /** Engine wall-clock time of the step, seconds since the epoch (a float). */
  ts: number
  events: KvEvent[]
  dataParallelRank: number | null
}

/** How batches are encoded on the wire: vLLM's current maps, or the older tagged arrays. */
export type KvEventEncoding = 'map' | 'array'

/** The index tier a medium goes to: GPU blocks (0) and offloaded blocks (1) are kept apart. */
export function mediumTier(medium: string | null): 0 | 1 {
  return medium === null || medium.toUpperCase() === 'GPU' ? 0 : 1
}
