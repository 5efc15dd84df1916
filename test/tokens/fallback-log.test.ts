// The tokenizer's fallbacks in the log: one summary line an interval, not one a request, naming
// the instance through the last failure's words.
import http from 'node:http'
import type net from 'node:net'
import { pino } from 'pino'
import { afterEach, expect, it } from 'vitest'
import { remoteTokenizer } from '../../src/tokens/index.js'
import { logFallbacks } from '../../src/tokens/fallback-log.js'
import { until } from '../proxy/helpers.js'

const done: (() => Promise<void> | void)[] = []
afterEach(async () => {
  for (const f of done.splice(0).reverse()) await f()
})

it('many fallbacks are one line with their count and reasons, and the last one in words', async () => {
  const server = http.createServer((_req, res) => res.writeHead(503).end())
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  done.push(() => new Promise<void>((r) => server.close(() => r())))
  const url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`
  const t = remoteTokenizer({ timeoutMs: 5000, cacheEntries: 0 })
  done.push(() => t.close())
  const lines: Record<string, unknown>[] = []
  const log = pino({ level: 'warn' }, { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) })
  // Fallbacks first, then the watch: its first line counts those since it started only.
  await t.tokens({ kind: 'chat', model: 'm', messages: [{ role: 'user', content: 'before' }] }, url)
  const stop = logFallbacks(t, log, 20)
  done.push(stop)
  for (let i = 0; i < 30; i++) await t.tokens({ kind: 'chat', model: 'm', messages: [{ role: 'user', content: `q${i}` }] }, i % 3 === 0 ? undefined : url)
  await until(() => lines.reduce((n, l) => n + Object.values(l.fallbacks as Record<string, number>).reduce((a, b) => a + b, 0), 0) >= 30, 5000, 'the summaries')
  expect(lines.length).toBeLessThan(30)
  const total = (reason: string) => lines.reduce((n, l) => n + ((l.fallbacks as Record<string, number>)[reason] ?? 0), 0)
  expect([total('refused'), total('unavailable')]).toEqual([20, 10])
  expect(lines.some((l) => String(l.last).startsWith(`${url}/tokenize answered 503`) || l.last === 'no instance to ask')).toBe(true)
  expect(lines[0]!.msg).toMatch(/^the exact view's tokenizer gave no ids for \d+ request\(s\) in the last 0.02 s/)
})
