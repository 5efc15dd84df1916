import { InvalidArgTypeError, OutOfRangeError } from './errors.js'
import { native } from './native.js'

const MAX_U64 = (1n << 64n) - 1n

/**
 * XXH3-64 of `data` (bit-exact with xxHash's XXH3_64bits_withSeed). Strings are hashed
 * as their UTF-8 bytes; typed arrays are read in place, without a copy.
 */
export function xxh3(data: Uint8Array | string, seed: bigint = 0n): bigint {
  if (typeof data !== 'string' && !(data instanceof Uint8Array)) {
    throw new InvalidArgTypeError('data', 'a Uint8Array or a string', data)
  }
  if (typeof seed !== 'bigint') throw new InvalidArgTypeError('seed', 'a bigint', seed)
  if (seed < 0n || seed > MAX_U64) throw new OutOfRangeError('seed', 'from 0n to 2n ** 64n - 1n', seed)
  return native.xxh3(data, seed)
}

/**
 * Chained XXH3-64 of the full `blockBytes`-byte blocks of `data`: block i is hashed with block
 * i-1's hash as its seed (block 0 with `seed`), so each hash stands for the whole prefix up to
 * its block, as vLLM keys its prefix cache. Bytes after the last full block are ignored.
 */
export function xxh3Blocks(data: Uint8Array | string, blockBytes: number, seed: bigint = 0n): BigUint64Array {
  if (typeof data !== 'string' && !(data instanceof Uint8Array)) {
    throw new InvalidArgTypeError('data', 'a Uint8Array or a string', data)
  }
  if (typeof blockBytes !== 'number' || !Number.isInteger(blockBytes) || blockBytes < 1 || blockBytes > 1 << 20) {
    throw new OutOfRangeError('blockBytes', 'an integer from 1 to 1048576', blockBytes)
  }
  if (typeof seed !== 'bigint') throw new InvalidArgTypeError('seed', 'a bigint', seed)
  if (seed < 0n || seed > MAX_U64) throw new OutOfRangeError('seed', 'from 0n to 2n ** 64n - 1n', seed)
  const bytes = typeof data === 'string' ? Buffer.byteLength(data) : data.length
  const out = new BigUint64Array(Math.floor(bytes / blockBytes))
  native.xxh3_chain(data, blockBytes, seed, out)
  return out
}
