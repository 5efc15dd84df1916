// From a validated API request to what the engine needs: the prompt's tokens (the chat
// template rendered, then the configured tokenizer; token ids as given), their count and
// block hashes under the model's (or adapter's) cache seed, and the output length. Live
// workers and the virtual fleet both go through here, so a prompt keys the same blocks in
// either.
import { preparePrompt, cacheSeed, type PreparedPrompt } from './block-hash.js'
import { promptText, type PromptSource } from '../tokens/builtin-ids.js'
import type { ResolvedSim } from './config.js'
import { ApiError, type GenerationRequest } from './openai-shapes.js'
import { encodeTokenIds } from './tokenizer.js'
import { getTokenizer, type Tokenizer } from './tokenizers/index.js'

export interface PlannedRequest {
  model: string
  prompt: PreparedPrompt
  cacheSalt: string | undefined
  maxTokens: number
  finishReason: 'stop' | 'length'
}

/**
 * The prompt's token count and block keys: a chat's rendered template or a text through
 * `tokenizer`, token ids one token each whatever the tokenizer.
 */
export function preparePromptSource(
  src: PromptSource,
  tokenizer: Tokenizer,
  blockSize: number,
  seed: bigint,
  withTokens = false,
): PreparedPrompt {
  const text = promptText(src)
  if (text === undefined) return preparePrompt(encodeTokenIds(src.tokenIds!), blockSize, seed, withTokens)
  return tokenizer.prepareText(text, blockSize, seed, withTokens)
}

/**
 * Output length: max_tokens when given (finishing with "length"), otherwise the
 * configured default, cut to what the context allows (finishing with "stop", as a model
 * emitting EOS would).
 */
export function outputPlan(
  sim: ResolvedSim,
  promptTokens: number,
  maxTokens: number | undefined,
): { maxTokens: number; finishReason: 'stop' | 'length' } {
  if (maxTokens !== undefined) return { maxTokens, finishReason: 'length' }
  const room = sim.engine.maxModelLen - promptTokens
  return room < sim.outputTokens && room >= 1
    ? { maxTokens: room, finishReason: 'length' }
    : { maxTokens: sim.outputTokens, finishReason: 'stop' }
}

export function planRequest(
  req: GenerationRequest & PromptSource,
  model: string,
  sim: ResolvedSim,
  check: (promptTokens: number, maxTokens: number) => string | undefined,
  withTokens = false,
): PlannedRequest {
  const seed = cacheSeed(model, req.cacheSalt)
  const prompt = preparePromptSource(req, getTokenizer(sim.tokenizer), sim.engine.blockSize, seed, withTokens)
  const out = outputPlan(sim, prompt.promptTokens, req.maxTokens)
  const problem = check(prompt.promptTokens, out.maxTokens)
  if (problem !== undefined) throw new ApiError(400, problem, 'BadRequestError', 'max_tokens')
  return { model, prompt, cacheSalt: req.cacheSalt, ...out }
}
