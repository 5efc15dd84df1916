// What bench/alloc.bench.ts and bench/profile.bench.ts share: a proxy in a process of its own
// with a probe preloaded (asked over IPC to start and stop measuring), and the requests sent
// through it, so that the two benches measure the same load.
import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { Client } from 'undici'

export const root = fileURLToPath(new URL('../..', import.meta.url))
export const CONCURRENCY = Number(process.env.CONCURRENCY ?? 8)
/**
 * RATE=n sends the requests open loop at n a second instead (CONCURRENCY is then ignored): each
 * request meets a proxy that has been idle since the last, as at bench:proxy's 1,000 a second,
 * where the closed loop keeps caches warm and shares each wakeup among several requests.
 */
export const RATE = process.env.RATE === undefined ? undefined : Number(process.env.RATE)
if (RATE !== undefined && !(RATE > 0 && RATE <= 100_000)) throw new Error(`RATE must be a number of requests a second from 1 to 100000, not ${JSON.stringify(process.env.RATE)}`)
const children: ChildProcess[] = []

export interface Proc {
  child: ChildProcess
  url: string
  ask<T>(msg: string): Promise<T>
}

/** `node args…`, resolved once it prints "listening <port>"; with ipc, ask() sends a message and waits for the answer. */
export function start(args: string[], ipc: boolean, cwd = root): Promise<Proc> {
  const child = spawn(process.execPath, args, { cwd, stdio: ['ignore', 'pipe', 'pipe', ...(ipc ? (['ipc'] as const) : [])] })
  children.push(child)
  let out = ''
  const ask = <T>(msg: string) =>
    new Promise<T>((resolve) => {
      child.once('message', (m) => resolve(m as T))
      child.send(msg)
    })
  return new Promise((resolve, reject) => {
    const onData = (d: Buffer) => {
      out += d.toString()
      const m = /listening (\d+)/.exec(out)
      if (m) resolve({ child, url: `http://127.0.0.1:${m[1]}`, ask })
    }
    child.stdout!.on('data', onData)
    child.stderr!.on('data', (d: Buffer) => void (out += d.toString()))
    child.once('exit', (c) => reject(new Error(`${args.join(' ')} exited ${c}: ${out}`)))
  })
}

export function stop(p: Proc): Promise<void> {
  return new Promise((resolve) => {
    if (p.child.exitCode !== null) return resolve()
    p.child.once('exit', () => resolve())
    p.child.kill('SIGTERM')
  })
}

/** Ends every process start() made that is still running. */
export function stopAll(): void {
  for (const c of children) if (c.exitCode === null) c.kill('SIGTERM')
}

// An 8 KiB chat body, as in bench/proxy.bench.ts: a long shared system prompt and a short question.
function body(i: number, stream: boolean): string {
  const system = 'You are the support assistant of a large retailer; answer from the policy below. '.repeat(96).slice(0, 7900)
  return JSON.stringify({ model: 'stub', messages: [{ role: 'system', content: system }, { role: 'user', content: `question ${i}` }], max_tokens: 8, stream })
}

/**
 * What is sent: chat completions, whole and streamed, whose routing key is text taken from the
 * parsed body, and SageMaker invocations of the same body, whose key is its first bytes.
 */
export interface Case { label: string; path: string; stream: boolean }
const ALL_CASES: Case[] = [
  { label: 'chat JSON', path: '/v1/chat/completions', stream: false },
  { label: 'chat SSE', path: '/v1/chat/completions', stream: true },
  { label: 'invoke', path: '/invocations', stream: false },
]
const slug = (c: Case) => c.label.toLowerCase().replace(/ /g, '-')

/** The cases named in CASES (comma-separated slugs: chat-json, chat-sse, invoke), else all. */
export function cases(): Case[] {
  const picked = process.env.CASES === undefined ? ALL_CASES : ALL_CASES.filter((c) => process.env.CASES!.split(',').includes(slug(c)))
  if (picked.length === 0) throw new Error(`CASES must list some of ${ALL_CASES.map(slug).join(', ')}`)
  return picked
}

/** `n` requests, CONCURRENCY at a time (or at RATE a second), each read to its end; throws on any non-200. */
export async function load(url: string, n: number, c: Case): Promise<void> {
  const { path, stream } = c
  const client = new Client(url, { pipelining: 1, keepAliveTimeout: 60_000 })
  const bodies = Array.from({ length: 64 }, (_, i) => body(i, stream))
  const send = async (i: number) => {
    const res = await client.request({ path, method: 'POST', body: bodies[i % 64]!, headers: { 'content-type': 'application/json' } })
    for await (const _ of res.body);
    if (res.statusCode !== 200) throw new Error(`${url}: status ${res.statusCode}`)
  }
  if (RATE !== undefined) await paced(n, RATE, send)
  else {
    let next = 0
    const worker = async () => {
      while (next < n) await send(next++)
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  }
  await client.close()
}

/** Calls send(i) for i below n at `rate` a second, on timers (a spinning sender would take a core from the proxy), and waits for them all. */
async function paced(n: number, rate: number, send: (i: number) => Promise<void>): Promise<void> {
  const sent: Promise<void>[] = []
  // Caught at once, so that a failure while others are still being sent is not an unhandled rejection.
  let failure: unknown
  const t0 = performance.now()
  for (let i = 0; i < n && failure === undefined; ) {
    while (i < n && t0 + (i * 1000) / rate <= performance.now()) sent.push(send(i++).catch((err: unknown) => void (failure ??= err)))
    if (i < n) await new Promise((resolve) => setTimeout(resolve, Math.max(0, t0 + (i * 1000) / rate - performance.now())))
  }
  await Promise.all(sent)
  if (failure !== undefined) throw failure
}

/** How the load is sent, for the benches' headers. */
export const loadShape = () => (RATE === undefined ? `${CONCURRENCY} at a time` : `open loop at ${RATE} a second`)
