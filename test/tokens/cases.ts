// Requests the tokenizer tests share: chats with multi-byte text, multi-part content and
// tool calls, and completions, each as a TokenizeInput and as the OpenAI body it came from.
import type { TokenizeInput } from '../../src/tokens/index.js'

export interface Case {
  name: string
  body: Record<string, unknown>
  input: TokenizeInput
}

const chat = (name: string, messages: unknown[], extra: Record<string, unknown> = {}): Case => ({
  name,
  body: { messages, ...extra },
  input: { kind: 'chat', model: String(extra.model ?? 'sim-model'), messages, ...(extra.add_generation_prompt === false ? { addGenerationPrompt: false } : {}) },
})

export function cases(model: string): Case[] {
  const m = { model }
  return [
    chat('plain chat', [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello there, how are you?' }], m),
    chat('emoji and CJK', [{ role: 'user', content: '🎉 日本語のテキスト 한국어 中文 — “quotes” 😀👍🏽' }], m),
    chat(
      'multi-part content',
      [{ role: 'user', content: [{ type: 'text', text: 'first part' }, { type: 'text', text: 'second 部分' }] }],
      m,
    ),
    chat(
      'tool calls',
      [
        { role: 'user', content: 'weather?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 't1', type: 'function', function: { name: 'get', arguments: '{"city":"Oslo"}' } }] },
        { role: 'tool', content: '12C', tool_call_id: 't1', name: 'get' },
      ],
      m,
    ),
    chat('no generation prompt', [{ role: 'user', content: 'odd-length text!' }], { ...m, add_generation_prompt: false }),
    { name: 'completion text', body: { prompt: 'Once upon a time, ünïcödé 🙂' , ...m }, input: { kind: 'completion', model, prompt: 'Once upon a time, ünïcödé 🙂' } },
  ]
}
