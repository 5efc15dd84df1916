// "Did you mean ...?" for names a user typed: flags, environment variables, config keys.
// A restricted Damerau-Levenshtein distance (a swap of two neighbours counts as one edit),
// because the usual slips are a missing, extra or swapped letter.

export function editDistance(a: string, b: string): number {
  const rows = a.length + 1
  const cols = b.length + 1
  const d: number[] = new Array<number>(rows * cols).fill(0)
  for (let i = 0; i < rows; i++) d[i * cols] = i
  for (let j = 0; j < cols; j++) d[j] = j
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let v = Math.min(d[(i - 1) * cols + j]! + 1, d[i * cols + j - 1]! + 1, d[(i - 1) * cols + j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[(i - 2) * cols + j - 2]! + 1)
      d[i * cols + j] = v
    }
  }
  return d[rows * cols - 1]!
}

/**
 * The candidate closest to `input`, if it is close enough to be what was meant: within a
 * third of the input's length in edits (at least 2), compared without case; or else the only
 * candidate that the input begins (`--sim` for `--sim-instances`).
 */
export function suggest(input: string, candidates: Iterable<string>): string | undefined {
  const want = input.toLowerCase()
  let best: string | undefined
  let bestD = Infinity
  const starts: string[] = []
  for (const c of candidates) {
    const d = editDistance(want, c.toLowerCase())
    if (d < bestD) {
      best = c
      bestD = d
    }
    if (want.length >= 3 && c.toLowerCase().startsWith(want)) starts.push(c)
  }
  if (best !== undefined && bestD <= Math.max(2, Math.floor(want.length / 3))) return best
  return starts.length === 1 ? starts[0] : undefined
}

/** `; did you mean X?`, or nothing. */
export function didYouMean(input: string, candidates: Iterable<string>, show: (s: string) => string = (s) => s): string {
  const s = suggest(input, candidates)
  return s === undefined ? '' : `; did you mean ${show(s)}?`
}
