// The events an engine's prefix cache produces, in vLLM's shape (see src/fleet/events/types.ts),
// gathered during a step and taken once at its end, as vLLM's scheduler takes its block
// pool's events once per step. Only built when someone listens: with no listener the
// cache and the scheduler see null and do no work for events.
//
// What vLLM's block pool reports, and so what this reports:
// - BlockStored when full blocks of a request become cached: blocks of one sequence cached
//   in one step and consecutive in its prompt go in one event, whose parent is the block
//   before the first (null for block 0); with the tokens of those blocks, the adapter's
//   name, medium "GPU" and per block the extra keys vLLM hashes with it: the LoRA name on
//   every block, then cache_salt on block 0;
// - BlockRemoved when a cached block is reused for something else;
// - AllBlocksCleared when the prefix cache is reset.
// The engine hash is the sim's 52-bit block key, as a bigint.
import type { BlockStoredEvent, KvEvent } from '../fleet/events/types.js'
import type { Sequence } from './sequence.js'

export const GPU = 'GPU'

export class KvEventLog {
  private events: KvEvent[] = []
  /** The BlockStored being extended, its sequence and the prompt block it ends with. */
  private open: BlockStoredEvent | null = null
  private openSeq: Sequence | null = null
  private openBlock = -1
  /** vLLM's lora_int_id: adapters numbered from 1 in the order this engine first saw them. */
  private readonly loraIds = new Map<string, number>()

  constructor(private readonly blockSize: number) {}

  get size(): number {
    return this.events.length
  }

  /** Block `b` of `seq`'s prompt (key `key`) became cached. */
  stored(seq: Sequence, b: number): void {
    const bs = this.blockSize
    const req = seq.request
    const key = BigInt(seq.blockKeys[b]!)
    const ids = req.tokenIds
    const tokens = ids === undefined ? [] : Array.from(ids.subarray(b * bs, (b + 1) * bs))
    const lora = req.loraName ?? null
    const salt = b === 0 ? (req.cacheSalt ?? null) : null
    const extra: unknown[] | null = lora === null && salt === null ? null : [...(lora === null ? [] : [lora]), ...(salt === null ? [] : [salt])]
    const open = this.open
    if (open !== null && this.openSeq === seq && this.openBlock === b - 1) {
      open.blockHashes.push(key)
      for (const t of tokens) open.tokenIds.push(t)
      if (extra !== null || open.extraKeys !== null) {
        open.extraKeys ??= open.blockHashes.slice(0, -1).map(() => null)
        open.extraKeys.push(extra)
      }
      this.openBlock = b
      return
    }
    const ev: BlockStoredEvent = {
      type: 'BlockStored',
      blockHashes: [key],
      parentBlockHash: b === 0 ? null : BigInt(seq.blockKeys[b - 1]!),
      tokenIds: tokens,
      blockSize: bs,
      loraId: lora === null ? null : this.loraId(lora),
      medium: GPU,
      loraName: lora,
      extraKeys: extra === null ? null : [extra],
      groupIdx: null,
    }
    this.events.push(ev)
    this.open = ev
    this.openSeq = seq
    this.openBlock = b
  }

  /** A cached block was reused: consecutive removals share one event. */
  removed(key: number): void {
    this.close()
    const last = this.events[this.events.length - 1]
    if (last !== undefined && last.type === 'BlockRemoved') last.blockHashes.push(BigInt(key))
    else this.events.push({ type: 'BlockRemoved', blockHashes: [BigInt(key)], medium: GPU, groupIdx: null })
  }

  cleared(): void {
    this.close()
    this.events.push({ type: 'AllBlocksCleared' })
  }

  /** The events since the last take, in the order they happened. */
  take(): KvEvent[] {
    this.close()
    const out = this.events
    this.events = []
    return out
  }

  /** Drops what was not taken (a restarted process never sends it). */
  discard(): void {
    this.close()
    this.events = []
  }

  private close(): void {
    this.open = null
    this.openSeq = null
    this.openBlock = -1
  }

  private loraId(name: string): number {
    let id = this.loraIds.get(name)
    if (id === undefined) {
      id = this.loraIds.size + 1
      this.loraIds.set(name, id)
    }
    return id
  }
}
