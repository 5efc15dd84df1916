// The tokenizer the configuration asks for, loaded before the front port opens: a local
// tokenizer file that does not load stops the start with an error naming the file. KV events
// without a tokenizer configured imply the remote one (config/tokenizer-default.ts).
import type { Config } from '../config/config.js'
import { tokenizerSetting } from '../config/tokenizer-default.js'
import { localTokenizer, remoteTokenizer, type RequestTokenizer } from '../tokens/index.js'

export async function tokenizerFromConfig(config: Config): Promise<RequestTokenizer | undefined> {
  const t = tokenizerSetting(config)?.tokenizer
  if (t === undefined) return undefined
  switch (t.mode) {
    case 'remote':
      return remoteTokenizer({ timeoutMs: t.timeoutMs })
    case 'local':
      return localTokenizer({ path: t.path! })
    case 'bytes':
    case 'o200k':
      return localTokenizer({ builtin: t.mode })
  }
}
