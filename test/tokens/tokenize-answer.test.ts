// vLLM's /tokenize answer read chunk by chunk: the ids of every well-formed answer, however
// its bytes are split, the same as JSON.parse gives; every malformed one refused; and no more
// ids than the request's bound.
import { describe, expect, it } from 'vitest'
import { maxAnswerBytes, maxTokenIds, SPECIAL_TOKEN_ALLOWANCE, TokenizeAnswer } from '../../src/tokens/tokenize-answer.js'

/** The answer read in chunks of `size` bytes. */
function read(text: string, size: number, maxIds = 1 << 20): Uint32Array | string {
  const a = new TokenizeAnswer(maxIds)
  const b = Buffer.from(text)
  for (let i = 0; i < b.length; i += size) {
    const why = a.push(b.subarray(i, i + size))
    if (why !== undefined) return why
  }
  return a.end()
}

const GOOD = [
  '{"count":3,"max_model_len":8192,"tokens":[1,2,3],"token_strs":null}',
  '{"tokens":[]}',
  '{"tokens":[4294967295, 0 ,17],"count":3}',
  ' { "max_model_len" : 1 , "extra" : {"a":[1,{"b":"]}\\"["}],"c":"x"} , "token_strs": ["\\"a", "b"], "flag": true, "tokens" : [ 5 ] } \n',
  `{"count":2000,"tokens":[${Array.from({ length: 2000 }, (_, i) => (i * 7919) % 200_000).join(',')}]}`,
]

const BAD: [string, string][] = [
  ['not json {', 'not JSON'],
  ['{"count":1}', "no 'tokens' array"],
  ['{"count":3,"tokens":[1,2]}', 'count 3 for 2 tokens'],
  ['{"tokens":[1,2.5]}', 'a bad id: tokens[1]'],
  ['{"tokens":[-1]}', 'a bad id: tokens[0]'],
  ['{"tokens":[4294967296]}', 'a bad id: tokens[0]'],
  ['{"tokens":["1"]}', 'a bad id: tokens[0]'],
  ['{"tokens":[1,,2]}', 'a bad id: tokens[1]'],
  ['{"tokens":[1,]}', 'a bad id: tokens[1]'],
  ['{"tokens":[1 2]}', 'a bad id: tokens[1]'],
  ['{"tokens":"1,2"}', "no 'tokens' array"],
  ['{"tokens":[1],"tokens":[2]}', "no 'tokens' array"],
  ['{"tokens":[1]', 'not JSON (it ends early)'],
  ['{"tokens":[1]} x', 'not JSON'],
  ['', 'not JSON'],
  ['{"count":-1,"tokens":[]}', 'not a count'],
]

describe('TokenizeAnswer', () => {
  it('every well-formed answer gives what JSON.parse gives, split at any byte', () => {
    for (const text of GOOD) {
      const want = (JSON.parse(text) as { tokens: number[] }).tokens
      for (const size of [1, 2, 3, 7, 64, 1 << 20]) expect(Array.from(read(text, size) as Uint32Array), `${text.slice(0, 40)} in ${size}-byte chunks`).toEqual(want)
    }
  })

  it('every malformed answer is refused, saying why', () => {
    for (const [text, why] of BAD) for (const size of [1, 5, 1 << 20]) expect(read(text, size), `${text} in ${size}-byte chunks`).toContain(why)
  })

  it('no more ids than the bound: refused as soon as one more arrives', () => {
    const a = new TokenizeAnswer(3)
    expect(a.push(Buffer.from('{"tokens":[1,2,3'))).toBeUndefined()
    expect(a.push(Buffer.from(',4'))).toBeUndefined()
    expect(a.push(Buffer.from(','))).toBe('more than 3 ids, more than the request can have')
    expect(a.tooMany).toBe(true)
    expect(read('{"tokens":[1,2,3]}', 4, 3)).toEqual(new Uint32Array([1, 2, 3]))
  })

  it('the bound: one id a byte of the request, and the allowance; the answer bytes it implies', () => {
    expect(maxTokenIds(0)).toBe(SPECIAL_TOKEN_ALLOWANCE)
    expect(maxTokenIds(1000)).toBe(1000 + SPECIAL_TOKEN_ALLOWANCE)
    // The longest answer of n ids: each of 10 digits, ", " between them.
    const n = 100
    const longest = JSON.stringify({ count: n, max_model_len: 2 ** 31, tokens: Array(n).fill(2 ** 32 - 1), token_strs: null }).replaceAll(',', ', ')
    expect(longest.length).toBeLessThanOrEqual(maxAnswerBytes(n))
  })
})
