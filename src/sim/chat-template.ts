// A ChatML-style template: role markers around each message's content, in order, then the
// generation prompt. The one property routing depends on: the prompt of turn k is a byte
// prefix of the prompt of turn k+1 (the generation prompt "<|im_start|>assistant\n" is
// exactly how the assistant's reply then begins), so a conversation's blocks chain.

export interface ChatMessage {
  role: string
  /** Text, or the rendered text of its parts; null for an assistant message with only tool calls. */
  content: string | null
  name?: string
  /** Already-serialized tool calls (JSON), rendered after the content. */
  toolCalls?: string
}

const START = '<|im_start|>'
const END = '<|im_end|>\n'
export const GENERATION_PROMPT = `${START}assistant\n`

export function renderChat(messages: readonly ChatMessage[], addGenerationPrompt = true): string {
  let out = ''
  for (const m of messages) {
    out += START + m.role
    if (m.name !== undefined) out += ` name=${m.name}`
    out += '\n'
    if (m.content !== null) out += m.content
    if (m.toolCalls !== undefined) out += `<tool_calls>${m.toolCalls}</tool_calls>`
    out += END
  }
  if (addGenerationPrompt) out += GENERATION_PROMPT
  return out
}
