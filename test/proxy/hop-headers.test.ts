import { describe, expect, it } from 'vitest'
import { endToEndRaw, valueOf } from '../../src/proxy/hop-headers.js'

const raw = (...pairs: string[]) => pairs.map((s) => Buffer.from(s, 'latin1'))
const ID = { 'x-request-id': 'ours' }

describe('endToEndRaw', () => {
  const cases: Record<string, [Buffer[], string[]]> = {
    plain: [raw('Content-Type', 'application/json', 'Content-Length', '12', 'X-Other', 'abc'), ['content-type', 'application/json', 'content-length', '12', 'x-other', 'abc', 'x-request-id', 'ours']],
    'hop-by-hop dropped': [raw('Connection', 'keep-alive', 'Keep-Alive', 'timeout=5', 'Transfer-Encoding', 'chunked', 'Upgrade', 'h2c', 'Proxy-Authenticate', 'x', 'TE', 'trailers', 'Date', 'x'), ['date', 'x', 'x-request-id', 'ours']],
    'names Connection lists': [raw('Connection', 'X-Private, close', 'X-Private', 'secret', 'x-kept', '1'), ['x-kept', '1', 'x-request-id', 'ours']],
    'Connection repeated': [raw('Connection', 'x-a', 'Connection', 'X-B', 'x-a', '1', 'x-b', '2', 'x-c', '3'), ['x-c', '3', 'x-request-id', 'ours']],
    'repeated names kept as repeated pairs': [raw('Set-Cookie', 'a=1', 'set-cookie', 'b=2', 'SET-COOKIE', 'c=3', 'Vary', 'accept'), ['set-cookie', 'a=1', 'set-cookie', 'b=2', 'set-cookie', 'c=3', 'vary', 'accept', 'x-request-id', 'ours']],
    'latin1 values': [raw('X-Name', 'caf\u00e9'), ['x-name', 'caf\u00e9', 'x-request-id', 'ours']],
    'a header named __proto__': [raw('__proto__', 'x', 'x-after', 'y'), ['x-after', 'y', 'x-request-id', 'ours']],
    "the instance's request id replaced by ours": [raw('X-Request-Id', 'theirs', 'x-request-id', 'again', 'Date', 'd'), ['date', 'd', 'x-request-id', 'ours']],
  }
  for (const [name, [headers, expected]] of Object.entries(cases)) {
    it(name, () => {
      expect(endToEndRaw(headers, ID)).toEqual(expected)
    })
  }

  it('puts every header of ours last, in place of the same names from the instance', () => {
    const ours = { 'x-request-id': 'id', 'x-prefix-router-instance': 'a' }
    expect(endToEndRaw(raw('X-Prefix-Router-Instance', 'spoofed', 'Connection', 'x-gone', 'x-gone', '1', 'Date', 'd'), ours)).toEqual(['date', 'd', 'x-request-id', 'id', 'x-prefix-router-instance', 'a'])
  })

  it('finds the first value of a header in a list', () => {
    const list = ['content-type', 'text/event-stream', 'content-type', 'text/plain']
    expect(valueOf(list, 'content-type')).toBe('text/event-stream')
    expect(valueOf(list, 'date')).toBeUndefined()
  })
})
