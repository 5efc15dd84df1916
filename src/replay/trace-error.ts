import { PrefixRouterError } from '../core/errors.js'

/** A line of a trace that cannot be replayed; the message names the file and line. */
export class TraceError extends PrefixRouterError {
  declare readonly code: 'ERR_TRACE'
  constructor(
    readonly file: string,
    readonly line: number,
    message: string,
  ) {
    super('ERR_TRACE', `${file} line ${line}: ${message}`)
    this.name = 'TraceError'
  }
}

/**
 * A trace line as a JSON object, null for a blank line; anything else throws a TraceError
 * naming the line, with `expected` saying what an object must hold.
 */
export function parseObjectLine(text: string, file: string, line: number, expected: string): Record<string, unknown> | null {
  if (text.trim() === '') return null
  let obj: unknown
  try {
    obj = JSON.parse(text)
  } catch (err) {
    throw new TraceError(file, line, `not valid JSON: ${(err as Error).message}`)
  }
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) throw new TraceError(file, line, `each line must be a JSON object ${expected}`)
  return obj as Record<string, unknown>
}
