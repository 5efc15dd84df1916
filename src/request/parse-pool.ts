// Worker threads that parse large or container-heavy request bodies, so one request's
// JSON.parse never holds up the event loop every other request shares. Workers start on
// first use, never keep the process alive, and each has a bounded heap: a body that needs
// more to parse fails alone (413), and a worker that dies is replaced for the next task.
import { availableParallelism } from 'node:os'
import { Worker } from 'node:worker_threads'
import { ExtractedKey, type NativeKeyOptions, type NativeRequest } from '../core/key/native-key.js'
import type { OpenAIApi, OpenAIRequest } from '../core/key/openai-key.js'
import { parserFailed, ProxyError, tooComplex } from './errors.js'
import type { ParseReply, ParseTask } from './parse-worker.js'

/** A body read for routing: by the native extraction, or by openAIRequest when it declined. */
export type ParsedBody = { native: NativeRequest; request?: never } | { request: OpenAIRequest; native?: never }

export interface ParsePoolOptions {
  /** Workers at most (default: 2, or 1 on a machine with 2 CPUs or fewer). */
  size?: number
  /**
   * Old-generation heap of each worker, in MB. JSON.parse of 16 MiB needs 50-100 MB for
   * strings or numbers and 240-310 MB for nothing but empty arrays or objects: 256 keeps
   * every plausible body and refuses the floods.
   */
  heapMb?: number
  /** A worker idle this long exits, returning the heap its last parse grew. */
  idleMs?: number
}

interface Pending {
  task: ParseTask
  resolve(r: ParsedBody): void
  reject(err: Error): void
}

interface Slot {
  worker: Worker
  busy: Pending | undefined
  idle: NodeJS.Timeout | undefined
}

function startWorker(heapMb: number): Worker {
  const resourceLimits = { maxOldGenerationSizeMb: heapMb }
  // Under vitest and tsx the sources are TypeScript, which a worker cannot load by itself:
  // it loads tsx first and has tsx import the worker module.
  if (import.meta.url.endsWith('.ts')) {
    const file = JSON.stringify(new URL('./parse-worker.ts', import.meta.url).href)
    const code = `import('tsx/esm/api').then(({ tsImport }) => tsImport(${file}, ${JSON.stringify(import.meta.url)}))`
    return new Worker(code, { eval: true, resourceLimits })
  }
  return new Worker(new URL('./parse-worker.js', import.meta.url), { resourceLimits })
}

export class ParsePool {
  readonly size: number
  readonly heapMb: number
  readonly idleMs: number
  #slots: Slot[] = []
  #queue: Pending[] = []
  #nextId = 1
  #closed = false

  constructor(opts: ParsePoolOptions = {}) {
    this.size = opts.size ?? (availableParallelism() > 2 ? 2 : 1)
    this.heapMb = opts.heapMb ?? 256
    this.idleMs = opts.idleMs ?? 30_000
  }

  /** Parses tasks being run or waiting. */
  get pending(): number {
    return this.#queue.length + this.#slots.filter((s) => s.busy).length
  }

  parse(api: OpenAIApi, body: Uint8Array, span: number): Promise<OpenAIRequest> {
    return this.#run({ id: this.#nextId++, api, body, span }).then((r) => r.request!)
  }

  /** The native extraction in a worker, and openAIRequest there when it declines the body. */
  parseKey(api: OpenAIApi, body: Uint8Array, o: NativeKeyOptions): Promise<ParsedBody> {
    const { span, ...native } = o
    return this.#run({ id: this.#nextId++, api, body, span, native })
  }

  #run(task: ParseTask): Promise<ParsedBody> {
    if (this.#closed) return Promise.reject(parserFailed('the parser is closed'))
    return new Promise((resolve, reject) => {
      this.#queue.push({ task, resolve, reject })
      this.#pump()
    })
  }

  async close(): Promise<void> {
    this.#closed = true
    for (const p of this.#queue.splice(0)) p.reject(parserFailed('the parser is closed'))
    await Promise.all(this.#slots.splice(0).map((s) => this.#retire(s)))
  }

  #pump(): void {
    while (this.#queue.length > 0) {
      const slot = this.#slots.find((s) => !s.busy) ?? (this.#slots.length < this.size ? this.#spawn() : undefined)
      if (!slot) return
      const p = this.#queue.shift()!
      clearTimeout(slot.idle)
      slot.busy = p
      // Held while it parses, so that a caller awaiting the answer is not left by an exiting process.
      slot.worker.ref()
      slot.worker.postMessage(p.task)
    }
  }

  #spawn(): Slot {
    const slot: Slot = { worker: startWorker(this.heapMb), busy: undefined, idle: undefined }
    slot.worker.unref()
    slot.worker.on('message', (reply: ParseReply) => {
      const p = slot.busy
      if (!p || p.task.id !== reply.id) return
      slot.busy = undefined
      slot.worker.unref()
      if ('ok' in reply) p.resolve({ request: reply.ok })
      else if ('key' in reply) {
        const { text, keyBytes, anchorBytes, ...facts } = reply.key
        p.resolve({ native: { key: ExtractedKey.copyOf(text, keyBytes, anchorBytes), ...facts } })
      }
      else if ('refused' in reply) p.reject(new ProxyError(reply.refused.status, reply.refused.type, reply.refused.code, reply.refused.message))
      else p.reject(parserFailed(reply.failed))
      slot.idle = setTimeout(() => void this.#retire(slot), this.idleMs).unref()
      this.#pump()
    })
    // 'error' precedes 'exit' when the worker died of an exception or out of memory.
    let cause: Error | undefined
    slot.worker.on('error', (err) => (cause ??= err))
    slot.worker.once('exit', (code) => {
      clearTimeout(slot.idle)
      const i = this.#slots.indexOf(slot)
      if (i >= 0) this.#slots.splice(i, 1)
      const p = slot.busy
      slot.busy = undefined
      if (p) {
        const oom = (cause as { code?: string } | undefined)?.code === 'ERR_WORKER_OUT_OF_MEMORY'
        p.reject(oom ? tooComplex(this.heapMb) : parserFailed(cause?.message ?? `worker exited with code ${code}`))
      }
      if (!this.#closed) this.#pump()
    })
    this.#slots.push(slot)
    return slot
  }

  async #retire(slot: Slot): Promise<void> {
    if (slot.busy && !this.#closed) return
    clearTimeout(slot.idle)
    const i = this.#slots.indexOf(slot)
    if (i >= 0) this.#slots.splice(i, 1)
    await slot.worker.terminate()
  }
}

let shared: ParsePool | undefined

/** The process's pool, started on first use. */
export function parsePool(): ParsePool {
  shared ??= new ParsePool()
  return shared
}

/** Stops the process's workers; a later parse starts a new pool. */
export async function closeParsePool(): Promise<void> {
  const p = shared
  shared = undefined
  await p?.close()
}
