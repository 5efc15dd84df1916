// The token ids a request will have on the engine, before the router picks an instance:
// remote (ask an instance's /tokenize) or local (the model's tokenizer files, or the
// simulator's builtin tokenizers).
import { hfLocalTokenizer, type HfLocalOptions } from './hf-local.js'
import { builtinTokenizer } from './builtin.js'
import type { BuiltinName } from './builtin-ids.js'
import type { RequestTokenizer } from './types.js'

export type { RequestTokenizer, TokenizeInput, TokenizerStats } from './types.js'
export type { ContentFormat } from './chat-messages.js'
export { remoteTokenizer, DEFAULT_REMOTE_TIMEOUT_MS, DEFAULT_REMOTE_TIMEOUT_MS_PER_MIB, type RemoteTokenizerOptions } from './remote.js'
export type { HfLocalOptions, BuiltinName }

/**
 * A tokenizer in this process: `path` is a directory with tokenizer.json and
 * tokenizer_config.json (or chat_template.jinja), or a tokenizer.json file (then the
 * template comes from `chatTemplate` or the files beside it); `builtin` is one of the
 * simulator's. Load problems throw a TokenizerLoadError naming the file.
 */
export async function localTokenizer(o: HfLocalOptions | { builtin: BuiltinName }): Promise<RequestTokenizer> {
  if ('builtin' in o) return builtinTokenizer(o.builtin)
  return hfLocalTokenizer(o)
}
export { exactTokens } from './request-tokens.js'
