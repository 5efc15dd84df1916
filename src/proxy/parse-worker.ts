// The worker side of parse-pool.ts: parses one OpenAI body with the same openAIRequest the
// main thread uses, and sends back only what routing needs, never the parsed tree.
import { parentPort } from 'node:worker_threads'
import { openAIRequest, type OpenAIApi, type OpenAIRequest } from '../core/key/openai-key.js'
import { RequestError } from '../core/errors.js'
import { toProxyError } from './errors.js'

export interface ParseTask {
  id: number
  api: OpenAIApi
  body: Uint8Array
  span: number
}

export type ParseReply =
  | { id: number; ok: OpenAIRequest }
  | { id: number; refused: { status: number; type: string; code: string; message: string } }
  | { id: number; failed: string }

const refusal = (e: ReturnType<typeof toProxyError>) => ({ status: e.status, type: e.type, code: e.code, message: e.message })

parentPort?.on('message', (task: ParseTask) => {
  let reply: ParseReply
  try {
    const raw = Buffer.from(task.body.buffer, task.body.byteOffset, task.body.byteLength)
    reply = { id: task.id, ok: openAIRequest(task.api, raw, task.span) }
  } catch (err) {
    reply =
      err instanceof RequestError
        ? { id: task.id, refused: refusal(toProxyError(err)) }
        : { id: task.id, failed: (err as Error).message }
  }
  parentPort!.postMessage(reply)
})
