// The worker side of parse-pool.ts: reads one OpenAI body with the same code the main thread
// uses (the native extraction first when asked, openAIRequest otherwise or when it declines),
// and sends back only what routing needs, never the parsed tree.
import { readlinkSync } from 'node:fs'
import { getPriority, setPriority } from 'node:os'
import { parentPort } from 'node:worker_threads'
import { nativeRequest, type NativeKeyOptions, type NativeRequest } from '../core/key/native-key.js'
import { openAIRequest, type OpenAIApi, type OpenAIRequest } from '../core/key/openai-key.js'
import { RequestError } from '../core/errors.js'
import { toProxyError } from './errors.js'

export interface ParseTask {
  id: number
  api: OpenAIApi
  body: Uint8Array
  span: number
  /** Try the native extraction first, with these parameters. */
  native?: Omit<NativeKeyOptions, 'span'>
}

/** A NativeRequest as it crosses threads: a structured clone keeps no class, so the key travels as its parts. */
export interface WireKey {
  text: Uint8Array
  keyBytes: number
  anchorBytes: number | undefined
  model: string | undefined
  promptCacheKey: string | undefined
  stream: boolean
}

export type ParseReply =
  | { id: number; ok: OpenAIRequest }
  | { id: number; key: WireKey }
  | { id: number; refused: { status: number; type: string; code: string; message: string } }
  | { id: number; failed: string }

const refusal = (e: ReturnType<typeof toProxyError>) => ({ status: e.status, type: e.type, code: e.code, message: e.message })

function wire(r: NativeRequest): WireKey {
  const { key, model, promptCacheKey, stream } = r
  return { text: new Uint8Array(key), keyBytes: key.keyBytes, anchorBytes: key.anchorBytes, model, promptCacheKey, stream }
}

// The event loop serves every request, a parse only one: when both want the same core (a
// 2-core machine parsing a large body), the event loop's thread should get it. Linux gives
// each thread its own nice value, found through /proc/thread-self; elsewhere the worker keeps
// the process's priority, as it would if lowering it were refused.
try {
  const tid = Number(readlinkSync('/proc/thread-self').split('/').pop())
  if (tid > 0) setPriority(tid, Math.min(19, getPriority(tid) + 10))
} catch {
  // Not Linux, or no /proc: nothing to lower.
}

parentPort?.on('message', (task: ParseTask) => {
  let reply: ParseReply
  try {
    const raw = Buffer.from(task.body.buffer, task.body.byteOffset, task.body.byteLength)
    const fast = task.native ? nativeRequest(task.api, raw, { ...task.native, span: task.span }) : undefined
    reply = fast?.status === 'ok' ? { id: task.id, key: wire(fast.request) } : { id: task.id, ok: openAIRequest(task.api, raw, task.span) }
  } catch (err) {
    reply =
      err instanceof RequestError
        ? { id: task.id, refused: refusal(toProxyError(err)) }
        : { id: task.id, failed: (err as Error).message }
  }
  parentPort!.postMessage(reply)
})
