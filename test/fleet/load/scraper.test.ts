// The scraper on loopback, real sockets: simulated vLLM workers as instances, and a server of
// the test's own for the ways a scrape fails. Waits are for counts, never for time.
import { afterEach, describe, expect, it } from 'vitest'
import { pino } from 'pino'
import { Agent } from 'undici'
import { EngineLoadScraper, type ScrapeResult } from '../../../src/fleet/load/index.js'
import { startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { until } from '../../proxy/helpers.js'
import { activeTimers, FakeSink, metricsServer, withRefTimers, type Held, type MetricsServer } from './helpers.js'

let fleet: SimFleet | undefined
let servers: MetricsServer[] = []
let scraper: EngineLoadScraper | undefined
let agent: Agent | undefined
const held: Held[] = []

afterEach(async () => {
  for (const a of held.splice(0)) a.abort()
  await scraper?.close()
  await agent?.close().catch(() => undefined) // a test may have closed it
  await fleet?.close()
  await Promise.all(servers.map((s) => s.close()))
  fleet = scraper = agent = undefined
  servers = []
})

/** Log lines the scraper writes, as objects. */
function logCapture() {
  const lines: { level: number; msg: string; instance?: string; reason?: string }[] = []
  const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) })
  return { log, lines }
}

function start(targets: { id: string; url: string }[], opts: { intervalMs?: number; staleAfterMs?: number; notVllmIntervalMs?: number } = {}) {
  const sink = new FakeSink()
  const results: { id: string; result: ScrapeResult }[] = []
  const { log, lines } = logCapture()
  agent = new Agent()
  scraper = new EngineLoadScraper({
    sink,
    intervalMs: opts.intervalMs ?? 20,
    staleAfterMs: opts.staleAfterMs ?? 60_000,
    ...(opts.notVllmIntervalMs !== undefined && { notVllmIntervalMs: opts.notVllmIntervalMs }),
    log,
    onScrape: (id, result) => results.push({ id, result }),
  })
  scraper.sync(targets.map((t) => ({ id: t.id, url: `${t.url}/metrics`, dispatcher: agent! })))
  const count = (id: string, result?: ScrapeResult) => results.filter((r) => r.id === id && (result === undefined || r.result === result)).length
  return { sink, results, lines, count, scraper }
}

/** Opens a streaming chat straight to a worker, past any router, that will not end by itself. */
async function direct(url: string): Promise<void> {
  const ac = new AbortController()
  const entry: Held = { abort: () => ac.abort() }
  held.push(entry)
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    signal: ac.signal,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-tiny', stream: true, max_tokens: 20_000, messages: [{ role: 'user', content: `hello ${held.length}` }] }),
  })
  entry.answer = res // kept referenced: a collected Response has its body cancelled
  expect(res.status).toBe(200)
}

describe('EngineLoadScraper', () => {
  it("hands the router the engine's requests that are not its own", async () => {
    // Slow simulated time: the requests stay in the engine for minutes.
    fleet = await startSimFleet({ instances: 2, profile: 'tiny', timeScale: 0.05 })
    const [a, b] = fleet.urls as [string, string]
    const { sink, count } = start([{ id: a, url: a }, { id: b, url: b }])
    await until(() => count(a, 'ok') > 0 && count(b, 'ok') > 0, 10_000, 'the first scrapes')
    expect(sink.external.get(a)).toBe(0)
    for (let i = 0; i < 6; i++) await direct(a)
    await until(() => sink.external.get(a) === 6, 20_000, 'six external requests on a')
    expect(sink.external.get(b)).toBe(0)
    // Three of them are this router's own: the engine's figure less those.
    sink.own.set(a, 3)
    await until(() => sink.external.get(a) === 3, 20_000, 'three external requests on a')
    // More own than the engine reports (sent, not arrived yet): never below 0.
    sink.own.set(a, 10)
    await until(() => sink.external.get(a) === 0, 20_000, 'external back to 0')
    const s = scraper!.status(a)!
    expect(s).toMatchObject({ state: 'engine', fallback: false, running: 6, waiting: 0, external: 0, ownAtScrape: 10 })
    expect(s.kvCacheUsage).toBeGreaterThan(0)
    expect(s.ageMs).toBeGreaterThanOrEqual(0)
  })

  it('falls back to own counts on a 500, a hang past the time bound, a gauge missing and garbage; counts each; recovers', async () => {
    const m = await metricsServer('ok')
    servers.push(m)
    m.running = 4
    m.waiting = 2
    const { sink, count, lines } = start([{ id: 'i', url: m.url }], { intervalMs: 10, staleAfterMs: 200 })
    await until(() => sink.external.get('i') === 6, 10_000, 'the engine figure')
    const cases: [MetricsServer['mode'], ScrapeResult, RegExp][] = [
      ['500', 'failed', /answered 500/],
      ['hang', 'late', /within 200 ms/],
      ['missing', 'failed', /no vllm:num_requests_waiting/],
      ['garbage', 'failed', /not a number: "lots"/],
    ]
    for (const [mode, result, why] of cases) {
      const before = count('i', result)
      const warned = lines.filter((l) => l.level === 40).length
      m.mode = mode
      await until(() => count('i', result) > before, 10_000, `a ${result} scrape (${mode})`)
      expect(sink.external.get('i'), mode).toBe(0)
      expect(scraper!.status('i')).toMatchObject({ state: 'fallback', fallback: true, reason: expect.stringMatching(why), external: 0 })
      // Two more of them: still one line for the change.
      await until(() => count('i', result) > before + 2, 10_000, `more ${result} scrapes`)
      expect(lines.filter((l) => l.level === 40).length).toBe(warned + 1)
      expect(lines.at(-1)).toMatchObject({ instance: 'i', reason: expect.stringMatching(why), msg: expect.stringContaining('falling back') })
      m.mode = 'ok'
      const restored = lines.filter((l) => /reading the engine again/.test(l.msg)).length
      await until(() => sink.external.get('i') === 6, 10_000, `the engine figure again after ${mode}`)
      expect(lines.filter((l) => /reading the engine again/.test(l.msg)).length).toBe(restored + 1)
    }
    const st = scraper!.status('i')!
    expect(st.scrapes.failed).toBeGreaterThanOrEqual(9)
    expect(st.scrapes.late).toBeGreaterThanOrEqual(3)
    // Every late scrape's connection was given up, not left open.
    await until(() => m.abandoned === m.hung.length, 10_000, 'hung scrapes abandoned')
  })

  it('a figure past 2^32 - 1 or below 0 is a failed scrape: counted, logged once, shown, from the first scrape on', async () => {
    const m = await metricsServer('ok')
    servers.push(m)
    m.running = 5_000_000_000
    const { sink, count, lines } = start([{ id: 'i', url: m.url }], { intervalMs: 10 })
    await until(() => count('i', 'failed') >= 3, 10_000, 'failed scrapes of a huge figure')
    expect(scraper!.status('i')).toMatchObject({ state: 'fallback', reason: expect.stringMatching(/vllm:num_requests_running is 5000000000, more than 4294967295/), external: 0 })
    expect(sink.external.get('i')).toBe(0)
    expect(lines.filter((l) => l.level === 40 && /falling back/.test(l.msg))).toHaveLength(1)
    m.running = 4
    await until(() => sink.external.get('i') === 4, 10_000, 'the engine figure')
    // The sum of two gauges each in range is checked too.
    m.running = 0xffffffff
    m.waiting = 1
    await until(() => scraper!.status('i')!.state === 'fallback', 10_000, 'the sum refused')
    expect(scraper!.status('i')!.reason).toMatch(/\+ vllm:num_requests_waiting is 4294967296/)
    m.running = 4
    m.waiting = 0
    await until(() => sink.external.get('i') === 4, 10_000, 'the engine figure again')
    m.running = -1_000_000_005
    const before = count('i', 'failed')
    await until(() => count('i', 'failed') > before, 10_000, 'a failed scrape of a negative figure')
    expect(scraper!.status('i')).toMatchObject({ state: 'fallback', reason: 'vllm:num_requests_running is negative: -1000000005', external: 0 })
    expect(sink.external.get('i')).toBe(0)
  })

  it('takes the gauges from the top of the page; a rest that never comes is cut off, and counted as nothing', async () => {
    const m = await metricsServer('slow-tail')
    servers.push(m)
    m.running = 2
    m.waiting = 1
    const { sink, count } = start([{ id: 't', url: m.url }], { intervalMs: 10, staleAfterMs: 100 })
    await until(() => count('t', 'ok') >= 3, 10_000, 'three scrapes')
    expect(sink.external.get('t')).toBe(3)
    expect(count('t')).toBe(count('t', 'ok'))
    // One at a time: each was cut off before the next went.
    await until(() => m.abandoned >= 2, 10_000, 'the tails cut off')
    expect(m.hung.length - m.abandoned).toBeLessThanOrEqual(1)
  })

  it('reads a 50 MiB page no further than its gauges and 256 KiB more: the rest is cut off, counted, said once', async () => {
    const m = await metricsServer('huge')
    servers.push(m)
    m.running = 3
    const { sink, count, lines } = start([{ id: 'i', url: m.url }], { intervalMs: 10 })
    await until(() => count('i', 'ok') >= 3 && m.written.length >= 3, 20_000, 'three scrapes of the huge page')
    expect(sink.external.get('i')).toBe(3)
    expect(scraper!.status('i')).toMatchObject({ state: 'engine', bodiesCut: expect.any(Number) })
    expect(scraper!.status('i')!.bodiesCut).toBeGreaterThanOrEqual(2)
    // What the server got into the socket before it closed: the cut, plus the kernel's buffers.
    for (const w of m.written) expect(w).toBeLessThan(m.hugeBytes / 2)
    expect(lines.filter((l) => /goes on past 262144 bytes after the gauges/.test(l.msg))).toHaveLength(1)
    expect(lines.filter((l) => l.level === 40)).toHaveLength(1)
  })

  it('a connection refused falls back too', async () => {
    const m = await metricsServer('ok')
    const url = m.url
    await m.close()
    const { sink, count } = start([{ id: 'gone', url }])
    await until(() => count('gone', 'failed') > 0, 10_000, 'a failed scrape')
    expect(sink.external.get('gone')).toBe(0)
    expect(scraper!.status('gone')!.reason).toMatch(/ECONNREFUSED|connect/)
  })

  it('an instance whose /metrics is not vLLM is logged once and read rarely', async () => {
    const other = await metricsServer('not_vllm')
    const vllm = await metricsServer('ok')
    servers.push(other, vllm)
    const { count, lines } = start([{ id: 'other', url: other.url }, { id: 'vllm', url: vllm.url }], { intervalMs: 10, notVllmIntervalMs: 60_000 })
    await until(() => count('other', 'not_vllm') === 1, 10_000, 'the not_vllm scrape')
    await until(() => count('vllm', 'ok') >= 20, 10_000, 'twenty scrapes of the vLLM instance')
    expect(count('other')).toBe(1)
    expect(other.requests).toBe(1)
    expect(lines.filter((l) => l.instance === 'other')).toHaveLength(1)
    expect(scraper!.status('other')).toMatchObject({ state: 'not_vllm', fallback: true })
  })

  it('an instance without a /metrics page (404) is not vLLM either', async () => {
    const m = await metricsServer('404')
    servers.push(m)
    const { count } = start([{ id: 'x', url: m.url }], { notVllmIntervalMs: 60_000 })
    await until(() => count('x', 'not_vllm') === 1, 10_000, 'the not_vllm scrape')
    expect(scraper!.status('x')).toMatchObject({ state: 'not_vllm', reason: '/metrics answered 404' })
  })

  it('follows instances leaving and joining; a removed one is scraped no more and its figure goes to 0', async () => {
    const a = await metricsServer('ok')
    const b = await metricsServer('ok')
    servers.push(a, b)
    a.running = 5
    const { sink, count, scraper: s } = start([{ id: 'a', url: a.url }, { id: 'b', url: b.url }], { intervalMs: 10 })
    await until(() => sink.external.get('a') === 5 && count('b', 'ok') > 0, 10_000, 'both scraped')
    s.sync([{ id: 'b', url: `${b.url}/metrics`, dispatcher: agent! }])
    expect(sink.external.get('a')).toBe(0)
    expect(s.ids()).toEqual(['b'])
    // A scrape of a already on the wire when it left still reaches its server (the abort is
    // ours, the bytes were sent): let it land while b is scraped, then a must hear nothing more.
    const bFlushed = count('b')
    await until(() => count('b') >= bFlushed + 5, 10_000, 'five more scrapes of b')
    const seen = a.requests
    const bNow = count('b')
    await until(() => count('b') >= bNow + 10, 10_000, 'ten more scrapes of b')
    expect(a.requests).toBe(seen)
    // Back: scraped at once, from a fresh state.
    s.sync([{ id: 'a', url: `${a.url}/metrics`, dispatcher: agent! }, { id: 'b', url: `${b.url}/metrics`, dispatcher: agent! }])
    expect(s.status('a')).toMatchObject({ state: 'pending', fallback: true, running: null })
    await until(() => sink.external.get('a') === 5, 10_000, 'a scraped again')
  })

  it('close stops every timer and abandons the scrape in flight; no socket is left', async () => {
    const hang = await metricsServer('hang')
    const ok = await metricsServer('ok')
    servers.push(hang, ok)
    const timers = activeTimers()
    const { count } = await withRefTimers(async () => {
      const r = start([{ id: 'h', url: hang.url }, { id: 'o', url: ok.url }], { intervalMs: 10, staleAfterMs: 600_000 })
      await until(() => hang.hung.length === 1 && r.count('o') >= 3, 10_000, 'a scrape hanging, others answering')
      // The ticker, and undici's time bounds (its timer wheel runs between its ticks, so waited for:
      // on a busy machine one look can fall between them).
      await until(() => activeTimers() >= timers + 2, 10_000, 'the ticker and undici\'s timers running')
      await scraper!.close()
      return r
    })
    await until(() => hang.abandoned === 1, 10_000, 'the hanging scrape abandoned')
    await agent!.close()
    await until(() => hang.open() === 0 && ok.open() === 0, 10_000, 'every connection closed')
    // undici's own timer wheel stops at its next tick once it has nothing left to time. At most
    // the count before: a timer an earlier test left (a keep-alive's, say) may expire meanwhile.
    await until(() => activeTimers() <= timers, 10_000, 'the timers gone')
    const n = ok.requests
    expect(count('h')).toBe(0)
    // Nothing scrapes after close (a later sync is refused too).
    scraper!.sync([{ id: 'o', url: `${ok.url}/metrics`, dispatcher: agent! }])
    expect(scraper!.ids()).toEqual([])
    expect(ok.requests).toBe(n)
  })
})
