// A min-heap of things by their `at` time: the earliest comes out first. Workloads and trace
// shapes interleave many sources (conversations, streams) in arrival order with it.

export interface Timed {
  at: number
}

export function pushByTime<T extends Timed>(heap: T[], item: T): void {
  let i = heap.length
  heap.push(item)
  while (i > 0) {
    const parent = (i - 1) >> 1
    if (heap[parent]!.at <= item.at) break
    heap[i] = heap[parent]!
    i = parent
  }
  heap[i] = item
}

/** The earliest item, removed; undefined when the heap is empty. */
export function popByTime<T extends Timed>(heap: T[]): T | undefined {
  const top = heap[0]
  const last = heap.pop()
  if (top === undefined || last === undefined || heap.length === 0) return top
  let i = 0
  for (;;) {
    const l = 2 * i + 1
    if (l >= heap.length) break
    const r = l + 1
    const c = r < heap.length && heap[r]!.at < heap[l]!.at ? r : l
    if (heap[c]!.at >= last.at) break
    heap[i] = heap[c]!
    i = c
  }
  heap[i] = last
  return top
}
