// vLLM names a block by its own hash: an integer (up to 64 bits) or bytes (sha256 hashers).
// The native index keys the engine's names by 64 bits: an integer as it is, bytes by their
// XXH3. Two different byte hashes meeting on 64 bits is a 2^-64 chance per pair, and costs at
// most one wrong removal in one instance's view.
import { xxh3 } from '../../core/hash.js'
import type { EngineBlockHash } from './types.js'

export function engineHashKey(h: EngineBlockHash): bigint {
  return typeof h === 'bigint' ? BigInt.asUintN(64, h) : xxh3(h)
}

export function engineHashKeys(list: readonly EngineBlockHash[], n = list.length): BigUint64Array {
  const out = new BigUint64Array(n)
  for (let i = 0; i < n; i++) out[i] = engineHashKey(list[i]!)
  return out
}
