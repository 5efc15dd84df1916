// The shapes of `make-trace` by name, and the window a trace file is cut from.
import { chat } from './chat.js'
import { mixed } from './mixed.js'
import type { TraceRow, TraceShape } from './types.js'

export const SHAPES: Readonly<Record<string, TraceShape>> = {
  [chat.name]: chat,
  [mixed.name]: mixed,
}

/**
 * The rows arriving in [startMs, startMs + durationMs) of the service, timestamps whole
 * milliseconds from startMs: a slice of a service running since time 0, so conversations
 * begun before it show up mid-way, with the ids they were given then.
 */
export function* traceWindow(rows: Iterable<TraceRow>, startMs: number, durationMs: number): Generator<TraceRow, void, undefined> {
  const end = startMs + durationMs
  for (const r of rows) {
    const t = Math.floor(r.at)
    if (t >= end) return
    if (t >= startMs) yield { ...r, at: t - startMs }
  }
}

/** One line of a hash-id trace (src/replay/hash-id-trace.ts), keys in the order releases use. */
export function traceLine(r: TraceRow): string {
  return `{"timestamp": ${r.at}, "input_length": ${r.inputLength}, "output_length": ${r.outputLength}, "hash_ids": [${r.hashIds.join(', ')}]}`
}
