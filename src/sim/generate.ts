// POST /v1/chat/completions, /v1/completions and /invocations on a live worker: validate,
// plan, submit to the engine, and answer as vLLM does, in one JSON body or as SSE.
// Streaming follows the socket: while a write is not drained, tokens are coalesced into
// the next chunk (vLLM's output collector merges deltas for a slow reader the same way)
// rather than buffered chunk by chunk. A closed connection aborts the sequence.
import type { ServerResponse } from 'node:http'
import type { ResolvedSim } from './config.js'
import type { SimEngine } from './engine.js'
import type { FaultInjector } from './faults.js'
import { destroy, parseJson, readBody, sendError, sendJson, write, type Req, type Res } from './http-util.js'
import type { ModelRegistry } from './models.js'
import {
  ApiError,
  ChunkFormat,
  completeBody,
  newId,
  parseChatRequest,
  parseCompletionRequest,
  parseInvocation,
  type ResponseMeta,
  type Usage,
} from './openai-shapes.js'
import { planRequest, type PlannedRequest } from './request.js'
import type { EngineRequest, Sequence, SeqListener } from './sequence.js'
import { fillerText } from './tokenizer.js'

export interface GenerateContext {
  engine: SimEngine
  models: ModelRegistry
  sim: ResolvedSim
  faults: FaultInjector
  /** Responses held open by the hang fault, ended when the worker stops. */
  hanging: Set<Res>
}

export type Api = 'chat' | 'completion' | 'invocation'

export async function handleGeneration(ctx: GenerateContext, req: Req, res: Res, api: Api): Promise<void> {
  const body = parseJson(await readBody(req))
  const parsed = api === 'chat' ? parseChatRequest(body) : api === 'completion' ? parseCompletionRequest(body) : parseInvocation(body)
  const model = ctx.models.resolve(parsed.model)
  const plan = planRequest(parsed, model, ctx.sim, (p, m) => ctx.engine.check(p, m), ctx.engine.kvEventsEnabled)

  const fault = ctx.faults.pick()
  if (fault?.kind === 'error') {
    const type = fault.status === 503 ? 'ServiceUnavailableError' : 'InternalServerError'
    throw new ApiError(fault.status, `Simulated fault: this request was answered ${fault.status}.`, type)
  }
  if (fault?.kind === 'hang') {
    ctx.hanging.add(res)
    res.on('close', () => ctx.hanging.delete(res))
    return
  }

  const meta: ResponseMeta = { kind: parsed.kind, id: newId(parsed.kind), created: Math.floor(Date.now() / 1000), model }
  const dropAfter = ctx.faults.config.dropAfterTokens
  const usage = (seq: Sequence): Usage => ({
    promptTokens: seq.promptTokens,
    completionTokens: seq.generated,
    cachedTokens: seq.cachedTokens,
  })
  let done = false
  const listener: SeqListener = parsed.stream
    ? streamListener(res, new ChunkFormat(meta), parsed.includeUsage, dropAfter, usage, () => (done = true))
    : {
        onTokens(seq) {
          if (dropAfter !== null && seq.generated >= dropAfter) {
            done = true
            destroy(res)
          }
        },
        onFinish(seq) {
          if (done) return
          done = true
          if (seq.finishReason === 'abort') {
            destroy(res)
            return
          }
          sendJson(res, 200, completeBody(meta, fillerText(0, seq.generated), seq.finishReason!, usage(seq)))
        },
      }

  if (parsed.stream) {
    ;(res as ServerResponse).writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' })
    if ('flushHeaders' in res) res.flushHeaders()
  }
  let seq: Sequence
  try {
    seq = ctx.engine.submit(
      {
        promptTokens: plan.prompt.promptTokens,
        blockKeys: plan.prompt.blockKeys,
        maxTokens: plan.maxTokens,
        finishReason: plan.finishReason,
        extraDelayMs: ctx.faults.config.delayMs,
        ...kvFields(plan, ctx.models.base),
      },
      listener,
    )
  } catch (err) {
    if (parsed.stream) destroy(res)
    else sendError(res, new ApiError(503, `The engine is not accepting requests: ${(err as Error).message}`))
    return
  }
  // Also after a fault closed the connection: the sequence must leave the batch either way.
  res.on('close', () => {
    if (!seq.done) ctx.engine.abort(seq)
  })
}

/** What the engine's KV events need beyond the block keys (nothing when it publishes none). */
function kvFields(plan: PlannedRequest, base: string): Pick<EngineRequest, 'tokenIds' | 'loraName' | 'cacheSalt'> {
  const out: Pick<EngineRequest, 'tokenIds' | 'loraName' | 'cacheSalt'> = {}
  if (plan.prompt.tokenIds === undefined) return out
  out.tokenIds = plan.prompt.tokenIds
  if (plan.model !== base) out.loraName = plan.model
  if (plan.cacheSalt !== undefined) out.cacheSalt = plan.cacheSalt
  return out
}

function streamListener(
  res: Res,
  fmt: ChunkFormat,
  includeUsage: boolean,
  dropAfter: number | null,
  usage: (seq: Sequence) => Usage,
  markDone: () => void,
): SeqListener {
  let sent = 0 // tokens written
  let pending = 0 // tokens produced, not yet written
  let blocked = false
  let first = true
  let closed = false
  const flush = (finish: string | null): void => {
    const chunk = (first ? fmt.first() : '') + fmt.token(fillerText(sent, pending), finish)
    first = false
    sent += pending
    pending = 0
    if (!write(res, chunk) && !blocked) {
      blocked = true
      res.once('drain', () => {
        blocked = false
        if (pending > 0 && !closed) flush(null)
      })
    }
  }
  return {
    onTokens(seq, count) {
      if (closed) return
      pending += count
      if (dropAfter !== null && sent + pending >= dropAfter) {
        pending = dropAfter - sent
        if (pending > 0) flush(null)
        closed = true
        markDone()
        destroy(res, true)
        return
      }
      const last = seq.generated >= seq.maxTokens
      if (!blocked && !last) flush(null)
    },
    onFinish(seq) {
      if (closed) return
      closed = true
      markDone()
      if (seq.finishReason === 'abort') {
        destroy(res)
        return
      }
      flush(seq.finishReason)
      let tail = includeUsage ? fmt.usage(usage(seq)) : ''
      tail += fmt.done()
      ;(res as ServerResponse).end(tail)
    },
  }
}
