// readWhole, which reads a small body into one promise: the same bytes, bounds and failures as
// reading it through bodyChunks and readBody, no listener left behind, and a use of the body
// run as it ends.
import { PassThrough } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { bodyChunks, readWhole } from '../../src/proxy/body.js'
import { readBody } from '../../src/request/read-body.js'
import { PrefixRouterError } from '../../src/core/errors.js'
import { ProxyError } from '../../src/request/errors.js'
import type { Req } from '../../src/proxy/types.js'

/** A request body the test feeds by hand, as Node's HTTP/1 server hands one over. */
function request(): PassThrough & Req {
  return Object.assign(new PassThrough(), { httpVersionMajor: 1 }) as unknown as PassThrough & Req
}

const listeners = (r: PassThrough) => ['data', 'end', 'error', 'close'].map((e) => r.listenerCount(e))

async function failure(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => expect.unreachable('the read succeeded'),
    (err: unknown) => err,
  )
}

describe('readWhole', () => {
  it('gathers the chunks in order, as readBody does', async () => {
    const parts = ['{"inputs":', '"a', ' prompt"', ',"parameters":{}}'].map((s) => Buffer.from(s))
    const [a, b] = [request(), request()]
    const whole = readWhole(a, 0, 1024)
    const iterated = readBody(bodyChunks(b, 0), 1024)
    for (const p of parts) {
      a.write(p)
      b.write(p)
    }
    a.end()
    b.end()
    const [x, y] = await Promise.all([whole, iterated])
    expect(x.toString()).toBe(Buffer.concat(parts).toString())
    expect(x.equals(y)).toBe(true)
    expect(listeners(a)).toEqual([0, 0, 0, 0])
  })

  it('hands a body of one chunk over as that chunk, and an empty one as no bytes', async () => {
    const r = request()
    const chunk = Buffer.from('{"inputs":"x"}')
    const p = readWhole(r, 0, 1024)
    r.end(chunk)
    expect(await p).toBe(chunk)
    const e = request()
    const q = readWhole(e, 0, 1024)
    e.end()
    expect((await q).length).toBe(0)
  })

  it('refuses a body past maxBytes with 413, pauses the request and stops listening', async () => {
    const r = request()
    const p = readWhole(r, 0, 10)
    r.write(Buffer.alloc(6))
    r.write(Buffer.alloc(6))
    const err = await failure(p)
    expect(err).toBeInstanceOf(ProxyError)
    expect((err as ProxyError).status).toBe(413)
    expect(r.isPaused()).toBe(true)
    expect(listeners(r)).toEqual([0, 0, 0, 0])
  })

  it('fails with 408 when the body does not arrive in time, asking to close the connection', async () => {
    const r = request()
    const p = readWhole(r, 50, 1024)
    r.write('{"inputs":')
    const err = (await failure(p)) as ProxyError
    expect(err.status).toBe(408)
    expect(JSON.parse(err.body())).toMatchObject({ error: { code: 'request_timeout' } })
    expect(err.headers).toMatchObject({ connection: 'close' })
    expect(listeners(r)).toEqual([0, 0, 0, 0])
  })

  it('fails when the client closes the request before its end, or the request errs', async () => {
    const r = request()
    const p = readWhole(r, 0, 1024)
    r.write('{"in')
    r.destroy()
    const gone = await failure(p)
    expect(gone).toBeInstanceOf(PrefixRouterError)
    expect((gone as PrefixRouterError).code).toBe('PR_CLIENT_GONE')

    const e = request()
    const q = readWhole(e, 0, 1024)
    const boom = new Error('socket hang up')
    e.destroy(boom)
    expect(await failure(q)).toBe(boom)
  })

  it('settles once: nothing after the end or a failure changes the outcome', async () => {
    const r = request()
    const p = readWhole(r, 0, 4)
    r.write(Buffer.alloc(5))
    const err = await failure(p)
    r.emit('data', Buffer.alloc(1))
    r.emit('end')
    expect((err as ProxyError).status).toBe(413)
    expect(listeners(r)).toEqual([0, 0, 0, 0])
  })

  it('hands the body to its use inside the end event, before any later end listener runs', async () => {
    const r = request()
    const seen: string[] = []
    const p = readWhole(r, 0, 1024, { whole: (b) => (seen.push(`use ${b.toString()}`), b.length) })
    r.on('end', () => seen.push('end listener'))
    r.end('{"x":1}')
    expect(await p).toBe(7)
    // A promise callback would have come after Node had run every end listener.
    expect(seen).toEqual(['use {"x":1}', 'end listener'])
    expect(listeners(r)).toEqual([0, 1, 0, 0])
  })

  it('rejects with what its use throws or rejects with, and stops listening either way', async () => {
    const boom = new Error('not a request')
    const r = request()
    const p = readWhole(r, 0, 1024, {
      whole: () => {
        throw boom
      },
    })
    r.end('{}')
    expect(await failure(p)).toBe(boom)
    expect(listeners(r)).toEqual([0, 0, 0, 0])
    const later = request()
    const q = readWhole(later, 0, 1024, { whole: () => Promise.reject(boom) })
    later.end('{}')
    expect(await failure(q)).toBe(boom)
    expect(listeners(later)).toEqual([0, 0, 0, 0])
  })
})
