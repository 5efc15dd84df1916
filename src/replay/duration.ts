// Durations on the command line: "1h", "30m", "90s", "1500ms", "1h30m"; a bare number is
// seconds. Returned in milliseconds.
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

export function parseDuration(text: string): number {
  const t = text.trim()
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t) * 1000
  if (t === '') return NaN
  PART.lastIndex = 0
  let ms = 0
  let end = 0
  for (let m = PART.exec(t); m !== null; m = PART.exec(t)) {
    ms += Number(m[1]) * UNIT_MS[m[2]!]!
    end = PART.lastIndex
  }
  return end === t.length ? ms : NaN
}

/** 3_600_000 → "1h", 90_000 → "1m30s", 1_500 → "1.5s". */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`
  let s = ms / 1000
  const h = Math.floor(s / 3600)
  s -= h * 3600
  const m = Math.floor(s / 60)
  s -= m * 60
  const sec = Math.round(s * 10) / 10
  return `${h > 0 ? `${h}h` : ''}${m > 0 ? `${m}m` : ''}${sec > 0 || (h === 0 && m === 0) ? `${sec}s` : ''}`
}
