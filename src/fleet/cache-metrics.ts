// vLLM's prefix-cache counters and cache configuration, read out of its /metrics as the body
// arrives, a line at a time: only the partial last line of a chunk is kept (at most MAX_LINE),
// never the page, and the reader says when what it wants is known so that the rest need not
// be read. A page is read to METRICS_PROBE_MAX_BYTES at most.
import { Family, scanSamples } from './load/samples.js'

/** Bytes of an instance's /metrics the cache probe reads at most (vLLM's page is tens of KB). */
export const METRICS_PROBE_MAX_BYTES = 8 << 20
/** A line longer than this is skipped (no sample the probe wants is near it). */
export const MAX_LINE = 64 << 10

const HITS = new Family('vllm:prefix_cache_hits_total')
const QUERIES = new Family('vllm:prefix_cache_queries_total')
/** The names before vLLM 0.9; read when the current ones are absent. */
const GPU_HITS = new Family('vllm:gpu_prefix_cache_hits_total')
const GPU_QUERIES = new Family('vllm:gpu_prefix_cache_queries_total')
const FAMILIES = [HITS, QUERIES, GPU_HITS, GPU_QUERIES]
const INFO = Buffer.from('vllm:cache_config_info{', 'latin1')
const VLLM = Buffer.from('vllm:', 'latin1')
const LF = 0x0a

const UNSEEN = 0
const IN_GROUP = 1
const DONE = 2

interface Tally {
  count: number
  sum: number
  state: typeof UNSEEN | typeof IN_GROUP | typeof DONE
}

export interface CacheMetrics {
  /** The counters summed over their label sets (current names, else the old ones); undefined when absent. */
  hits: number | undefined
  queries: number | undefined
  /** From vllm:cache_config_info's labels. */
  blocks: number | undefined
  blockSize: number | undefined
}

function startsWith(buf: Buffer, at: number, end: number, name: Buffer): boolean {
  if (end - at < name.length) return false
  for (let k = 0; k < name.length; k++) if (buf[at + k] !== name[k]) return false
  return true
}

export class CacheMetricsReader {
  /** Bytes fed so far. */
  bytes = 0
  #rest: Buffer | undefined
  /** Inside a line longer than MAX_LINE: the bytes up to its end are dropped. */
  #skipping = false
  readonly #tallies: Tally[] = FAMILIES.map(() => ({ count: 0, sum: 0, state: UNSEEN }))
  #blocks: number | undefined
  #blockSize: number | undefined
  #info = false

  /** Takes the next chunk of the body; true once everything wanted is known (stop reading). */
  feed(chunk: Buffer): boolean {
    this.bytes += chunk.length
    let i = 0
    if (this.#rest !== undefined || this.#skipping) {
      const lf = chunk.indexOf(LF)
      if (lf < 0) {
        this.#keep(chunk, 0)
        return false
      }
      if (this.#skipping) this.#other()
      else {
        const line = Buffer.concat([this.#rest!, chunk.subarray(0, lf)])
        if (line.length > MAX_LINE) this.#other()
        else this.#line(line, 0, line.length)
      }
      this.#rest = undefined
      this.#skipping = false
      i = lf + 1
    }
    for (;;) {
      const lf = chunk.indexOf(LF, i)
      if (lf < 0) break
      this.#line(chunk, i, lf)
      i = lf + 1
    }
    if (i < chunk.length) this.#keep(chunk, i)
    return this.done
  }

  /** Whether the current counters' groups have ended and the configuration line was seen. */
  get done(): boolean {
    return this.#tallies[0]!.state === DONE && this.#tallies[1]!.state === DONE && this.#info
  }

  /** What was found: at the end of the body, or where the reading stopped. */
  result(): CacheMetrics {
    // A last line without its newline is whole at the end of the body.
    if (this.#rest !== undefined && !this.#skipping) this.#line(this.#rest, 0, this.#rest.length)
    this.#rest = undefined
    const sum = (a: Tally, b: Tally) => (a.count > 0 ? a.sum : b.count > 0 ? b.sum : undefined)
    const [hits, queries, gpuHits, gpuQueries] = this.#tallies as [Tally, Tally, Tally, Tally]
    return { hits: sum(hits, gpuHits), queries: sum(queries, gpuQueries), blocks: this.#blocks, blockSize: this.#blockSize }
  }

  #keep(chunk: Buffer, from: number): void {
    if (this.#skipping) return
    const have = this.#rest?.length ?? 0
    if (have + chunk.length - from > MAX_LINE) {
      this.#rest = undefined
      this.#skipping = true
      return
    }
    // A copy: the chunk itself is not held.
    this.#rest = this.#rest === undefined ? Buffer.from(chunk.subarray(from)) : Buffer.concat([this.#rest, chunk.subarray(from)])
  }

  /** A line that is none of the families': it ends any group in progress. */
  #other(): void {
    for (const t of this.#tallies) if (t.state === IN_GROUP) t.state = DONE
  }

  #line(buf: Buffer, at: number, end: number): void {
    if (!startsWith(buf, at, end, VLLM)) return this.#other()
    for (let f = 0; f < FAMILIES.length; f++) {
      const fam = FAMILIES[f]!
      if (!startsWith(buf, at, end, fam.bytes)) continue
      const c = buf[at + fam.bytes.length]
      if (c !== 0x7b && c !== 0x20 && c !== 0x09) continue // a longer name (…_created)
      const s = scanSamples(buf.subarray(at, end), fam, true)
      if (s.count === 0) continue
      const t = this.#tallies[f]!
      for (const o of this.#tallies) if (o !== t && o.state === IN_GROUP) o.state = DONE
      if (t.state === DONE) return // a family's samples are one group; a second one is not read
      t.state = IN_GROUP
      t.count += s.count
      t.sum += s.sum
      return
    }
    this.#other()
    if (!this.#info && startsWith(buf, at, end, INFO)) {
      this.#info = true
      const labels = buf.toString('latin1', at + INFO.length, end)
      const blocks = /num_gpu_blocks="(\d+)"/.exec(labels)
      const size = /block_size="(\d+)"/.exec(labels)
      if (blocks) this.#blocks = Number(blocks[1])
      if (size) this.#blockSize = Number(size[1])
    }
  }
}
