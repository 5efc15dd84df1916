// Replaying your own traffic: a JSONL trace, one request per line.
//
// Each line is an OpenAI request body, exactly as a client sent it, plus:
//   "timestamp"  required. A number of milliseconds (any origin: epoch or the start of a
//                capture) or an ISO 8601 date string. The first request arrives at 0 and
//                the others keep their offsets from it; timestamps must not decrease,
//                and are all numbers or all dates.
//   "tenant"     optional. The X-Amzn-SageMaker-Prefix-Aware-Id header it carried.
//   "api"        optional. "chat" or "completions"; by default a body with "messages" is
//                a chat request and one with "prompt" a completions request.
// These three keys are removed before the body is routed and served. Blank lines are
// skipped. For example:
//   {"timestamp": 0, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64}
//   {"timestamp": 250, "tenant": "acme", "model": "m", "prompt": "Once"}
//
// The other format, `hash-ids` (production trace releases: lengths and block ids, no text),
// is parsed in src/replay/hash-id-trace.ts; both are read here, synchronously, so that a
// closed-loop replay can draw from them (src/replay/line-reader.ts).
import type { OpenAIApi } from '../core/key/openai-key.js'
import { routingKey } from '../core/key/index.js'
import { parseChatRequest, parseCompletionRequest } from '../sim/openai-shapes.js'
import type { TokenizerName } from '../sim/tokenizers/index.js'
import { BlockTexts } from './block-text.js'
import { hashIdRequest, parseHashIdLine } from './hash-id-trace.js'
import { readLinesSync } from './line-reader.js'
import { parseObjectLine, TraceError } from './trace-error.js'
import type { TimedRequest } from './types.js'

export { TraceError }

/**
 * How the lines of a trace are written: OpenAI bodies, or block ids of `blockTokens` tokens.
 * A hash-id trace's text is made for the tokenizer the simulator counts with (its blocks
 * are exactly blockTokens tokens under that one only), so it is part of the format.
 */
export type TraceFormat = { kind: 'openai' } | { kind: 'hash-ids'; blockTokens: number; tokenizer: TokenizerName }

export const OPENAI_TRACE: TraceFormat = { kind: 'openai' }

/** Parses one line (1-based `line` for messages); null for a blank line. */
export function parseTraceLine(text: string, file: string, line: number): { timestamp: number; iso: boolean; request: Omit<TimedRequest, 'at'> } | null {
  const obj = parseObjectLine(text, file, line, '(an OpenAI request body)')
  if (obj === null) return null
  const fail = (m: string): never => {
    throw new TraceError(file, line, m)
  }
  const { timestamp, tenant, api: apiField, ...body } = obj
  let ts: number
  if (typeof timestamp === 'number' && Number.isFinite(timestamp)) ts = timestamp
  else if (typeof timestamp === 'string' && !Number.isNaN(Date.parse(timestamp))) ts = Date.parse(timestamp)
  else return fail(`"timestamp" must be a number of milliseconds or an ISO 8601 date; got ${JSON.stringify(timestamp)}`)
  let api: OpenAIApi
  if (apiField === undefined) api = body.messages !== undefined ? 'chat' : 'completions'
  else if (apiField === 'chat' || apiField === 'completions') api = apiField
  else return fail(`"api" must be "chat" or "completions"; got ${JSON.stringify(apiField)}`)
  if (tenant !== undefined && typeof tenant !== 'string') return fail(`"tenant" must be a string; got ${JSON.stringify(tenant)}`)
  // The two checks a request meets on its way: the router's (routing text, tenant id)
  // and the server's (vLLM's request validation), so a replay fails here, not midway.
  try {
    routingKey(JSON.stringify(body), { api, prefixLength: 1024, tenant })
    if (api === 'chat') parseChatRequest(body)
    else parseCompletionRequest(body)
  } catch (err) {
    return fail((err as Error).message)
  }
  return { timestamp: ts, iso: typeof timestamp === 'string', request: tenant === undefined ? { api, body } : { api, body, tenant } }
}

export interface TraceSummary {
  requests: number
  /** Last arrival, ms after the first. */
  spanMs: number
}

/**
 * Reads the whole trace once, checking every line; the replay then streams it again. A
 * hash-id trace's prompts are not built here: its lines are checked, not turned into text.
 */
export async function checkTrace(path: string, format: TraceFormat = OPENAI_TRACE): Promise<TraceSummary> {
  let requests = 0
  let first = NaN
  let last = NaN
  const parse = (text: string, file: string, line: number): { timestamp: number } | null =>
    format.kind === 'openai' ? parseTraceLine(text, file, line) : parseHashIdLine(text, file, line, format.blockTokens)
  for (const r of timed(path, parse)) {
    if (requests === 0) first = r.at
    last = r.at
    requests++
  }
  if (requests === 0) throw new TraceError(path, 1, 'the trace has no requests')
  return { requests, spanMs: last - first }
}

/**
 * The trace's requests in order, arrival times relative to the first. Synchronous (a
 * closed loop draws from it inside the simulation); the file is streamed, and a hash-id
 * trace's block texts are kept in a bounded cache, so memory does not grow with the trace.
 */
export function* readTrace(path: string, format: TraceFormat = OPENAI_TRACE): Generator<TimedRequest, void, undefined> {
  if (format.kind === 'openai') {
    for (const r of timed(path, parseTraceLine)) yield { at: r.at, ...r.parsed.request }
    return
  }
  const texts = new BlockTexts(format.blockTokens, format.tokenizer)
  for (const r of timed(path, (text, file, line) => parseHashIdLine(text, file, line, format.blockTokens))) {
    yield { at: r.at, ...hashIdRequest(r.parsed, texts) }
  }
}

const timestampForm = (iso: boolean) => (iso ? 'an ISO 8601 date' : 'a number of milliseconds')

/**
 * Parsed lines with arrival times relative to the first; blank lines skipped, order checked,
 * and every timestamp given the same way (`iso`): a number on any origin beside a date would
 * be decades apart, a replay of nothing for that long.
 */
function* timed<T extends { timestamp: number; iso?: boolean }>(
  path: string,
  parse: (text: string, file: string, line: number) => T | null,
): Generator<{ at: number; parsed: T }, void, undefined> {
  let n = 0
  let origin = NaN
  let prev = -Infinity
  let first: { line: number; iso: boolean } | undefined
  for (const text of readLinesSync(path)) {
    n++
    const parsed = parse(text, path, n)
    if (parsed === null) continue
    const iso = parsed.iso === true
    first ??= { line: n, iso }
    if (iso !== first.iso) {
      throw new TraceError(path, n, `"timestamp" is ${timestampForm(iso)} here but ${timestampForm(first.iso)} on line ${first.line}; a trace gives every timestamp the same way`)
    }
    if (Number.isNaN(origin)) origin = parsed.timestamp
    const at = parsed.timestamp - origin
    // Equal timestamps are fine: real traces are cut to the millisecond and have ties.
    if (at < prev) throw new TraceError(path, n, `timestamps must not decrease (${at} ms after the first request, after ${prev} ms)`)
    prev = at
    yield { at, parsed }
  }
}
