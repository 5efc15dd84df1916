// The replay command's flag readers, shared by its aggregated and disaggregated runs: each
// names the flag and the value it refused.
import { CliError } from '../command-line/cli-error.js'
import { parseDuration } from '../replay/duration.js'

export function intFlag(flag: string, raw: string, min: number, max: number): number {
  const v = raw.trim() === '' ? NaN : Number(raw)
  if (!Number.isInteger(v) || v < min || v > max) throw new CliError(`--${flag} must be an integer from ${min} to ${max}; got '${raw}'`)
  return v
}

export function durationFlag(flag: string, raw: string, positive = true): number {
  const ms = parseDuration(raw)
  if (!Number.isFinite(ms) || ms < 0 || (positive && ms === 0)) {
    throw new CliError(`--${flag} must be a duration such as 1h, 30m, 90s or 500ms; got '${raw}'`)
  }
  return ms
}
