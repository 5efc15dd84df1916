// The exact view's tokenizer when the configuration names none. Events without token ids
// for the requests are events never used, so kvEvents alone implies one: `remote`, the
// instance's own POST /tokenize. It needs no files and is exact for any model (the engine
// applies its own chat template), and vLLM, the only engine publishing these events, always
// serves it. A call that fails or is late costs at most tokenizer.timeoutMs, and the request
// is routed on the approximate view. `--tokenizer local` avoids the round trip.
import type { Config } from './config.js'

export type TokenizerSetting = NonNullable<Config['tokenizer']>

/** What the configuration implies when it has kvEvents and no tokenizer (timeoutMs: tokenizer.timeoutMs's default). */
export const IMPLIED_TOKENIZER: TokenizerSetting = { mode: 'remote', timeoutMs: 50 }

/** Whether any endpoint reads KV events (top-level kvEvents, or an endpoint's own). */
export function readsKvEvents(config: Pick<Config, 'kvEvents' | 'endpoints'>): boolean {
  return config.kvEvents !== undefined || config.endpoints.some((ep) => ep.kvEvents !== undefined)
}

/** The tokenizer in force: the one configured, else the implied one when KV events are read; `implied` says which. */
export function tokenizerSetting(config: Pick<Config, 'kvEvents' | 'endpoints' | 'tokenizer'>): { tokenizer: TokenizerSetting; implied: boolean } | undefined {
  if (config.tokenizer !== undefined) return { tokenizer: config.tokenizer, implied: false }
  return readsKvEvents(config) ? { tokenizer: IMPLIED_TOKENIZER, implied: true } : undefined
}
