// vLLM production-stack's `prefixaware` routing logic, re-implemented from
// vllm-project/production-stack src/vllm_router/routers/routing_logic.py (PrefixAwareRouter)
// and src/vllm_router/prefix/hashtrie.py (HashTrie, chunk_size 128).
//
// Per request:
//   text   = the contents of all messages joined by "\n" (text parts of a list content
//            joined by spaces; no roles, no template), or a completions `prompt`;
//   match  = walk a trie keyed by the hash of each 128-character chunk of the text; every
//            node holds the set of endpoints that were sent a text through it. Start from
//            every available endpoint and, chunk by chunk, narrow to the node's endpoints
//            while that leaves any: the endpoints with the longest match (every available
//            endpoint when nothing matches);
//   choose = uniformly at random among them;
//   insert = add the chosen endpoint to every node along the text's path.
// No load signal, no threshold, and (in the versions read) no eviction: the trie grows with
// every distinct text. Differences: a seeded draw instead of random.choice; chunks of 128
// bytes of UTF-8 where Python cuts 128 code points (the same for the ASCII text of our
// workloads); and each chunk's key is a chained XXH3 (our native one, one call for the whole
// text, 53 bits kept) rather than its own xxh64 — a trie path of chained hashes names the
// same prefixes as a path of chunk hashes, so it routes the same. No `overflow` notion: `null`.
import { xxh3, xxh3Blocks } from '../../core/hash.js'
import type { PreparedRequest } from '../prepare.js'
import { Rng } from '../rng.js'
import type { Placement, ReplayRouter, RouterContext, RouterFactory } from '../routers.js'

export const STACK_CHUNK_SIZE = 128

export const stackPrefixAware: RouterFactory = {
  name: 'stack_prefixaware',
  source: 'vLLM production-stack prefixaware (vllm_router/routers/routing_logic.py, prefix/hashtrie.py), re-implemented',
  create: (ctx) => new StackPrefixAware(ctx),
}

// A node holds its children and its endpoints inline while it has one of each, and a Map /
// an insertion-ordered Set only from the second on: a text's chunks form a chain of
// one-child nodes until another text branches off, and most nodes have one endpoint, so a
// node is ~40 bytes instead of ~300 with a Map and a Set each. Tens of thousands of 48 KB
// prompts are millions of nodes; the trie, like hashtrie.py's, is never pruned.
interface TrieNode {
  /** This node's key in its parent. */
  key: number
  /** No child, the only child, or the children by key. */
  kids: TrieNode | Map<number, TrieNode> | null
  /** -1 for none, the only endpoint, or all of them in the order they were added. */
  eps: number | Set<number>
}

const node = (key: number): TrieNode => ({ key, kids: null, eps: -1 })

function child(n: TrieNode, key: number): TrieNode | undefined {
  const k = n.kids
  if (k === null) return undefined
  if (k instanceof Map) return k.get(key)
  return k.key === key ? k : undefined
}

function addChild(n: TrieNode, c: TrieNode): void {
  const k = n.kids
  if (k === null) n.kids = c
  else if (k instanceof Map) k.set(c.key, c)
  else n.kids = new Map([[k.key, k], [c.key, c]])
}

function addEndpoint(n: TrieNode, e: number): void {
  const eps = n.eps
  if (eps === -1) n.eps = e
  else if (typeof eps === 'number') {
    if (eps !== e) n.eps = new Set([eps, e])
  } else eps.add(e)
}

export class StackPrefixAware implements ReplayRouter {
  private readonly root = node(0)
  private available: Set<number>
  private readonly rng: Rng

  constructor(ctx: Pick<RouterContext, 'members' | 'seed'>) {
    this.available = new Set(ctx.members)
    this.rng = new Rng(ctx.seed, 'stack_prefixaware/choice')
  }

  route(req: PreparedRequest): Placement {
    return this.routeText(stackText(req))
  }

  routeText(text: string): Placement {
    const hashes = chunkKeys(text)
    const list = this.longestPrefixMatch(hashes)
    const chosen = list.length === 1 ? list[0]! : list[this.rng.int(list.length)]!
    this.insert(hashes, chosen)
    return { instance: chosen, overflow: null, finish: () => undefined }
  }

  /**
   * hashtrie.py longest_prefix_match: the endpoints holding the longest available match,
   * in the order a Python set of them would have been narrowed to (the child's own order).
   */
  private longestPrefixMatch(hashes: readonly number[]): number[] {
    let n = this.root
    // Until the first match, every available endpoint; then a subset of a child's.
    let selected: number[] | null = null
    const kept = (e: number): boolean => (selected === null ? this.available.has(e) : selected.includes(e))
    for (const h of hashes) {
      const c = child(n, h)
      if (c === undefined) break
      const eps = c.eps
      let next: number[]
      if (typeof eps === 'number') {
        if (eps === -1 || !kept(eps)) break
        next = selected !== null && selected.length === 1 ? selected : [eps]
      } else {
        next = []
        for (const e of eps) if (kept(e)) next.push(e)
        if (next.length === 0) break
      }
      selected = next
      n = c
    }
    return selected ?? [...this.available]
  }

  /** hashtrie.py insert: the endpoint on every node of the path, the root included. */
  private insert(hashes: readonly number[], endpoint: number): void {
    let n = this.root
    addEndpoint(n, endpoint)
    for (const h of hashes) {
      let c = child(n, h)
      if (c === undefined) {
        c = node(h)
        addChild(n, c)
      }
      addEndpoint(c, endpoint)
      n = c
    }
  }

  setInstances(members: readonly number[]): void {
    this.available = new Set(members)
  }

  close(): void {}
}

/** One key per chunk of STACK_CHUNK_SIZE bytes, the last one possibly shorter (as hashtrie.py cuts). */
function chunkKeys(text: string): number[] {
  const bytes = Buffer.from(text)
  const chain = xxh3Blocks(bytes, STACK_CHUNK_SIZE)
  const words = new Uint32Array(chain.buffer, chain.byteOffset, chain.length * 2)
  const keys: number[] = []
  for (let i = 0; i < chain.length; i++) keys.push(words[2 * i]! + (words[2 * i + 1]! & 0x1fffff) * 0x1_0000_0000)
  const rest = bytes.length % STACK_CHUNK_SIZE
  if (rest > 0) {
    const h = xxh3(bytes.subarray(bytes.length - rest), chain.length > 0 ? chain[chain.length - 1]! : 0n)
    keys.push(Number(h & 0x1f_ffff_ffff_ffffn))
  }
  return keys
}

/** production-stack's routing text for an OpenAI body (PrefixAwareRouter.route_request). */
export function stackText(req: Pick<PreparedRequest, 'api' | 'body'>): string {
  const b = req.body
  if (req.api === 'completions') return typeof b.prompt === 'string' ? b.prompt : ''
  const parts: string[] = []
  for (const m of (b.messages as unknown[] | undefined) ?? []) {
    if (m === null || typeof m !== 'object') continue
    const content = (m as { content?: unknown }).content
    if (Array.isArray(content)) {
      parts.push(
        content
          .filter((p): p is { type: 'text'; text?: unknown } => p !== null && typeof p === 'object' && (p as { type?: unknown }).type === 'text')
          .map((p) => (typeof p.text === 'string' ? p.text : ''))
          .join(' '),
      )
    } else if (content !== undefined && content !== null) parts.push(String(content))
  }
  return parts.join('\n')
}
