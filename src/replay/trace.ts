// Replaying your own traffic: a JSONL trace, one request per line.
//
// Each line is an OpenAI request body, exactly as a client sent it, plus:
//   "timestamp"  required. A number of milliseconds (any origin: epoch or the start of a
//                capture) or an ISO 8601 date string. The first request arrives at 0 and
//                the others keep their offsets from it; timestamps must not decrease.
//   "tenant"     optional. The X-Amzn-SageMaker-Prefix-Aware-Id header it carried.
//   "api"        optional. "chat" or "completions"; by default a body with "messages" is
//                a chat request and one with "prompt" a completions request.
// These three keys are removed before the body is routed and served. Blank lines are
// skipped. For example:
//   {"timestamp": 0, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64}
//   {"timestamp": "2025-06-01T12:00:00.250Z", "tenant": "acme", "model": "m", "prompt": "Once"}
import { createReadStream } from 'node:fs'
import { createInterface } from 'node:readline'
import type { OpenAIApi } from '../prefix/openai-key.js'
import { openAIRequest } from '../prefix/openai-key.js'
import { tenantOf } from '../prefix/tenant.js'
import { parseChatRequest, parseCompletionRequest } from '../sim/openai-shapes.js'
import type { TimedRequest } from './types.js'

/** A line of the trace that cannot be replayed; the message names the file and line. */
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

/** Parses one line (1-based `line` for messages); null for a blank line. */
export function parseTraceLine(text: string, file: string, line: number): { timestamp: number; request: Omit<TimedRequest, 'at'> } | null {
  if (text.trim() === '') return null
  const fail = (m: string): never => {
    throw new TraceError(file, line, m)
  }
  let obj: unknown
  try {
    obj = JSON.parse(text)
  } catch (err) {
    return fail(`not valid JSON: ${(err as Error).message}`)
  }
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) return fail('each line must be a JSON object (an OpenAI request body)')
  const { timestamp, tenant, api: apiField, ...body } = obj as Record<string, unknown>
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
    const req = openAIRequest(api, Buffer.from(JSON.stringify(body)), 1024)
    tenantOf(tenant, req.promptCacheKey)
    if (api === 'chat') parseChatRequest(body)
    else parseCompletionRequest(body)
  } catch (err) {
    return fail((err as Error).message)
  }
  return { timestamp: ts, request: tenant === undefined ? { api, body } : { api, body, tenant } }
}

export interface TraceSummary {
  requests: number
  /** Last arrival, ms after the first. */
  spanMs: number
}

/** Reads the whole trace once, checking every line; the replay then streams it again. */
export async function checkTrace(path: string): Promise<TraceSummary> {
  let requests = 0
  let first = NaN
  let last = NaN
  for await (const r of readTrace(path)) {
    if (requests === 0) first = r.at
    last = r.at
    requests++
  }
  if (requests === 0) throw new TraceError(path, 1, 'the trace has no requests')
  return { requests, spanMs: last - first }
}

/** The trace's requests in order, arrival times relative to the first. */
export async function* readTrace(path: string): AsyncGenerator<TimedRequest> {
  const lines = createInterface({ input: createReadStream(path, { encoding: 'utf8' }), crlfDelay: Infinity })
  let n = 0
  let origin = NaN
  let prev = -Infinity
  for await (const text of lines) {
    n++
    const parsed = parseTraceLine(text, path, n)
    if (parsed === null) continue
    if (Number.isNaN(origin)) origin = parsed.timestamp
    const at = parsed.timestamp - origin
    if (at < prev) throw new TraceError(path, n, `timestamps must not decrease (${at} ms after the first request, after ${prev} ms)`)
    prev = at
    yield { at, ...parsed.request }
  }
}
