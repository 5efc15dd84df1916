// A Hugging Face tokenizer.json for OpenAI's o200k_base, built from gpt-tokenizer's ranks:
// a real 200k-token byte-level BPE to measure and check the local tokenizers on, since no
// model's own tokenizer files can be fetched here. tiktoken merges by rank; an HF BPE merges
// by its merges list, so each token's merge is the pair its bytes reduce to under the ranks
// below its own (the usual tiktoken-to-HF conversion), and `ignore_merges` keeps tiktoken's
// rule that a piece found whole in the vocabulary is one token.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'

const require = createRequire(import.meta.url)

// GPT-2's printable stand-ins for bytes, which byte-level vocabularies are written in.
function byteToUnicode(): string[] {
  const keep: number[] = []
  for (let b = 0x21; b <= 0x7e; b++) keep.push(b)
  for (let b = 0xa1; b <= 0xac; b++) keep.push(b)
  for (let b = 0xae; b <= 0xff; b++) keep.push(b)
  const out: string[] = new Array(256)
  let n = 0
  for (let b = 0; b < 256; b++) out[b] = String.fromCodePoint(keep.includes(b) ? b : 256 + n++)
  return out
}

const CONTRACTION = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)?`
const LETTERS_A = String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+`
const LETTERS_B = String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*`
/** o200k's pre-tokenizer pattern, as HF writes it (its Rust regex reads `(?i:…)`). */
export const O200K_PATTERN = `${LETTERS_A}${CONTRACTION}|${LETTERS_B}${CONTRACTION}|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`

export const O200K_SPECIALS: [string, number][] = [
  ['<|endoftext|>', 199_999],
  ['<|fim_prefix|>', 200_000],
  ['<|fim_middle|>', 200_001],
  ['<|fim_suffix|>', 200_002],
  ['<|im_start|>', 200_003],
  ['<|im_end|>', 200_004],
  ['<|im_sep|>', 200_005],
  ['<|endofprompt|>', 200_006],
]

function ranks(): Buffer[] {
  const file = path.join(path.dirname(require.resolve('gpt-tokenizer/package.json')), 'data', 'o200k_base.tiktoken')
  const out: Buffer[] = []
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (line === '') continue
    const [b64, rank] = line.split(' ')
    out[Number(rank)] = Buffer.from(b64!, 'base64')
  }
  return out
}

/** The pair `bytes` reduces to when merged by rank, using ranks below `limit` only. */
function lastMerge(bytes: Buffer, rankOf: Map<string, number>, limit: number): [Buffer, Buffer] {
  let parts: Buffer[] = [...bytes].map((b) => Buffer.from([b]))
  while (parts.length > 2) {
    let best = -1
    let bestRank = Infinity
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = rankOf.get(Buffer.concat([parts[i]!, parts[i + 1]!]).toString('latin1'))
      if (r !== undefined && r < limit && r < bestRank) {
        bestRank = r
        best = i
      }
    }
    if (best < 0) throw new Error(`token ${bytes.toString('hex')} has no merge path`)
    parts = [...parts.slice(0, best), Buffer.concat([parts[best]!, parts[best + 1]!]), ...parts.slice(best + 2)]
  }
  return [parts[0]!, parts[1]!]
}

export interface O200kJsonOptions {
  /** Extra added tokens (content, id), e.g. a chat template's markers. */
  extraSpecials?: [string, number][]
  /** A post-processor (TemplateProcessing) to add, e.g. to test BOS handling. */
  postProcessor?: unknown
}

/** The tokenizer.json text. Takes a few seconds (200k merges derived). */
export function o200kTokenizerJson(o: O200kJsonOptions = {}): string {
  const tokens = ranks()
  const b2u = byteToUnicode()
  const show = (b: Buffer): string => [...b].map((x) => b2u[x]).join('')
  const rankOf = new Map<string, number>()
  tokens.forEach((t, r) => rankOf.set(t.toString('latin1'), r))
  const vocab: Record<string, number> = {}
  const merges: [string, string][] = []
  tokens.forEach((t, r) => {
    vocab[show(t)] = r
    if (t.length < 2) return
    const [a, b] = lastMerge(t, rankOf, r)
    merges.push([show(a), show(b)])
  })
  // Added tokens are in the vocabulary too: Hugging Face gives an added token that is not
  // the id of the vocabulary's entry, or else the next free id, whatever its "id" says.
  const specials = [...O200K_SPECIALS, ...(o.extraSpecials ?? [])]
  for (const [content, id] of specials) vocab[content] = id
  const added = specials.map(([content, id]) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }))
  return JSON.stringify({
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: O200K_PATTERN }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
      ],
    },
    post_processor: o.postProcessor ?? null,
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: true,
      vocab,
      merges,
    },
  })
}
