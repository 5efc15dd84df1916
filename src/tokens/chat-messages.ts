// OpenAI messages as sent, turned into the conversation vLLM hands a chat template (its
// chat_utils: parse_chat_messages and _postprocess_messages), so that a template rendered
// here sees what the engine's does:
//   - content: a string or text parts; in the "string" format the parts' texts joined with
//     "\n", in the "openai" format a list of {type: 'text', text} (a string content too);
//     null content is no parts: "" or [];
//   - assistant tool_calls kept, their function.arguments parsed from JSON (a string that
//     is not JSON becomes {}), an empty list dropped; reasoning kept;
//   - tool messages: tool_call_id kept, text parts joined to a string in either format;
//   - name (a string) kept.
// Images, audio and other media become model-specific placeholder tokens in the engine's
// processor, which the router cannot reproduce: such a request is not tokenized here.

export type ContentFormat = 'string' | 'openai'

export type Conversation = Record<string, unknown>[]

type Json = Record<string, unknown>

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v)

const TEXT_PARTS = new Set(['text', 'input_text', 'output_text', 'refusal', 'thinking'])

/** The conversation, or a string saying why the messages cannot be rendered here. */
export function conversation(messages: readonly unknown[], format: ContentFormat): Conversation | string {
  const out: Conversation = []
  for (const [i, m] of messages.entries()) {
    if (!isObject(m) || typeof m.role !== 'string') return `messages[${i}] is not a message with a role`
    const texts = contentTexts(m.content, i)
    if (typeof texts === 'string') return texts
    const msg: Json = { role: m.role, content: format === 'openai' ? texts.map((text) => ({ type: 'text', text })) : texts.join('\n') }
    if (m.role === 'assistant') {
      if (m.tool_calls !== undefined && m.tool_calls !== null) {
        if (!Array.isArray(m.tool_calls)) return `messages[${i}].tool_calls is not a list`
        if (m.tool_calls.length > 0) msg.tool_calls = m.tool_calls.map(parsedArguments)
      }
      if (m.reasoning !== undefined && m.reasoning !== null) {
        msg.reasoning = m.reasoning
        msg.reasoning_content = m.reasoning
      }
    } else if (m.role === 'tool') {
      if (m.tool_call_id !== undefined) msg.tool_call_id = m.tool_call_id
      if (Array.isArray(msg.content)) msg.content = texts.join('\n')
    }
    if (typeof m.name === 'string') msg.name = m.name
    if (m.role === 'developer') msg.tools = m.tools ?? null
    out.push(msg)
  }
  return out
}

function contentTexts(content: unknown, i: number): string[] | string {
  if (content === undefined || content === null) return []
  if (typeof content === 'string') return [content]
  if (!Array.isArray(content)) return `messages[${i}].content is neither a string nor a list of parts`
  const texts: string[] = []
  for (const [j, p] of content.entries()) {
    if (typeof p === 'string') {
      texts.push(p)
      continue
    }
    if (!isObject(p) || typeof p.type !== 'string') return `messages[${i}].content[${j}] has no type`
    if (!TEXT_PARTS.has(p.type)) return `messages[${i}].content[${j}] is a '${p.type}' part, which only the engine's processor can tokenize`
    const text = p.type === 'refusal' ? p.refusal : p.type === 'thinking' ? p.thinking : p.text
    if (text === undefined || text === null) continue // vLLM skips a text part without text
    if (typeof text !== 'string') return `messages[${i}].content[${j}] has a text that is not a string`
    texts.push(text)
  }
  return texts
}

// A copy with function.arguments as the object templates expect (the client's own message is not changed).
function parsedArguments(call: unknown): unknown {
  if (!isObject(call) || !isObject(call.function)) return call
  const args = call.function.arguments
  let parsed: unknown = args
  if (typeof args === 'string') {
    try {
      parsed = JSON.parse(args)
    } catch {
      parsed = {}
    }
  } else if (typeof args !== 'object' || args === null) {
    parsed = {}
  }
  return { ...call, function: { ...call.function, arguments: parsed } }
}

/**
 * Which format a template reads content in: "openai" when it loops over a message's content
 * (as vLLM's detection finds in the template's syntax tree), "string" otherwise. This looks
 * for the loop in the source; the localTokenizer option contentFormat overrides it.
 */
export function detectContentFormat(template: string): ContentFormat {
  return /\{%-?\s*for\s+\w+\s+in\s+[\w.]+(?:\[\s*['"]content['"]\s*\]|\.content)\s*(?:\||-?%\})/.test(template) ? 'openai' : 'string'
}

/**
 * Tools as vLLM hands them to the template: each validated as a function tool and dumped
 * with its declared fields first, null when not sent (a template that writes `tools |
 * tojson` shows them), then whatever else the client sent. A tool that is not a function
 * tool is a reason not to render here.
 */
export function vllmTools(tools: unknown): Record<string, unknown>[] | null | string {
  if (tools === undefined || tools === null) return null
  if (!Array.isArray(tools)) return 'tools is not a list'
  const out: Record<string, unknown>[] = []
  for (const [i, t] of tools.entries()) {
    if (!isObject(t) || (t.type !== undefined && t.type !== 'function') || !isObject(t.function) || typeof t.function.name !== 'string') {
      return `tools[${i}] is not a function tool with a name`
    }
    const { type: _type, function: fn, ...rest } = t
    const { name, description, parameters, strict, ...fnRest } = fn
    out.push({
      type: 'function',
      function: { name, description: description ?? null, parameters: parameters ?? null, strict: strict ?? null, ...fnRest },
      ...rest,
    })
  }
  return out
}
