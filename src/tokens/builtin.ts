// The simulator's own tokenizers, so that a router runs the exact view against simulated
// workers with no model files: `bytes` (4 UTF-8 bytes a token) and `o200k` (gpt-tokenizer's
// BPE). Chats are validated and rendered as the simulator does (its ChatML template, tool
// calls, multi-part content: chatml.ts) and encoded by the same function as its /tokenize, so the
// ids are the ones its engine prefills. The simulator renders no tool definitions, so
// `tools` changes nothing here either.
//
// Caching: `bytes` needs none (its ids are the text's bytes, one copy); `o200k` goes through
// the segment cache, which cuts a prompt where its BPE cannot join across and
// keeps each segment's ids, so a resent history is not re-encoded.
import { OutOfRangeError } from '../core/errors.js'
import { promptTokenIds, textTokenIds, type BuiltinName } from './builtin-ids.js'
import { chatMessages, ChatMessagesError } from './chatml.js'
import { o200kCache } from './o200k.js'
import { checkInput, Counters, idsOf, type RequestTokenizer, type TokenizeInput, type TokenizerStats } from './types.js'

export function builtinTokenizer(name: BuiltinName): RequestTokenizer {
  if (name !== 'bytes' && name !== 'o200k') throw new OutOfRangeError('builtin', "'bytes' or 'o200k'", name)
  if (name === 'o200k') o200kCache() // load the ranks now, not on the first request
  return new Builtin(name)
}

class Builtin implements RequestTokenizer {
  readonly mode = 'local'
  private readonly counters = new Counters()
  private closed = false

  constructor(private readonly name: BuiltinName) {}

  async tokens(input: TokenizeInput): Promise<Uint32Array | undefined> {
    checkInput(input)
    const c = this.counters
    c.requests++
    if (this.closed) return c.fail('the tokenizer is closed', 'unavailable')
    if (input.kind === 'completion' && Array.isArray(input.prompt)) {
      const ids = idsOf(input.prompt)
      return typeof ids === 'string' ? c.fail(ids) : ids
    }
    const cache = this.name === 'o200k' ? o200kCache() : undefined
    const hits = cache?.hits ?? 0
    const misses = cache?.misses ?? 0
    let ids: Uint32Array
    try {
      if (input.kind === 'completion') ids = textTokenIds(input.prompt as string, this.name)
      else {
        ids = promptTokenIds({ messages: chatMessages(input.messages), addGenerationPrompt: input.addGenerationPrompt ?? true }, this.name)
      }
    } catch (err) {
      if (err instanceof ChatMessagesError) return c.fail(err.message)
      throw err
    }
    // The segment cache is shared in-process (the simulator's workers in this process use it too); encoding is synchronous, so
    // the change across this call is this call's.
    if (cache !== undefined) {
      c.cacheHits += cache.hits - hits
      c.cacheMisses += cache.misses - misses
    }
    return ids
  }

  stats(): TokenizerStats {
    const cache = this.name === 'o200k' ? o200kCache() : undefined
    // Its ids only (4 bytes a token): the segment texts beside them are not counted by the cache.
    return this.counters.snapshot(cache?.size ?? 0, cache === undefined ? 0 : cache.tokens * 4)
  }

  async close(): Promise<void> {
    this.closed = true
  }
}
