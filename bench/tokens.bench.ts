// Local tokenizers for the exact view, measured on one real-sized byte-level BPE (o200k as
// a Hugging Face tokenizer.json: no model's own files can be fetched here) over ChatML chats
// of about 1k, 8k and 32k tokens, in the same run:
//   - Hugging Face's Rust tokenizers (the `tokenizers` napi binding, async, off the event
//     loop) encoding the whole rendered chat: the baseline of every ratio;
//   - the pure-JS port (@huggingface/tokenizers, synchronous: it holds the event loop);
//   - gpt-tokenizer (the simulator's o200k, not a Hugging Face loader), for scale;
//   - localTokenizer (Rust, pieces between added tokens cached): with its cache off (a new
//     chat: the cost of cutting and of the batch call over the whole encode) and on, for the
//     next turn of a chat whose history it has seen (the steady state of a chat);
//   - remoteTokenizer (its cache off) against a simulator worker's /tokenize on loopback,
//     with the `bytes` tokenizer so that nearly all of it is the round trip and the JSON:
//     the floor of the remote mode (a real vLLM adds its template and tokenizer).
// Every tokenizer here keeps its BPE's own word cache warm (the same chat is encoded again
// and again), as a server's would be for common words.
// Exactness: the two Hugging Face implementations must give the same ids on every chat.
// Run: npx tsx bench/tokens.bench.ts   (BENCH_TIME_MS=… per task, default 1500)
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Tokenizer as JsTokenizer } from '@huggingface/tokenizers'
import { encode as gptEncode } from 'gpt-tokenizer/encoding/o200k_base'
import { Bench } from 'tinybench'
import { Tokenizer as RustTokenizer } from 'tokenizers'
import { startSimFleet } from '../src/sim/index.js'
import { localTokenizer, remoteTokenizer } from '../src/tokens/index.js'
import { o200kTokenizerJson } from '../test/helpers/o200k-tokenizer-json.js'
import { machine, pad } from './harness.js'

const TIME = Number(process.env.BENCH_TIME_MS ?? 1500)
const CHATML = String.raw`{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

console.log(`machine: ${machine()}`)

// Text that is not one paragraph repeated (a BPE's word cache would flatter it): the
// project's own sources and docs, cut into turns.
function corpus(): string {
  const root = path.join(import.meta.dirname, '..')
  let out = ''
  for (const dir of ['src/sim', 'src/core', 'src/proxy', 'docs']) {
    for (const f of readdirSync(path.join(root, dir)).sort()) {
      if (f.endsWith('.ts') || f.endsWith('.md')) out += readFileSync(path.join(root, dir, f), 'utf8')
    }
  }
  return out
}

interface Chat {
  messages: { role: string; content: string }[]
  text: string
}

const render = (messages: Chat['messages']): string =>
  messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n'

/** A chat of about `tokens` o200k tokens: a system prompt, then user/assistant turns of ~400 tokens. */
function chatOf(tokens: number, text: string, offset: number): Chat {
  const messages: Chat['messages'] = [{ role: 'system', content: 'You are a careful reviewer of TypeScript code. Answer briefly.' }]
  let at = offset
  let count = 0
  while (count < tokens) {
    const content = text.slice(at, at + 1600)
    at += 1600
    messages.push({ role: messages.length % 2 === 1 ? 'user' : 'assistant', content })
    count += gptEncode(content).length + 4
  }
  return { messages, text: render(messages) }
}

const dir = mkdtempSync(path.join(os.tmpdir(), 'tokens-bench-'))
try {
  let t0 = performance.now()
  const json = o200kTokenizerJson()
  writeFileSync(path.join(dir, 'tokenizer.json'), json)
  writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<|im_end|>', chat_template: CHATML }))
  console.log(`o200k tokenizer.json: ${(json.length / 1e6).toFixed(1)} MB, built in ${(performance.now() - t0).toFixed(0)} ms`)
  t0 = performance.now()
  const rust = RustTokenizer.fromString(json)
  const rustLoad = performance.now() - t0
  t0 = performance.now()
  const js = new JsTokenizer(JSON.parse(json), {})
  const jsLoad = performance.now() - t0
  console.log(`load: tokenizers (Rust) ${rustLoad.toFixed(0)} ms, @huggingface/tokenizers (JS) ${jsLoad.toFixed(0)} ms`)

  const text = corpus()
  const sizes = [1000, 8000, 32000]
  const chats = sizes.map((n, i) => chatOf(n, text, i * 7919))

  // Exactness first: the two implementations on every chat, with the markers as added tokens.
  for (const [i, c] of chats.entries()) {
    const a = (await rust.encode(c.text, null, { addSpecialTokens: false })).getIds()
    const b = js.encode(c.text, { add_special_tokens: false }).ids
    const same = a.length === b.length && a.every((x, k) => x === b[k])
    console.log(`exactness ~${sizes[i]! / 1000}k chat: ${a.length} tokens, Rust ${same ? '==' : '!='} JS`)
    if (!same) process.exitCode = 1
  }

  const sim = await startSimFleet({ instances: 1, profile: 'tiny', port: 0, host: '127.0.0.1', model: 'm', maxModelLen: 1 << 20 })
  const remote = remoteTokenizer({ cacheEntries: 0, timeoutMs: 10_000 })
  const uncached = await localTokenizer({ path: dir, cacheEntries: 0 })

  console.log(`\nper chat (median); ratio = Rust whole ÷ this, higher is faster`)
  console.log(`${pad('chat', 8)}${pad('Rust whole', 14)}${pad('JS whole', 18)}${pad('gpt-tokenizer', 18)}${pad('local, no cache', 20)}${pad('local, next turn', 20)}${pad('remote (sim)', 20)}`)
  for (const [i, c] of chats.entries()) {
    const next = [...c.messages, { role: 'assistant', content: 'Looks fine.' }, { role: 'user', content: text.slice(99_000, 99_400) }]
    const nextText = render(next)
    const warm = await localTokenizer({ path: dir })
    await warm.tokens({ kind: 'chat', model: 'm', messages: c.messages })
    const bench = new Bench({ time: TIME, warmupTime: 200 })
    bench
      .add('rust', async () => {
        await rust.encode(nextText, null, { addSpecialTokens: false })
      })
      .add('js', () => {
        js.encode(nextText, { add_special_tokens: false })
      })
      .add('gpt', () => {
        gptEncode(nextText, { disallowedSpecial: new Set() })
      })
      .add('cold', async () => {
        await uncached.tokens({ kind: 'chat', model: 'm', messages: next })
      })
      .add('remote', async () => {
        if ((await remote.tokens({ kind: 'chat', model: 'm', messages: next }, sim.urls[0])) === undefined) throw new Error('remote failed')
      })
      .add('warm', async () => {
        await warm.tokens({ kind: 'chat', model: 'm', messages: next })
      })
    await bench.run()
    const ms = (name: string): number => {
      const r = bench.getTask(name)!.result
      if (r.state !== 'completed') throw new Error(`${name}: ${r.state}`)
      return r.latency.p50
    }
    const base = ms('rust')
    const cell = (name: string) => `${ms(name).toFixed(2)} ms (${(base / ms(name)).toFixed(2)}×)`
    console.log(`${pad(`~${sizes[i]! / 1000}k`, 8)}${pad(`${base.toFixed(2)} ms`, 14)}${pad(cell('js'), 18)}${pad(cell('gpt'), 18)}${pad(cell('cold'), 20)}${pad(cell('warm'), 20)}${pad(cell('remote'), 20)}`)
    const s = warm.stats()
    console.log(`         next turn: ${next.length} messages; cache holds ${s.cacheEntries} pieces, ${(s.cacheBytes / 1024).toFixed(0)} KiB`)
    await warm.close()
  }
  await Promise.all([remote.close(), uncached.close(), sim.close()])
} finally {
  rmSync(dir, { recursive: true, force: true })
}
