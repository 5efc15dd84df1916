// A model's tokenizer files as Hugging Face writes them, read and checked up front so that
// a bad path or a broken file fails at startup naming the file, not on the first request:
//   tokenizer.json          the tokenizer (model, pre-tokenizer, added tokens, post-processor);
//   tokenizer_config.json   chat_template (a string, or a list of {name, template}) and the
//                           special tokens (bos_token, eos_token, … as strings or {content});
//   chat_template.jinja     where newer checkpoints keep the template instead (it wins, as
//                           in transformers).
import { readFileSync, statSync } from 'node:fs'
import path from 'node:path'
import { InvalidArgTypeError, TokenizerLoadError } from '../core/errors.js'

export interface TokenizerFiles {
  tokenizerFile: string
  tokenizerJson: string
  /** The parsed tokenizer.json (added_tokens, pre_tokenizer are read from it). */
  tokenizer: Record<string, unknown>
  /** Templates by name ("default", "tool_use", …) and the file they came from. */
  templates: Map<string, string>
  templateFile: string
  /** bos_token, eos_token, … as strings: the template's variables. */
  specialTokens: Record<string, string>
}

export interface LoadOptions {
  path: string
  chatTemplate?: string
}

export function readTokenizerFiles(o: LoadOptions): TokenizerFiles {
  if (typeof o.path !== 'string' || o.path.length === 0) throw new InvalidArgTypeError('path', 'a non-empty string', o.path)
  let stat
  try {
    stat = statSync(o.path)
  } catch (err) {
    throw new TokenizerLoadError(o.path, 'no such file or directory (give a directory with tokenizer.json, or a tokenizer.json file)', { cause: err })
  }
  const dir = stat.isDirectory() ? o.path : path.dirname(o.path)
  const tokenizerFile = stat.isDirectory() ? path.join(dir, 'tokenizer.json') : o.path
  const tokenizerJson = readText(tokenizerFile, true)!
  const tokenizer = parseObject(tokenizerFile, tokenizerJson)
  if (typeof tokenizer.model !== 'object' || tokenizer.model === null) throw new TokenizerLoadError(tokenizerFile, "has no 'model': not a Hugging Face tokenizer.json")

  const configFile = path.join(dir, 'tokenizer_config.json')
  const configText = readText(configFile, false)
  const config = configText === undefined ? {} : parseObject(configFile, configText)
  const specialTokens = specials(configFile, config)

  const templates = new Map<string, string>()
  let templateFile = configFile
  if (o.chatTemplate !== undefined) {
    if (typeof o.chatTemplate !== 'string' || o.chatTemplate.length === 0) throw new TokenizerLoadError('chatTemplate', 'must be a non-empty string')
    templates.set('default', o.chatTemplate)
    templateFile = 'the chatTemplate option'
  } else {
    const jinjaFile = path.join(dir, 'chat_template.jinja')
    const jinja = readText(jinjaFile, false)
    if (jinja !== undefined) {
      templates.set('default', jinja)
      templateFile = jinjaFile
    } else {
      if (configText === undefined) throw new TokenizerLoadError(configFile, 'not found: the chat template comes from it (or give chatTemplate)')
      readTemplates(configFile, config.chat_template, templates)
    }
  }
  return { tokenizerFile, tokenizerJson, tokenizer, templates, templateFile, specialTokens }
}

function readText(file: string, required: boolean): string | undefined {
  try {
    return readFileSync(file, 'utf8')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (!required && code === 'ENOENT') return undefined
    throw new TokenizerLoadError(file, code === 'ENOENT' ? 'not found' : `cannot be read (${(err as Error).message})`, { cause: err })
  }
}

function parseObject(file: string, text: string): Record<string, unknown> {
  let j: unknown
  try {
    j = JSON.parse(text)
  } catch (err) {
    throw new TokenizerLoadError(file, `is not valid JSON (${(err as Error).message})`, { cause: err })
  }
  if (typeof j !== 'object' || j === null || Array.isArray(j)) throw new TokenizerLoadError(file, 'is not a JSON object')
  return j as Record<string, unknown>
}

function readTemplates(file: string, t: unknown, into: Map<string, string>): void {
  if (t === undefined || t === null) throw new TokenizerLoadError(file, "has no chat_template (give chatTemplate, or a chat_template.jinja beside it)")
  if (typeof t === 'string') {
    into.set('default', t)
    return
  }
  if (!Array.isArray(t)) throw new TokenizerLoadError(file, 'chat_template must be a string or a list of {name, template}')
  for (const [i, e] of t.entries()) {
    const { name, template } = (e ?? {}) as { name?: unknown; template?: unknown }
    if (typeof name !== 'string' || typeof template !== 'string') throw new TokenizerLoadError(file, `chat_template[${i}] is not {name, template} strings`)
    into.set(name, template)
  }
  if (!into.has('default')) throw new TokenizerLoadError(file, `chat_template has no "default" template (it has ${[...into.keys()].join(', ') || 'none'})`)
}

// transformers hands the template every special token of the config as a string; a token
// may be written as a string or as an AddedToken object with its content.
function specials(file: string, config: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(config)) {
    if (!k.endsWith('_token') || v === null || v === undefined || typeof v === 'boolean' || typeof v === 'number') continue // add_bos_token is a flag
    if (typeof v === 'string') out[k] = v
    else if (typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') out[k] = (v as { content: string }).content
    else throw new TokenizerLoadError(file, `${k} must be a string or an object with a string 'content'`)
  }
  return out
}
