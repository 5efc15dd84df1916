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
