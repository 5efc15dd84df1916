// vLLM's KV-event payloads (the msgpack frame of each ZeroMQ message) to KvEventBatch and
// back. vLLM encodes them with msgspec: an EventBatch {ts, events, data_parallel_rank} and
// events as tagged structs, both with omit_defaults (fields that have a default and equal it
// are left out). Current vLLM writes structs as maps, the tag under "type"; older vLLM wrote
// them as arrays, the tag first, and dropped trailing defaulted fields. Both are read here,
// at batch and at event level, and fields a newer vLLM adds are ignored.
//
// Decoding is tolerant of what it can skip (an unknown event type, a malformed event: the
// rest of the batch still counts) and strict about what it cannot: a payload that is not a
// batch throws KvEventDecodeError, never anything else, whatever the bytes.
import { PrefixRouterError } from '../../core/errors.js'
import { C1, Unpackr } from 'msgpackr'
import { MsgpackWriter } from './msgpack-writer.js'
import type {
  AllBlocksClearedEvent,
  BlockRemovedEvent,
  BlockStoredEvent,
  EngineBlockHash,
  KvEvent,
  KvEventBatch,
  KvEventEncoding,
} from './types.js'

export type KvEventDecodeErrorCode =
  /** Not valid MessagePack: truncated, garbage, or bytes left after the value. */
  | 'bad_msgpack'
  /** Valid MessagePack, but neither a batch map nor a batch array. */
  | 'not_a_batch'
  /** A batch whose ts, events or data_parallel_rank has the wrong type. */
  | 'bad_batch_field'

export class KvEventDecodeError extends PrefixRouterError {
  declare readonly code: KvEventDecodeErrorCode
  constructor(code: KvEventDecodeErrorCode, message: string) {
    super(code, message)
    this.name = 'KvEventDecodeError'
  }
}

/** A decoded batch, with how many of its events were left out and why. */
export interface DecodedBatch extends KvEventBatch {
  /** Events of a type this version does not know (a newer vLLM's): skipped. */
  skipped: number
  /**
   * Events of a known type whose fields are missing, of the wrong type or out of range (a
   * BlockStored with no blocks, tokens not blockSize per block, block_size 0, a negative
   * lora_id or group_idx, a token id outside 0..2^32-1): dropped.
   */
  undecodable: number
}

// Maps as Map (keys of any type, no prototype games), 64-bit integers as bigint, byte
// strings copied out of the frame (a hash must not pin the whole payload).
const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: false, int64AsType: 'bigint', copyBuffers: true })

const TYPES = ['BlockStored', 'BlockRemoved', 'AllBlocksCleared'] as const

export function decodeBatch(payload: Uint8Array): DecodedBatch {
  if (!(payload instanceof Uint8Array)) throw new KvEventDecodeError('bad_msgpack', 'the payload is not bytes')
  if (payload.length === 0) throw new KvEventDecodeError('bad_msgpack', 'the payload is empty')
  let root: unknown
  try {
    const values = unpackr.unpackMultiple(payload)
    if (values.length !== 1) throw new Error(`${values.length} values in one payload`)
    root = values[0]
    if (root === C1) throw new Error('0xc1 is a reserved byte') // msgpackr returns a marker for it
  } catch (err) {
    throw new KvEventDecodeError('bad_msgpack', `the payload is not one MessagePack value: ${(err as Error)?.message ?? String(err)}`)
  }
  let ts: unknown
  let events: unknown
  let rank: unknown
  if (root instanceof Map) {
    ts = root.get('ts')
    events = root.get('events')
    rank = root.get('data_parallel_rank')
  } else if (Array.isArray(root)) {
    ;[ts, events, rank] = root
  } else {
    throw new KvEventDecodeError('not_a_batch', `the payload is a ${describe(root)}, not an event batch (a map or an array)`)
  }
  if (typeof ts === 'bigint') ts = Number(ts)
  if (typeof ts !== 'number' || !Number.isFinite(ts)) throw new KvEventDecodeError('bad_batch_field', `the batch's ts is a ${describe(ts)}, not a number`)
  if (!Array.isArray(events)) throw new KvEventDecodeError('bad_batch_field', `the batch's events are a ${describe(events)}, not an array`)
  const dataParallelRank = rank === undefined || rank === null ? null : int(rank)
  if (dataParallelRank === undefined) {
    throw new KvEventDecodeError('bad_batch_field', `the batch's data_parallel_rank is a ${describe(rank)}, not an integer`)
  }
  const out: KvEvent[] = []
  let skipped = 0
  let undecodable = 0
  for (const raw of events) {
    const tag = tagOf(raw)
    if (tag === undefined) {
      undecodable++
      continue
    }
    if (!(TYPES as readonly string[]).includes(tag)) {
      skipped++
      continue
    }
    const ev = decodeEvent(tag as (typeof TYPES)[number], raw as Map<unknown, unknown> | unknown[])
    if (ev === undefined) undecodable++
    else out.push(ev)
  }
  return { ts, events: out, dataParallelRank, skipped, undecodable }
}

function tagOf(raw: unknown): string | undefined {
  if (raw instanceof Map) {
    const t = raw.get('type')
    return typeof t === 'string' ? t : undefined
  }
  if (Array.isArray(raw) && typeof raw[0] === 'string') return raw[0]
  return undefined
}

// Field order of each struct, as vLLM declares it (the array encoding's positions after the tag).
const STORED_FIELDS = ['block_hashes', 'parent_block_hash', 'token_ids', 'block_size', 'lora_id', 'medium', 'lora_name', 'extra_keys', 'group_idx'] as const
const REMOVED_FIELDS = ['block_hashes', 'medium', 'group_idx'] as const

/** A field by name (map form) or position (array form); undefined when absent. */
function field(raw: Map<unknown, unknown> | unknown[], fields: readonly string[], name: string): unknown {
  if (raw instanceof Map) return raw.get(name)
  return raw[1 + fields.indexOf(name)]
}

// Each helper returns undefined for a value of the wrong type; absent optional fields are null.
function decodeEvent(tag: (typeof TYPES)[number], raw: Map<unknown, unknown> | unknown[]): KvEvent | undefined {
  if (tag === 'AllBlocksCleared') return { type: 'AllBlocksCleared' } satisfies AllBlocksClearedEvent
  if (tag === 'BlockRemoved') {
    const f = (n: string): unknown => field(raw, REMOVED_FIELDS, n)
    const blockHashes = hashes(f('block_hashes'))
    const medium = optString(f('medium'))
    const groupIdx = optInt(f('group_idx'))
    if (blockHashes === undefined || medium === undefined || groupIdx === undefined) return undefined
    return { type: 'BlockRemoved', blockHashes, medium, groupIdx } satisfies BlockRemovedEvent
  }
  const f = (n: string): unknown => field(raw, STORED_FIELDS, n)
  const blockHashes = hashes(f('block_hashes'))
  const p = f('parent_block_hash')
  const parentBlockHash = p === undefined || p === null ? null : hash(p)
  const tokenIds = tokens(f('token_ids'))
  const blockSize = int(f('block_size'))
  const loraId = optInt(f('lora_id'))
  const medium = optString(f('medium'))
  const loraName = optString(f('lora_name'))
  const extraKeys = optExtraKeys(f('extra_keys'))
  const groupIdx = optInt(f('group_idx'))
  if (
    blockHashes === undefined ||
    parentBlockHash === undefined ||
    tokenIds === undefined ||
    blockSize === undefined ||
    blockSize < 1 ||
    // No blocks, or tokens that are not blockSize per block: nothing the index can hash.
    blockHashes.length === 0 ||
    tokenIds.length !== blockHashes.length * blockSize ||
    loraId === undefined ||
    (loraId !== null && loraId < 0) ||
    medium === undefined ||
    loraName === undefined ||
    extraKeys === undefined ||
    groupIdx === undefined ||
    (groupIdx !== null && groupIdx < 0)
  ) {
    return undefined
  }
  return {
    type: 'BlockStored',
    blockHashes,
    parentBlockHash,
    tokenIds,
    blockSize,
    loraId,
    medium,
    loraName,
    extraKeys,
    groupIdx,
  } satisfies BlockStoredEvent
}

/** Every integer hash becomes a bigint (one key type for the index, 64-bit values exact). */
function hash(v: unknown): EngineBlockHash | undefined {
  if (typeof v === 'bigint') return v
  if (typeof v === 'number') return Number.isSafeInteger(v) ? BigInt(v) : undefined
  if (v instanceof Uint8Array) return v
  return undefined
}

function hashes(v: unknown): EngineBlockHash[] | undefined {
  if (!Array.isArray(v)) return undefined
  const out: EngineBlockHash[] = []
  for (const x of v) {
    const h = hash(x)
    if (h === undefined) return undefined
    out.push(h)
  }
  return out
}

/** The largest token id: the index holds tokens as uint32, so a larger one would wrap into another token. */
const MAX_TOKEN_ID = 0xffff_ffff

function tokens(v: unknown): number[] | undefined {
  if (!Array.isArray(v)) return undefined
  for (let i = 0; i < v.length; i++) {
    const t = v[i]
    if (typeof t === 'number' && Number.isInteger(t) && t >= 0 && t <= MAX_TOKEN_ID) continue
    // A 64-bit integer on the wire comes as a bigint, whatever its value.
    if (typeof t === 'bigint' && t >= 0n && t <= BigInt(MAX_TOKEN_ID)) v[i] = Number(t)
    else return undefined
  }
  return v as number[]
}

function int(v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isSafeInteger(v) ? v : undefined
  if (typeof v === 'bigint' && v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(v)
  return undefined
}

function optInt(v: unknown): number | null | undefined {
  return v === undefined || v === null ? null : int(v)
}

function optString(v: unknown): string | null | undefined {
  if (v === undefined || v === null) return null
  return typeof v === 'string' ? v : undefined
}

function optExtraKeys(v: unknown): (unknown[] | null)[] | null | undefined {
  if (v === undefined || v === null) return null
  if (!Array.isArray(v)) return undefined
  for (const k of v) if (k !== null && !Array.isArray(k)) return undefined
  return v as (unknown[] | null)[]
}

function describe(v: unknown): string {
  if (v === null || v === undefined) return 'nil'
  if (v instanceof Map) return 'map'
  if (Array.isArray(v)) return 'array'
  if (v instanceof Uint8Array) return 'byte string'
  return typeof v
}

/**
 * A batch as vLLM writes it: ts a float64, integers in their smallest form, structs as
 * maps (current vLLM) or tagged arrays (older vLLM), fields equal to their default (None)
 * left out: any of them in the map form, trailing ones in the array form.
 */
export function encodeBatch(batch: KvEventBatch, encoding: KvEventEncoding): Uint8Array {
  if (encoding !== 'map' && encoding !== 'array') throw new RangeError(`encoding must be 'map' or 'array'; got ${JSON.stringify(encoding)}`)
  const w = new MsgpackWriter()
  const rank = batch.dataParallelRank
  if (encoding === 'map') {
    w.mapHeader(rank === null ? 2 : 3)
    w.str('ts')
    w.float64(batch.ts)
    w.str('events')
  } else {
    w.arrayHeader(rank === null ? 2 : 3)
    w.float64(batch.ts)
  }
  w.arrayHeader(batch.events.length)
  for (const ev of batch.events) writeEvent(w, ev, encoding)
  if (rank !== null) {
    if (encoding === 'map') w.str('data_parallel_rank')
    w.int(rank)
  }
  return w.bytes()
}

type Field = [name: string, value: unknown, write: (w: MsgpackWriter, v: never) => void, hasDefault: boolean]

function writeEvent(w: MsgpackWriter, ev: KvEvent, encoding: KvEventEncoding): void {
  let fields: Field[]
  if (ev.type === 'BlockStored') {
    fields = [
      ['block_hashes', ev.blockHashes, writeHashes, false],
      ['parent_block_hash', ev.parentBlockHash, writeOptHash, false],
      ['token_ids', ev.tokenIds, writeInts, false],
      ['block_size', ev.blockSize, writeInt, false],
      ['lora_id', ev.loraId, writeOptInt, false],
      ['medium', ev.medium, writeOptStr, false],
      ['lora_name', ev.loraName, writeOptStr, false],
      ['extra_keys', ev.extraKeys, writeAny, true],
      ['group_idx', ev.groupIdx, writeOptInt, true],
    ]
  } else if (ev.type === 'BlockRemoved') {
    fields = [
      ['block_hashes', ev.blockHashes, writeHashes, false],
      ['medium', ev.medium, writeOptStr, false],
      ['group_idx', ev.groupIdx, writeOptInt, true],
    ]
  } else if (ev.type === 'AllBlocksCleared') {
    fields = []
  } else {
    throw new TypeError(`unknown KV event type ${JSON.stringify((ev as { type?: unknown }).type)}`)
  }
  if (encoding === 'map') {
    const kept = fields.filter(([, v, , d]) => !(d && v === null))
    w.mapHeader(kept.length + 1)
    w.str('type')
    w.str(ev.type)
    for (const [name, v, write] of kept) {
      w.str(name)
      write(w, v as never)
    }
    return
  }
  let n = fields.length
  while (n > 0 && fields[n - 1]![3] && fields[n - 1]![1] === null) n--
  w.arrayHeader(n + 1)
  w.str(ev.type)
  for (let i = 0; i < n; i++) fields[i]![2](w, fields[i]![1] as never)
}

function writeHash(w: MsgpackWriter, h: EngineBlockHash): void {
  if (h instanceof Uint8Array) w.bin(h)
  else w.int(h)
}

function writeHashes(w: MsgpackWriter, hs: EngineBlockHash[]): void {
  w.arrayHeader(hs.length)
  for (const h of hs) writeHash(w, h)
}

function writeOptHash(w: MsgpackWriter, h: EngineBlockHash | null): void {
  if (h === null) w.nil()
  else writeHash(w, h)
}

function writeInts(w: MsgpackWriter, v: number[]): void {
  w.arrayHeader(v.length)
  for (const x of v) w.int(x)
}

function writeInt(w: MsgpackWriter, v: number): void {
  w.int(v)
}

function writeOptInt(w: MsgpackWriter, v: number | null): void {
  if (v === null) w.nil()
  else w.int(v)
}

function writeOptStr(w: MsgpackWriter, v: string | null): void {
  if (v === null) w.nil()
  else w.str(v)
}

function writeAny(w: MsgpackWriter, v: unknown): void {
  w.any(v)
}
