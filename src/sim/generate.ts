// POST /v1/chat/completions, /v1/completions, /invocations and /v1/responses on a live worker:
// validate, plan, submit to the engine, and answer as vLLM does, in one JSON body or as SSE.
// Streaming follows the socket: while a write is not drained, tokens are coalesced into
// the next chunk (vLLM's output collector merges deltas for a slow reader the same way)
// rather than buffered chunk by chunk. A closed connection aborts the sequence.
//
// A request may be one leg of a disaggregated one (pd-legs.ts): a prefill leg holds its
// blocks and answers where to read them (vLLM) or answers once they were read (SGLang); a
// decode leg reads them first. A decode whose KV cannot be had ends with vLLM's `error`
// finish reason: 500, or an error event in a stream.
import type { ServerResponse } from 'node:http'
import type { ResolvedSim } from './config.js'
import type { SimEngine } from './engine.js'
import type { FaultInjector } from './faults.js'
import { destroy, parseJson, readBody, send, sendError, write, type Req, type Res } from './http-util.js'
import { prefillAnswer } from './kv-params.js'
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
import { holdIdFor, readLeg, sourceFor, type Leg, type PdContext } from './pd-legs.js'
import { planRequest, type PlannedRequest } from './request.js'
import { parseResponsesRequest, responsesBody } from './responses.js'
import type { EngineRequest, Sequence, SeqListener } from './sequence.js'
import { fillerText } from './tokenizer.js'

export interface GenerateContext {
  engine: SimEngine
  models: ModelRegistry
  sim: ResolvedSim
  faults: FaultInjector
  /** Responses held open by the hang fault, ended when the worker stops. */
  hanging: Set<Res>
  pd: PdContext
}

export type Api = 'chat' | 'completion' | 'invocation' | 'responses'

function parse(api: Api, body: unknown) {
  switch (api) {
    case 'chat':
      return parseChatRequest(body)
    case 'completion':
      return parseCompletionRequest(body)
    case 'invocation':
      return parseInvocation(body)
    case 'responses':
      return parseResponsesRequest(body)
  }
}

/**
 * vLLM frees a prefill's held blocks when their decode leg is refused before it reaches the
 * engine (a 400, an error fault): tell the prefill side it may let them go.
 */
function rejected(leg: Leg, engine: SimEngine): void {
  if (leg.kind === 'nixl-decode') sourceFor(leg, engine, 0)!.cancel()
}

export async function handleGeneration(ctx: GenerateContext, req: Req, res: Res, api: Api): Promise<void> {
  const raw = await readBody(req)
  const body = parseJson(raw)
  const parsed = parse(api, body)
  const model = ctx.models.resolve(parsed.model)
  const engine = ctx.engine
  const leg = readLeg(body as Record<string, unknown>, raw, ctx.pd)
  let plan: PlannedRequest
  try {
    // SGLang's prefill server computes the prompt and samples one token; the decode does the rest.
    const asked = leg.kind === 'sglang-prefill' ? { ...parsed, maxTokens: 1 } : parsed
    plan = planRequest(asked, model, ctx.sim, (p, m) => engine.check(p, m), engine.kvEventsEnabled)
  } catch (err) {
    rejected(leg, engine)
    throw err
  }
  const bootstrap = ctx.pd.bootstrap
  const room = leg.kind === 'sglang-prefill' ? leg.room : null
  if (room !== null && !bootstrap!.claim(room)) {
    throw new ApiError(400, `bootstrap_room ${room} is already being prefilled on this worker.`, 'BadRequestError', 'bootstrap_room')
  }
  const unclaim = (): void => {
    if (room !== null) bootstrap!.unclaim(room)
  }

  const fault = ctx.faults.pick()
  if (fault?.kind === 'error') {
    rejected(leg, engine)
    unclaim()
    const type = fault.status === 503 ? 'ServiceUnavailableError' : 'InternalServerError'
    throw new ApiError(fault.status, `Simulated fault: this request was answered ${fault.status}.`, type)
  }
  if (fault?.kind === 'hang') {
    ctx.hanging.add(res)
    res.on('close', () => {
      ctx.hanging.delete(res)
      unclaim()
    })
    return
  }
  if (leg.kind === 'nixl-invalid') engine.stats.kvInvalidParams++

  const meta: ResponseMeta = { kind: parsed.kind, id: newId(parsed.kind), created: Math.floor(Date.now() / 1000), model }
  const usage = (seq: Sequence): Usage => ({
    promptTokens: seq.promptTokens,
    completionTokens: seq.generated,
    cachedTokens: seq.cachedTokens,
  })
  const side = ctx.pd.sideChannel
  const kvParams = (seq: Sequence): object | null => {
    if (leg.kind !== 'nixl-prefill' || seq.hold === null || side === null) return null
    const host = side.host === '0.0.0.0' || side.host === '::' ? '127.0.0.1' : side.host
    return prefillAnswer(engine.kvEngineId, seq.hold, host, side.port, engine.config.kv.tpSize)
  }
  const whole = (seq: Sequence): string =>
    api === 'responses'
      ? responsesBody(model, fillerText(0, seq.generated), usage(seq), kvParams(seq))
      : completeBody(meta, fillerText(0, seq.generated), seq.finishReason!, usage(seq), kvParams(seq))
  const dropAfter = ctx.faults.config.dropAfterTokens
  const fmt = new ChunkFormat(meta)
  let done = false
  let listener: SeqListener
  if (room !== null) listener = bootstrapListener(res, room, ctx.pd, parsed.stream, fmt, whole, () => (done = true))
  else if (parsed.stream) listener = streamListener(res, fmt, parsed.includeUsage, dropAfter, usage, () => (done = true))
  else {
    listener = {
      onTokens(seq) {
        if (dropAfter !== null && seq.generated >= dropAfter) {
          done = true
          destroy(res)
        }
      },
      onFinish(seq) {
        if (done) return
        done = true
        if (seq.finishReason === 'abort') return destroy(res)
        if (seq.finishReason === 'error') return sendError(res, generationError(seq))
        send(res, 200, 'application/json', whole(seq))
      },
    }
  }

  if (parsed.stream && room === null) {
    ;(res as ServerResponse).writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' })
    if ('flushHeaders' in res) res.flushHeaders()
  }
  const holdId = holdIdFor(leg, meta.id)
  const source = sourceFor(leg, engine, plan.prompt.promptTokens)
  const request: EngineRequest = {
    promptTokens: plan.prompt.promptTokens,
    blockKeys: plan.prompt.blockKeys,
    maxTokens: plan.maxTokens,
    finishReason: plan.finishReason,
    extraDelayMs: ctx.faults.config.delayMs,
    ...kvFields(plan, ctx.models.base),
  }
  if (holdId !== null) request.holdKv = room === null ? { id: holdId } : { id: holdId, leaseMs: engine.config.kv.bootstrapTimeoutMs }
  if (source !== null) request.remoteKv = source
  let seq: Sequence
  try {
    seq = engine.submit(request, listener)
  } catch (err) {
    source?.cancel()
    unclaim()
    if (parsed.stream && room === null) destroy(res)
    else sendError(res, new ApiError(503, `The engine is not accepting requests: ${(err as Error).message}`))
    return
  }
  // Also after a fault closed the connection: the sequence must leave the batch either way.
  res.on('close', () => {
    if (!seq.done) engine.abort(seq)
  })
}

/** vLLM answers a request that finished with `error` (a failed KV load) 500, InternalServerError. */
function generationError(seq: Sequence): ApiError {
  return new ApiError(500, `Internal server error: ${seq.error ?? 'the request failed'}`, 'InternalServerError')
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

/**
 * An SGLang prefill leg: its one token is computed, its blocks wait for the room's decode, and
 * the answer (which the router reads and discards) leaves once they were read; a room whose
 * decode never comes is answered 500 when the bootstrap timeout frees the blocks.
 */
function bootstrapListener(
  res: Res,
  room: string,
  pd: PdContext,
  stream: boolean,
  fmt: ChunkFormat,
  whole: (seq: Sequence) => string,
  markDone: () => void,
): SeqListener {
  const bootstrap = pd.bootstrap!
  const fail = (message: string): void => sendError(res, new ApiError(500, message, 'InternalServerError'))
  return {
    onFinish(seq) {
      if (seq.hold !== null) return bootstrap.ready(room, seq.hold)
      bootstrap.unclaim(room)
      bootstrap.failed(room, `the prefill leg of bootstrap room ${room} did not finish`)
      markDone()
      if (seq.finishReason === 'abort') destroy(res)
      else fail(`Internal server error: the prefill of bootstrap room ${room} failed`)
    },
    onKvReleased(seq, how) {
      bootstrap.unclaim(room)
      markDone()
      if (res.destroyed) return
      if (how !== 'read') {
        const why = how === 'expired' ? 'no decode read its KV before the bootstrap timeout' : `its KV was ${how === 'restart' ? 'lost in a restart' : 'given up by the decode'}`
        return fail(`Internal server error: bootstrap room ${room}: ${why}`)
      }
      if (!stream) return send(res, 200, 'application/json', whole(seq))
      ;(res as ServerResponse).writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' })
      ;(res as ServerResponse).end(fmt.first() + fmt.token(fillerText(0, seq.generated), seq.finishReason) + fmt.done())
    },
  }
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
      if (seq.finishReason === 'error') {
        const e = generationError(seq)
        ;(res as ServerResponse).end(fmt.error(e.status, e.message, e.type) + fmt.done())
        return
      }
      flush(seq.finishReason)
      let tail = includeUsage ? fmt.usage(usage(seq)) : ''
      tail += fmt.done()
      ;(res as ServerResponse).end(tail)
    },
  }
}

