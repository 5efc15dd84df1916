// SGLang router's approximate radix tree, re-implemented from
// sgl-project/sglang sgl-router/src/policies/tree.rs: one tree of request text shared by
// all workers, each node remembering which workers were sent text through it and when.
// It approximates each worker's prefix cache without asking the workers anything.
//
// Same semantics as tree.rs: insert(text, worker) walks and splits nodes, adding the
// node's characters to the worker's count the first time the worker reaches the node;
// prefixMatch(text) returns the characters matched and the first worker listed on the
// deepest node reached (a partial match of a node counts), refreshing that worker's times
// along the path; evictBySize pops least recently used leaves of over-size workers;
// removeWorker strips a worker bottom-up. Simplifications: characters are UTF-16 code
// units (Rust counts code points; the same for text in the Basic Multilingual Plane), and
// "the first worker listed" is insertion order (tree.rs iterates a DashMap, whose order is
// arbitrary). Time is simulated milliseconds.

interface Node {
  children: Map<number, Node>
  text: string
  /** worker → last access time */
  access: Map<number, number>
  parent: Node | null
}

function node(text: string, parent: Node | null): Node {
  return { children: new Map(), text, access: new Map(), parent }
}

/** Characters of `a` (from 0) and `b` (from `at`) that agree. */
function shared(a: string, b: string, at: number): number {
  const n = Math.min(a.length, b.length - at)
  // Equality of two flat strings is a memcmp; startsWith and charCodeAt loops were 5-8x
  // slower on 32 K-character documents. The common cases are a node matched whole and
  // text diverging within a few characters; a long partial match (a document shared up
  // to its question) narrows down by chunks.
  if (n === a.length && b.substring(at, at + n) === a) return n
  let i = 0
  while (i + 1024 <= n && a.substring(i, i + 1024) === b.substring(at + i, at + i + 1024)) i += 1024
  while (i < n && a.charCodeAt(i) === b.charCodeAt(at + i)) i++
  return i
}

/**
 * A flat copy of `s`. Node texts are cut from request texts; V8 keeps a cut as a "sliced"
 * string pointing into its parent, which (1) keeps the whole parent alive (a question in
 * a leaf would pin the 32 KB request it came from) and (2) makes startsWith against it
 * ~8x slower than between two flat strings (measured: 79 µs vs 10 µs for 32 K chars),
 * which made tree walks most of a replay's time. JSON.parse returns a fresh flat string.
 */
function own(s: string): string {
  if (s.length < 13) return s
  // ASCII text (every workload's, and every replayed hash-id trace's) through latin1 bytes:
  // ~5x faster than JSON on 48 KB prompts. Other text through JSON, which keeps any UTF-16
  // (lone surrogates included) as it is.
  if (Buffer.byteLength(s, 'utf8') === s.length) return Buffer.from(s, 'latin1').toString('latin1')
  return JSON.parse(JSON.stringify(s)) as string
}

export class ApproxTree {
  private readonly root = node('', null)
  /** Characters held per worker (tree.rs tenant_char_count). */
  readonly chars = new Map<number, number>()

  insert(text: string, worker: number, now: number): void {
    let prev = this.root
    prev.access.set(worker, now)
    if (!this.chars.has(worker)) this.chars.set(worker, 0)
    let idx = 0
    while (idx < text.length) {
      const first = text.charCodeAt(idx)
      const matched = prev.children.get(first)
      if (matched === undefined) {
        const rest = own(text.slice(idx))
        const leaf = node(rest, prev)
        leaf.access.set(worker, now)
        this.add(worker, rest.length)
        prev.children.set(first, leaf)
        return
      }
      const n = shared(matched.text, text, idx)
      if (n < matched.text.length) {
        // [prev] → [matched] becomes [prev] → [head] → [matched with the tail]
        const head = node(own(matched.text.slice(0, n)), prev)
        for (const [w, t] of matched.access) head.access.set(w, t)
        matched.text = own(matched.text.slice(n))
        matched.parent = head
        head.children.set(matched.text.charCodeAt(0), matched)
        prev.children.set(first, head)
        prev = head
      } else {
        prev = matched
      }
      if (!prev.access.has(worker)) this.add(worker, prev.text.length)
      prev.access.set(worker, now)
      idx += n
    }
  }

  prefixMatch(text: string, now: number): { matched: number; worker: number } {
    let cur = this.root
    let idx = 0
    while (idx < text.length) {
      const next = cur.children.get(text.charCodeAt(idx))
      if (next === undefined) break
      const n = shared(next.text, text, idx)
      idx += n
      cur = next
      if (n < next.text.length) break
    }
    let worker = -1
    for (const w of cur.access.keys()) {
      worker = w
      break
    }
    if (worker >= 0) for (let p: Node | null = cur; p !== null; p = p.parent) p.access.set(worker, now)
    return { matched: idx, worker }
  }

  /** The worker holding the fewest characters (the first listed on a tie); -1 if none. */
  smallest(): number {
    let best = -1
    let min = Infinity
    for (const [w, c] of this.chars) {
      if (c < min) {
        min = c
        best = w
      }
    }
    return best
  }

  /** Evicts least recently used leaves of every worker holding more than `max` characters. */
  evictBySize(max: number): void {
    let over = false
    for (const c of this.chars.values()) if (c > max) over = true
    if (!over) return // tree.rs walks the tree and evicts nothing in this case
    const heap = new LeafHeap()
    const stack = [this.root]
    while (stack.length > 0) {
      const cur = stack.pop()!
      for (const child of cur.children.values()) stack.push(child)
      for (const w of leafWorkers(cur)) heap.push(cur.access.get(w)!, w, cur)
    }
    for (let e = heap.pop(); e !== undefined; e = heap.pop()) {
      if ((this.chars.get(e.worker) ?? 0) <= max) continue
      this.detach(e.node, e.worker)
      const parent = e.node.parent
      if (parent !== null && leafWorkers(parent).includes(e.worker)) heap.push(parent.access.get(e.worker)!, e.worker, parent)
    }
  }

  /** Removes a worker from every node (a worker left the fleet). */
  removeWorker(worker: number): void {
    const queue: Node[] = []
    const stack = [this.root]
    while (stack.length > 0) {
      const cur = stack.pop()!
      for (const child of cur.children.values()) stack.push(child)
      if (leafWorkers(cur).includes(worker)) queue.push(cur)
    }
    while (queue.length > 0) {
      const cur = queue.shift()!
      this.detach(cur, worker)
      const parent = cur.parent
      if (parent !== null && leafWorkers(parent).includes(worker)) queue.push(parent)
    }
    this.chars.delete(worker)
  }

  /** Characters per worker counted by walking the tree (tests compare it with `chars`). */
  countByWalking(): Map<number, number> {
    const out = new Map<number, number>()
    const stack = [this.root]
    while (stack.length > 0) {
      const cur = stack.pop()!
      for (const w of cur.access.keys()) out.set(w, (out.get(w) ?? 0) + cur.text.length)
      for (const child of cur.children.values()) stack.push(child)
    }
    return out
  }

  private add(worker: number, n: number): void {
    this.chars.set(worker, (this.chars.get(worker) ?? 0) + n)
  }

  private detach(cur: Node, worker: number): void {
    if (cur.access.delete(worker)) {
      const c = this.chars.get(worker)
      if (c !== undefined) this.chars.set(worker, Math.max(0, c - cur.text.length))
    }
    if (cur.children.size === 0 && cur.access.size === 0 && cur.parent !== null && cur.text.length > 0) {
      cur.parent.children.delete(cur.text.charCodeAt(0))
    }
  }
}

/** Workers on `n` that are on none of its children: `n` is a leaf of their trees. */
function leafWorkers(n: Node): number[] {
  const out: number[] = []
  for (const w of n.access.keys()) {
    let below = false
    for (const c of n.children.values()) {
      if (c.access.has(w)) {
        below = true
        break
      }
    }
    if (!below) out.push(w)
  }
  return out
}

interface LeafEntry {
  at: number
  worker: number
  node: Node
}

/** Min-heap of leaves by last access. */
class LeafHeap {
  private readonly items: LeafEntry[] = []

  push(at: number, worker: number, n: Node): void {
    const items = this.items
    const e = { at, worker, node: n }
    let i = items.length
    items.push(e)
    while (i > 0) {
      const p = (i - 1) >> 1
      if (items[p]!.at <= at) break
      items[i] = items[p]!
      i = p
    }
    items[i] = e
  }

  pop(): LeafEntry | undefined {
    const items = this.items
    const top = items[0]
    const last = items.pop()
    if (top === undefined || last === undefined || items.length === 0) return top
    let i = 0
    for (;;) {
      const l = 2 * i + 1
      if (l >= items.length) break
      const r = l + 1
      const c = r < items.length && items[r]!.at < items[l]!.at ? r : l
      if (items[c]!.at >= last.at) break
      items[i] = items[c]!
      i = c
    }
    items[i] = last
    return top
  }
}
