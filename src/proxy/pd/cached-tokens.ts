// The decode leg's answer as the client gets it: vLLM's decode instance counts every token it
// received from the prefill instance as cached (usage.prompt_tokens_details.cached_tokens), which
// would make every disaggregated request look like a full prefix-cache hit. The router puts in
// what the fleet really did not compute: the prefill instance's own cached tokens. Event streams
// pass through event by event (only an event cut across two reads waits for its rest); a JSON
// answer is rewritten whole, as it comes whole.
import { EventEmitter } from 'node:events'
import type { OutgoingHttpHeaders } from 'node:http'
import type { HeaderList } from '../hop-headers.js'
import type { Res } from '../types.js'

const CACHED = /"cached_tokens"\s*:\s*\d+/g
const MARK = Buffer.from('"cached_tokens"')
const EVENT_END = Buffer.from('\n\n')

export class CachedTokensResponse extends EventEmitter implements Res {
  #mode: 'pass' | 'sse' | 'json' = 'pass'
  #status = 0
  #headers: HeaderList = []
  #held: Buffer[] = []
  /** An event stream's bytes after its last complete event. */
  #carry: Buffer | undefined

  constructor(
    private readonly res: Res,
    /** What the answer's cached_tokens become; undefined leaves them as the instance wrote them. */
    public cached: number | undefined,
  ) {
    super()
    res.on('drain', () => this.emit('drain'))
    res.on('close', () => this.emit('close'))
  }

  get headersSent(): boolean {
    return this.#mode === 'json' ? this.#status !== 0 : this.res.headersSent
  }

  get writableEnded(): boolean {
    return this.res.writableEnded
  }

  writeHead(status: number, headers: OutgoingHttpHeaders | HeaderList = []): unknown {
    const list: HeaderList = Array.isArray(headers) ? headers : Object.entries(headers).flatMap(([k, v]) => (v === undefined ? [] : Array.isArray(v) ? v.flatMap((x) => [k, String(x)]) : [k, String(v)]))
    let type = ''
    for (let i = 0; i < list.length; i += 2) if (list[i]!.toLowerCase() === 'content-type') type = list[i + 1]!
    if (status >= 200 && status < 300 && type.startsWith('text/event-stream')) this.#mode = 'sse'
    else if (status >= 200 && status < 300 && type.startsWith('application/json')) this.#mode = 'json'
    if (this.#mode !== 'json') return this.res.writeHead(status, list)
    // Held until the body is in: its length changes.
    this.#status = status
    for (let i = 0; i < list.length; i += 2) if (list[i]!.toLowerCase() !== 'content-length') this.#headers.push(list[i]!, list[i + 1]!)
    return this
  }

  write(chunk: Buffer | string): boolean {
    const b = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    if (this.#mode === 'json') {
      this.#held.push(b)
      return true
    }
    if (this.#mode === 'pass') return this.res.write(b)
    const all = this.#carry === undefined ? b : Buffer.concat([this.#carry, b])
    const end = all.lastIndexOf(EVENT_END)
    if (end < 0) {
      this.#carry = all
      return true
    }
    this.#carry = end + 2 < all.length ? all.subarray(end + 2) : undefined
    return this.res.write(this.#rewrite(all.subarray(0, end + 2)))
  }

  end(chunk?: Buffer | string): unknown {
    if (chunk !== undefined) this.write(chunk)
    if (this.#mode === 'json') {
      const body = this.#rewrite(Buffer.concat(this.#held))
      this.res.writeHead(this.#status, [...this.#headers, 'content-length', String(body.length)])
      return this.res.end(body)
    }
    const rest = this.#carry
    this.#carry = undefined
    return rest === undefined ? this.res.end() : this.res.end(this.#rewrite(rest))
  }

  destroy(err?: Error): unknown {
    return this.res.destroy(err)
  }

  /** The request runs whole on the decode instance after all: its own figure is the truth. */
  passThrough(): void {
    this.cached = undefined
  }

  #rewrite(b: Buffer): Buffer {
    if (this.cached === undefined || b.indexOf(MARK) < 0) return b
    return Buffer.from(b.toString('utf8').replace(CACHED, `"cached_tokens":${this.cached}`))
  }
}

/** The prefill answer's cached prompt tokens (chat and completions: prompt_tokens_details; responses: input_tokens_details), if it says. */
export function cachedTokensOf(answer: unknown): number | undefined {
  const u = (answer as { usage?: Record<string, unknown> } | null)?.usage
  const d = (u?.prompt_tokens_details ?? u?.input_tokens_details) as { cached_tokens?: unknown } | null | undefined
  const n = d?.cached_tokens
  return typeof n === 'number' && Number.isInteger(n) && n >= 0 ? n : undefined
}
