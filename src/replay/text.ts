// Synthetic prompt text. The simulator's default tokenizer counts 4 bytes of UTF-8 as one
// token (src/sim/tokenizer.ts), so ASCII text of exactly 4·n characters is exactly n
// tokens. Workload sizes stay in these units under `--tokenizer o200k`, where the same
// text is fewer tokens (about 5.8 characters a token for this vocabulary).
// Words are drawn from a small English vocabulary so the text looks like prose to a
// human reading a trace and gives the character-level trees of the peers (SGLang's
// radix tree) realistic branching, rather than long runs of one repeated character.
import type { Rng } from './rng.js'
import { BYTES_PER_TOKEN } from '../sim/tokenizer.js'

const VOCABULARY = (
  'the of and to in is that for it as was with be by on not he this are or his from at which but have an ' +
  'they you were her she there been one all we their has would when if so no will more can out about who ' +
  'them some could him into its then two time only like other new also these may any after first most ' +
  'report policy clause section revenue quarter customer contract account service product market growth ' +
  'system model data value table figure result method analysis region period total risk cost price rate ' +
  'order team project plan review change issue update release version support request response access ' +
  'network storage memory cluster instance latency throughput capacity cache prefix token document note ' +
  'summary appendix schedule payment invoice balance statement liability asset equity income expense tax'
).split(' ')

/** Words until exactly `tokens` tokens (4·tokens ASCII characters), starting with `head`. */
export function prose(rng: Rng, tokens: number, head = ''): string {
  const chars = tokens * BYTES_PER_TOKEN
  const parts: string[] = [head]
  let length = head.length
  while (length < chars) {
    const w = VOCABULARY[rng.int(VOCABULARY.length)]!
    parts.push(w, ' ')
    length += w.length + 1
  }
  const text = parts.join('')
  return text.length > chars ? text.slice(0, chars) : text
}

/** Tokens in ASCII text as the simulator counts them. */
export function tokensOf(text: string): number {
  return Math.ceil(Buffer.byteLength(text) / BYTES_PER_TOKEN)
}
