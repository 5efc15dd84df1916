// Values a client chooses (a model or adapter name, an endpoint name, a path) as the router
// repeats them in an answer or a log line: whole when short, else a prefix and the length.
// Repeated whole, a value of megabytes made an answer and a log line of as many, and the
// event loop stood still while they were built and written.
import { RequestError } from './errors.js'

/** The longest model (or adapter) name a request may give; a longer one is refused (400 model_too_long). */
export const MAX_MODEL_CHARS = 1024

/** Characters of a client's value repeated before it is cut: more than a real model name or route path has. */
export const ECHO_CHARS = 128

/** `value` as the router repeats it: whole up to ECHO_CHARS characters, else its first ECHO_CHARS and its length. */
export function echo(value: string): string {
  if (value.length <= ECHO_CHARS) return value
  // Not cut between the halves of a surrogate pair, which would leave half a character.
  const cut = (value.charCodeAt(ECHO_CHARS - 1) & 0xfc00) === 0xd800 ? ECHO_CHARS - 1 : ECHO_CHARS
  return `${value.slice(0, cut)}... (${value.length} characters)`
}

export const modelTooLong = (length: number) =>
  new RequestError('model_too_long', `'model' is ${length} characters long; a model name has at most ${MAX_MODEL_CHARS}`, 400)
