/** A line of a trace that cannot be replayed; the message names the file and line. */
export class TraceError extends Error {
  constructor(
    readonly file: string,
    readonly line: number,
    message: string,
  ) {
    super(`${file} line ${line}: ${message}`)
    this.name = 'TraceError'
  }
}
