// Fields set on a JSON object body without parsing it again: written after its last member, so
// that a parser keeping the last of a repeated key (Python's json, which vLLM and SGLang use;
// JSON.parse) reads ours. The client's bytes are sent as they came, plus ours: a body of
// 100k tokens is not re-serialised twice per request.

const CLOSE = 0x7d // }
const OPEN = 0x7b // {
const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09

/**
 * `body` (a JSON object's bytes, as the front validated it) with `fields` added as its last
 * members. Throws when the body does not end as an object does (the front refuses such bodies
 * before routing them, so this is a bug, not a client error).
 */
export function withFields(body: Buffer, fields: Readonly<Record<string, unknown>>): Buffer {
  let end = body.length - 1
  while (end >= 0 && isSpace(body[end]!)) end--
  if (end < 0 || body[end] !== CLOSE) throw new Error('withFields: the body is not a JSON object')
  let before = end - 1
  while (before >= 0 && isSpace(body[before]!)) before--
  const empty = before >= 0 && body[before] === OPEN
  let tail = ''
  for (const k in fields) tail += `${tail === '' && empty ? '' : ','}${JSON.stringify(k)}:${JSON.stringify(fields[k] ?? null)}`
  return Buffer.concat([body.subarray(0, end), Buffer.from(tail), body.subarray(end)])
}
