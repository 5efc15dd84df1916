// A model's own tokenizer in the router's process: the chat template rendered with
// @huggingface/jinja, the text encoded by Hugging Face's Rust tokenizers (the `tokenizers`
// binding: the implementation vLLM's fast tokenizers run, so exact by construction; faster
// than the pure-JS port and off the event loop, see bench/tokens.bench.ts).
//
// The cache: a chat's history is resent every turn, so the rendered text is cut at its
// added tokens (<|im_start|>, <|eot_id|>, …) and the pieces between are encoded once and
// remembered. That is exact because Hugging Face splits added tokens out of the text before
// anything else runs, and normalizes, pre-tokenizes and encodes each piece between them on
// its own: the ids of the whole are the pieces' ids with the added tokens' ids between.
// These would break it, and any of them turns the cut off (whole texts are cached
// instead): an added token with lstrip, rstrip or single_word (its match depends on the
// text around it), and a Metaspace pre-tokenizer that prepends only to the first piece
// (prepend_scheme "first": a piece's ids would depend on its offset). Tokens matched after
// normalization (normalized: true) are found within a piece, as Hugging Face does too, so
// they need no cut. BOS/EOS from the post-processor are found once, at load, as what
// add_special_tokens puts around a probe's ids.
import { Template } from '@huggingface/jinja'
import { OutOfRangeError, TokenizerLoadError } from '../core/errors.js'
import { xxh3 } from '../core/hash.js'
import { requireFeature } from '../core/optional-packages.js'
import { conversation, detectContentFormat, vllmTools, type ContentFormat } from './chat-messages.js'
import { readTokenizerFiles, type LoadOptions } from './hf-files.js'
import { BoundedLru } from './lru.js'
import { checkInput, Counters, idsOf, type RequestTokenizer, type TokenizeInput, type TokenizerStats } from './types.js'

type RustTokenizer = import('tokenizers').Tokenizer

export interface HfLocalOptions extends LoadOptions {
  /** How the template reads message content (default: detected from the template, as vLLM does). */
  contentFormat?: ContentFormat
  /** Cached segments (default 65536) and their bytes, texts and ids (default 256 MiB). */
  cacheEntries?: number
  cacheBytes?: number
}

interface Added {
  content: string
  id: number
}

export async function hfLocalTokenizer(o: HfLocalOptions): Promise<RequestTokenizer> {
  const entries = o.cacheEntries ?? 65_536
  if (!Number.isInteger(entries) || entries < 0) throw new OutOfRangeError('cacheEntries', 'an integer >= 0', entries)
  const bytes = o.cacheBytes ?? 256 * 1024 * 1024
  if (!Number.isInteger(bytes) || bytes < 0) throw new OutOfRangeError('cacheBytes', 'an integer >= 0', bytes)
  if (o.contentFormat !== undefined && o.contentFormat !== 'string' && o.contentFormat !== 'openai') {
    throw new OutOfRangeError('contentFormat', "'string' or 'openai'", o.contentFormat)
  }
  requireFeature('localTokenizer')
  const files = readTokenizerFiles(o)
  const { Tokenizer } = (await import('tokenizers')) as typeof import('tokenizers')
  let rust: RustTokenizer
  try {
    rust = Tokenizer.fromString(files.tokenizerJson)
  } catch (err) {
    throw new TokenizerLoadError(files.tokenizerFile, `is not a tokenizer Hugging Face tokenizers can load (${(err as Error).message})`, { cause: err })
  }
  const templates = new Map<string, Template>()
  for (const [name, src] of files.templates) {
    try {
      templates.set(name, new Template(src))
    } catch (err) {
      throw new TokenizerLoadError(files.templateFile, `chat template${name === 'default' ? '' : ` "${name}"`} does not parse (${(err as Error).message})`, { cause: err })
    }
  }
  const format = o.contentFormat ?? detectContentFormat(files.templates.get('default')!)
  const cut = cuttable(files.tokenizer)
  const added: Added[] = []
  if (cut) {
    for (const t of (files.tokenizer.added_tokens ?? []) as { content?: unknown; normalized?: unknown; special?: unknown }[]) {
      // Unsaid, an added token is normalized unless it is special (Hugging Face's default).
      const normalized = typeof t.normalized === 'boolean' ? t.normalized : t.special !== true
      if (typeof t.content !== 'string' || t.content.length === 0 || normalized) continue
      const id = rust.tokenToId(t.content) // the id the tokenizer really gives it, whatever the JSON says
      if (id !== null && id !== undefined) added.push({ content: t.content, id })
    }
  }
  const specials = await specialTokensAround(rust)
  return new HfLocal(rust, templates, format, files.specialTokens, added, specials, new BoundedLru(entries, bytes))
}

function cuttable(tokenizer: Record<string, unknown>): boolean {
  for (const t of (tokenizer.added_tokens ?? []) as Record<string, unknown>[]) {
    if (t.lstrip === true || t.rstrip === true || t.single_word === true) return false
  }
  return !hasFirstOnlyPrepend(tokenizer.pre_tokenizer)
}

function hasFirstOnlyPrepend(p: unknown): boolean {
  if (typeof p !== 'object' || p === null) return false
  const o = p as Record<string, unknown>
  if (o.type === 'Metaspace' && o.prepend_scheme === 'first') return true
  return Array.isArray(o.pretokenizers) && o.pretokenizers.some(hasFirstOnlyPrepend)
}

/** What add_special_tokens adds before and after the ids (BOS, EOS), or undefined when it is not just that. */
async function specialTokensAround(rust: RustTokenizer): Promise<{ before: number[]; after: number[] } | undefined> {
  const probe = 'a b'
  const bare = (await rust.encode(probe, null, { addSpecialTokens: false })).getIds()
  const full = (await rust.encode(probe, null, { addSpecialTokens: true })).getIds()
  for (let at = 0; at + bare.length <= full.length; at++) {
    if (bare.every((id, k) => full[at + k] === id)) return { before: full.slice(0, at), after: full.slice(at + bare.length) }
  }
  return undefined
}

const ESCAPE = /[.*+?^${}()|[\]\\]/g

class HfLocal implements RequestTokenizer {
  readonly mode = 'local'
  private readonly counters = new Counters()
  private readonly splitter: RegExp | undefined
  private readonly idOf = new Map<string, number>()
  private closed = false

  constructor(
    private readonly rust: RustTokenizer,
    private readonly templates: Map<string, Template>,
    private readonly format: ContentFormat,
    private readonly specialTokens: Record<string, string>,
    added: Added[],
    private readonly around: { before: number[]; after: number[] } | undefined,
    private readonly cache: BoundedLru<{ text: string; ids: Uint32Array }>,
  ) {
    // Longest first: a regex alternation takes the first alternative that matches, so this
    // is Hugging Face's leftmost-longest match of added tokens.
    for (const a of added) this.idOf.set(a.content, a.id)
    const alts = [...this.idOf.keys()].sort((x, y) => y.length - x.length).map((c) => c.replace(ESCAPE, '\\$&'))
    this.splitter = alts.length > 0 ? new RegExp(alts.join('|'), 'g') : undefined
  }

  async tokens(input: TokenizeInput): Promise<Uint32Array | undefined> {
    checkInput(input)
    const c = this.counters
    c.requests++
    if (this.closed) return c.fail('the tokenizer is closed', 'unavailable')
    let text: string
    let addSpecial: boolean
    if (input.kind === 'completion') {
      if (Array.isArray(input.prompt)) {
        const ids = idsOf(input.prompt)
        return typeof ids === 'string' ? c.fail(ids) : ids
      }
      text = input.prompt
      addSpecial = input.addSpecialTokens ?? true
    } else {
      const rendered = this.render(input)
      if (rendered.error !== undefined) return c.fail(rendered.error)
      text = rendered.text
      addSpecial = input.addSpecialTokens ?? false
    }
    try {
      return await this.encode(text, addSpecial)
    } catch (err) {
      return c.fail(`encoding failed: ${(err as Error)?.message ?? String(err)}`)
    }
  }

  /** The chat's text as the engine's template renders it. */
  render(input: Extract<TokenizeInput, { kind: 'chat' }>): { text: string; error?: undefined } | { error: string } {
    const conv = conversation(input.messages, this.format)
    if (typeof conv === 'string') return { error: conv }
    const tools = vllmTools(input.tools)
    if (typeof tools === 'string') return { error: tools }
    // transformers picks the "tool_use" template, when there is one, for a request with tools.
    const template = (tools !== null && this.templates.get('tool_use')) || this.templates.get('default')!
    try {
      const text = template.render({
        ...this.specialTokens,
        ...(input.chatTemplateKwargs ?? {}),
        messages: conv,
        tools,
        add_generation_prompt: input.addGenerationPrompt ?? true,
      })
      return { text }
    } catch (err) {
      return { error: `the chat template failed: ${(err as Error)?.message ?? String(err)}` }
    }
  }

  private async encode(text: string, addSpecial: boolean): Promise<Uint32Array> {
    if (addSpecial && this.around === undefined) return Uint32Array.from((await this.rust.encode(text, null, { addSpecialTokens: true })).getIds())
    const parts = this.pieces(text)
    const found: (Uint32Array | undefined)[] = []
    const missing: number[] = []
    for (const [i, p] of parts.entries()) {
      if (typeof p === 'number') {
        found.push(undefined)
        continue
      }
      const hit = this.lookup(p)
      found.push(hit)
      if (hit === undefined) missing.push(i)
    }
    if (missing.length > 0) {
      // One call into the binding for every piece not cached: a call's fixed cost is a thread hop.
      const encoded = await this.rust.encodeBatch(missing.map((i) => parts[i] as string), { addSpecialTokens: false })
      for (const [k, i] of missing.entries()) {
        const ids = Uint32Array.from(encoded[k]!.getIds())
        found[i] = ids
        this.remember(parts[i] as string, ids)
      }
    }
    const before = addSpecial ? this.around!.before : []
    const after = addSpecial ? this.around!.after : []
    let total = before.length + after.length
    for (const [i, p] of parts.entries()) total += typeof p === 'number' ? 1 : found[i]!.length
    const out = new Uint32Array(total)
    out.set(before, 0)
    let at = before.length
    for (const [i, p] of parts.entries()) {
      if (typeof p === 'number') out[at++] = p
      else {
        out.set(found[i]!, at)
        at += found[i]!.length
      }
    }
    out.set(after, at)
    return out
  }

  /** The text cut at added tokens: texts between, ids of the tokens. One piece when cutting is off. */
  private pieces(text: string): (string | number)[] {
    const re = this.splitter
    if (re === undefined) return [text]
    const out: (string | number)[] = []
    let last = 0
    re.lastIndex = 0
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      if (m.index > last) out.push(text.slice(last, m.index))
      out.push(this.idOf.get(m[0])!)
      last = m.index + m[0].length
    }
    if (last < text.length) out.push(text.slice(last))
    return out
  }

  // Short pieces are their own keys; long ones a hash, checked against the text on a hit.
  private key(text: string): string {
    return text.length < 256 ? text : `#${xxh3(text).toString(36)}:${text.length}`
  }

  private lookup(text: string): Uint32Array | undefined {
    const e = this.cache.get(this.key(text))
    if (e !== undefined && e.text === text) {
      this.counters.cacheHits++
      return e.ids
    }
    this.counters.cacheMisses++
    return undefined
  }

  private remember(text: string, ids: Uint32Array): void {
    const flat = flatCopy(text) // a slice would keep the whole rendered chat alive
    this.cache.set(this.key(flat), { text: flat, ids }, text.length * 2 + ids.byteLength + 64)
  }

  stats(): TokenizerStats {
    return this.counters.snapshot(this.cache.size, this.cache.bytes)
  }

  async close(): Promise<void> {
    this.closed = true
    this.cache.clear()
  }
}

const ONE_BYTE = /^[\0-\xff]*$/

// A fresh string with the same code units: latin1 keeps one-byte strings one byte a
// character, utf16le round-trips anything else (lone surrogates included).
function flatCopy(s: string): string {
  const enc = ONE_BYTE.test(s) ? 'latin1' : 'utf16le'
  return Buffer.from(s, enc).toString(enc)
}
