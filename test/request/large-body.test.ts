// Large request bodies: read a slice at a time with turns of the event loop in between, and
// still refused, routed and forwarded exactly as a body read at once would be.
import { readdirSync, readFileSync } from 'node:fs'
import http from 'node:http'
import { getPriority } from 'node:os'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { GATHER_SLICE, readBody, SCAN_SLICE } from '../../src/request/read-body.js'
import { closeParsePool, ParsePool } from '../../src/request/parse-pool.js'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { closeRouter, startRouter, startStub, totalInFlight, type Stub, until } from '../proxy/helpers.js'

const MiB = 1 << 20

async function* from(chunks: Buffer[]): AsyncIterable<Buffer> {
  yield* chunks
}

/** `bytes` of pseudo-random bytes, so that a misplaced piece cannot go unnoticed. */
function noise(bytes: number): Buffer {
  const b = Buffer.alloc(bytes)
  let x = 0x9e3779b9
  for (let i = 0; i < bytes; i++) {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    b[i] = x & 0xff
  }
  return b
}

/** Cuts b into pieces of the given sizes, in turn, the last taking what is left. */
function cut(b: Buffer, sizes: number[]): Buffer[] {
  const out: Buffer[] = []
  for (let at = 0, i = 0; at < b.length; i++) {
    const n = sizes[i % sizes.length]!
    out.push(b.subarray(at, at + n))
    at += n
  }
  return out
}

/** Counts turns of the event loop until stopped: a check-phase callback that queues itself again. */
function countTurns(): () => number {
  let turns = 0
  let on = true
  const spin = () => {
    turns++
    if (on) setImmediate(spin)
  }
  setImmediate(spin)
  return () => {
    on = false
    return turns
  }
}

describe('readBody', () => {
  it('shows every byte to onChunk once, in order and in pieces no larger than a slice, and gathers the body exactly', async () => {
    const body = noise(3 * MiB + 12345)
    for (const sizes of [[65536], [1000, 70000, 3], [body.length]]) {
      const seen: Buffer[] = []
      const out = await readBody(from(cut(body, sizes)), body.length, (c) => void seen.push(Buffer.from(c)))
      expect(out.equals(body)).toBe(true)
      expect(Buffer.concat(seen).equals(body)).toBe(true)
      expect(Math.max(...seen.map((c) => c.length))).toBeLessThanOrEqual(SCAN_SLICE)
    }
  })

  it('gives the event loop a turn after each slice of scanning and of gathering', async () => {
    const body = noise(4 * MiB)
    const stop = countTurns()
    // The chunks all come at once, as from a socket's burst of reads: nothing else yields.
    const out = await readBody(from(cut(body, [65536])), body.length, () => undefined, (n) => Buffer.from(new SharedArrayBuffer(n)))
    const turns = stop()
    expect(out.equals(body)).toBe(true)
    expect(turns).toBeGreaterThanOrEqual(body.length / SCAN_SLICE - 1 + body.length / GATHER_SLICE - 1)
  })

  it('does not give turns to a small body', async () => {
    const body = noise(SCAN_SLICE - 1)
    const stop = countTurns()
    const out = await readBody(from(cut(body, [4096])), body.length, () => undefined)
    expect(stop()).toBe(0)
    expect(out.equals(body)).toBe(true)
  })

  it('stops at the piece onChunk refuses, and closes the source', async () => {
    let closed = false
    async function* source() {
      try {
        yield noise(2 * MiB)
        yield noise(10)
      } finally {
        closed = true
      }
    }
    let shown = 0
    const refusal = new Error('refused')
    const err = await readBody(source(), 4 * MiB, (c) => {
      shown += c.length
      if (shown > SCAN_SLICE) throw refusal
    }).catch((e: unknown) => e)
    expect(err).toBe(refusal)
    expect(shown).toBe(2 * SCAN_SLICE)
    expect(closed).toBe(true)
  })
})

/** The nice value of each of this process's threads (Linux). */
function threadNices(): number[] {
  return readdirSync('/proc/self/task').flatMap((tid) => {
    try {
      // Fields after the command name, which is in parentheses and may hold spaces: nice is the 19th field.
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'latin1')
      return [Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])]
    } catch {
      return [] // the thread ended meanwhile
    }
  })
}

// (A process already at nice 10 or more could not tell a lowered worker from its other threads.)
describe.runIf(process.platform === 'linux' && getPriority() <= 9)('the parse worker', () => {
  it('runs at a lower priority than the event loop, which keeps its own', async () => {
    const base = getPriority()
    const pool = new ParsePool({ size: 1 })
    try {
      expect((await pool.parse('chat', Buffer.from('{"messages":[{"role":"user","content":"hi"}]}'), 16)).text).toContain('hi')
      expect(threadNices()).toContain(base + 10)
      expect(getPriority()).toBe(base)
    } finally {
      await pool.close()
    }
  })
})

/** `bytes` of one-element arrays side by side, [[0],[0],...], as a member of a chat body. */
function arraysBody(bytes: number): Buffer {
  const head = Buffer.from('{"model":"m","messages":[{"role":"user","content":"hi"}],"x":[')
  const n = Math.floor((bytes - head.length - 2) / 4)
  return Buffer.concat([head, Buffer.from('[0],'.repeat(n - 1) + '[0]'), Buffer.from(']}')])
}

/** A chat body of `bytes` whose one message is a long prompt. */
function textBody(bytes: number): Buffer {
  const head = '{"model":"m","messages":[{"role":"user","content":"'
  return Buffer.from(head + 'The quick brown fox. '.repeat(bytes / 21).slice(0, bytes - head.length - 4) + '"}]}')
}

const nestedBody = (bytes: number) => Buffer.alloc(bytes, 0x5d).fill(0x5b, 0, bytes / 2)

function send(url: string, body: Buffer): Promise<{ status: number; text: string; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': body.length } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (d: string) => (text += d))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text, headers: res.headers }))
    })
    // A body refused unread may see its connection closed while the rest is being written;
    // the answer has come by then (asserted below).
    req.on('error', (e: NodeJS.ErrnoException) => (e.code === 'EPIPE' || e.code === 'ECONNRESET' ? undefined : reject(e)))
    req.end(body)
  })
}

describe('16 MiB bodies through the router', () => {
  let stub: Stub | undefined
  let router: ProxyServer | undefined
  afterEach(async () => {
    await closeRouter(router, 10_000)
    await stub?.close()
    router = stub = undefined
  })
  afterAll(() => closeParsePool())

  // The native extraction, and openAIRequest (which a router logging prompts uses).
  for (const prompts of [false, true]) {
    it(`are routed and forwarded byte for byte, or refused early when nested (${prompts ? 'TypeScript' : 'native'} path)`, async () => {
      stub = await startStub('s0')
      router = await startRouter([stub.url], { limits: { maxBodyBytes: 32 * MiB }, log: { level: 'silent', prompts } })
      const bodies = prompts ? [textBody(16 * MiB)] : [arraysBody(16 * MiB), textBody(16 * MiB)]
      for (const body of bodies) {
        const res = await send(router.url, body)
        expect(res.status).toBe(200)
        expect(JSON.parse(res.text)).toEqual({ stub: 's0', bytes: body.length })
        const seen = stub.seen.filter((s) => s.method === 'POST').at(-1)!
        expect(seen.body.equals(body)).toBe(true)
        await until(() => totalInFlight(router!) === 0, 10_000, 'in-flight back to 0')
      }
      const posted = stub.seen.filter((s) => s.method === 'POST').length
      const res = await send(router.url, nestedBody(16 * MiB))
      expect(res.status).toBe(400)
      expect(res.headers.connection).toBe('close')
      expect(JSON.parse(res.text)).toMatchObject({ error: { type: 'invalid_request_error', code: 'json_too_deep' } })
      expect(stub.seen.filter((s) => s.method === 'POST').length).toBe(posted)
      // Refused before routing: no instance ever counted it.
      expect(totalInFlight(router)).toBe(0)
    }, 120_000) // 48 MiB through two processes' parsers on a busy machine
  }
})
