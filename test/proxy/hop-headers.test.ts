import { util } from 'undici'
import { describe, expect, it } from 'vitest'
import { endToEnd, endToEndRaw } from '../../src/proxy/hop-headers.js'

const raw = (...pairs: string[]) => pairs.map((s) => Buffer.from(s, 'latin1'))

describe('endToEndRaw', () => {
  const cases: Record<string, Buffer[]> = {
    plain: raw('Content-Type', 'application/json', 'Content-Length', '12', 'X-Request-Id', 'abc'),
    'hop-by-hop dropped': raw('Connection', 'keep-alive', 'Keep-Alive', 'timeout=5', 'Transfer-Encoding', 'chunked', 'Date', 'x'),
    'names Connection lists': raw('Connection', 'X-Private, close', 'X-Private', 'secret', 'x-kept', '1'),
    'Connection repeated': raw('Connection', 'x-a', 'Connection', 'X-B', 'x-a', '1', 'x-b', '2', 'x-c', '3'),
    'repeated names gathered': raw('Set-Cookie', 'a=1', 'set-cookie', 'b=2', 'SET-COOKIE', 'c=3', 'Vary', 'accept'),
    'latin1 values': raw('X-Name', 'caf\u00e9'),
    'a header named __proto__': raw('__proto__', 'x', 'x-after', 'y'),
  }
  for (const [name, headers] of Object.entries(cases)) {
    it(`gives what endToEnd(parseHeaders) gives: ${name}`, () => {
      const expected = endToEnd(util.parseHeaders(headers))
      const got = endToEndRaw(headers)
      expect(Object.keys(got)).toEqual(Object.keys(expected))
      for (const k of Object.keys(expected)) expect(got[k]).toEqual(expected[k])
      expect(Object.getPrototypeOf(got)).toBe(Object.prototype)
    })
  }
})
