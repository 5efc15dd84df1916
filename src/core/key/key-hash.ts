// The key the consistent hash places a text by, computed as the native router does (for a
// dry run, and for replay's bookkeeping): XXH3-64 of the first prefixLength code points as
// UTF-8, seeded by the tenant id's hash. For longest_prefix with an anchor, only the text up
// to the anchor (a chat's opening) is hashed.
import { xxh3 } from '../hash.js'

/** The first n code points of s (a surrogate pair counts as one). */
export function codePointPrefix(s: string, n: number): string {
  if (s.length <= n) return s
  let units = 0
  for (let cps = 0; cps < n && units < s.length; cps++) {
    const c = s.charCodeAt(units)
    units += c >= 0xd800 && c <= 0xdbff && units + 1 < s.length ? 2 : 1
  }
  return s.slice(0, units)
}

export function keyHash(text: string, tenant: string | undefined, prefixLength: number, anchor?: number): bigint {
  const cut = codePointPrefix(text, prefixLength)
  return xxh3(anchor === undefined || anchor >= cut.length ? cut : cut.slice(0, anchor), tenant === undefined ? 0n : xxh3(tenant))
}
