// The check every 64-bit argument passes before it reaches the addon (seeds, engine hashes).
import { InvalidArgTypeError, OutOfRangeError } from './errors.js'

export const MAX_U64 = (1n << 64n) - 1n

export function checkU64(key: string, v: unknown): bigint {
  if (typeof v !== 'bigint') throw new InvalidArgTypeError(key, 'a bigint from 0n to 2n ** 64n - 1n', v)
  if (v < 0n || v > MAX_U64) throw new OutOfRangeError(key, 'from 0n to 2n ** 64n - 1n', v)
  return v
}
