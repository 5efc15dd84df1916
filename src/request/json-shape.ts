// How deep a JSON body nests and how many arrays and objects it holds, learnt chunk by chunk
// as it arrives, before anything parses it. JSON.parse of deeply nested or container-heavy
// text costs far more time and memory per byte than of strings, so these two numbers decide
// whether a body is refused, parsed here, or parsed off the event loop.
import { tooDeep } from './errors.js'

const QUOTE = 0x22
const BACKSLASH = 0x5c

export class JsonShape {
  /** Arrays and objects opened so far. */
  containers = 0
  #depth = 0
  #inString = false
  #escaped = false

  constructor(readonly maxDepth: number) {}

  /** Throws json_too_deep as soon as the nesting passes maxDepth. */
  feed(b: Uint8Array): void {
    const n = b.length
    let i = 0
    let depth = this.#depth
    let containers = this.containers
    let inString = this.#inString
    let escaped = this.#escaped
    // Positions of the next quote and backslash in this chunk; most of a prompt is string
    // text, which these let us skip with memchr instead of a byte loop. Kept across
    // escapes so a string full of them is still scanned once.
    let quote = -2
    let slash = -2
    while (i < n) {
      if (inString) {
        if (escaped) {
          escaped = false
          i++
          continue
        }
        if (quote < i && quote !== -1) quote = b.indexOf(QUOTE, i)
        if (slash < i && slash !== -1) slash = b.indexOf(BACKSLASH, i)
        const q = quote === -1 ? n : quote
        const s = slash === -1 ? n : slash
        if (q === n && s === n) break
        if (s < q) {
          escaped = true
          i = s + 1
        } else {
          inString = false
          i = q + 1
        }
        continue
      }
      const c = b[i++]!
      if (c === QUOTE) inString = true
      else if (c === 0x5b || c === 0x7b) {
        containers++
        if (++depth > this.maxDepth) throw tooDeep(this.maxDepth)
      } else if (c === 0x5d || c === 0x7d) depth--
    }
    this.#depth = depth
    this.containers = containers
    this.#inString = inString
    this.#escaped = escaped
  }
}
