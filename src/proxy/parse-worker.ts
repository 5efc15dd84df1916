// The worker side of parse-pool.ts: parses one OpenAI body with the same openAIRequest the
// main thread uses, and sends back only what routing needs, never the parsed tree.
import { parentPort } from 'node:worker_threads'
import { openAIRequest, type OpenAIApi, type OpenAIRequest } from '../prefix/openai-key.js'
import { ProxyError } from './errors.js'

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

parentPort?.on('message', (task: ParseTask) => {
  let reply: ParseReply
  try {
    const raw = Buffer.from(task.body.buffer, task.body.byteOffset, task.body.byteLength)
    reply = { id: task.id, ok: openAIRequest(task.api, raw, task.span) }
  } catch (err) {
    reply =
      err instanceof ProxyError
        ? { id: task.id, refused: { status: err.status, type: err.type, code: err.code, message: err.message } }
        : { id: task.id, failed: (err as Error).message }
  }
  parentPort!.postMessage(reply)
})
