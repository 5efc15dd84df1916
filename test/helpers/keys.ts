import { randomBytes } from 'node:crypto'

/** n random 8-byte prefixes (a fixed-size pool, sliced without copying). */
export function randomKeys(n: number): Uint8Array[] {
  const pool = randomBytes(n * 8)
  const keys: Uint8Array[] = new Array(n)
  for (let i = 0; i < n; i++) keys[i] = pool.subarray(i * 8, i * 8 + 8)
  return keys
}

export const ids = (n: number, prefix = 'http://10.0.0.') => Array.from({ length: n }, (_, i) => `${prefix}${i + 1}:8000`)
