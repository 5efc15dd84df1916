// The /metrics reader: only vLLM's three load gauges, found by name at the start of a line,
// summed (or, for the cache usage, the largest) over their label sets.
import { describe, expect, it } from 'vitest'
import { Family, readEngineGauges, scanSamples, sumSamples } from '../../../src/fleet/load/index.js'
import { sumMetric } from '../../../src/fleet/probe.js'
import { renderMetrics, resolveSim, SimEngine, RealClock } from '../../../src/sim/index.js'

const vllm = (running: string, waiting: string, kv: string, engine = '0') =>
  `vllm:num_requests_running{model_name="m",engine="${engine}"} ${running}\n` +
  `vllm:num_requests_waiting{model_name="m",engine="${engine}"} ${waiting}\n` +
  `vllm:kv_cache_usage_perc{model_name="m",engine="${engine}"} ${kv}\n`

const HELP = (name: string) => `# HELP ${name} Number of requests.\n# TYPE ${name} gauge\n`

describe('readEngineGauges', () => {
  it("reads the simulator's /metrics, which uses vLLM's names and labels", () => {
    const sim = resolveSim({ profile: 'tiny' })
    const engine = new SimEngine('e', new RealClock(), sim.engine)
    const r = readEngineGauges(renderMetrics(engine, { modelName: 'sim-tiny' }))
    expect(r).toEqual({ ok: true, gauges: { running: 0, waiting: 0, kvCacheUsage: 0 } })
  })

  it('sums running and waiting over data-parallel engines, and takes the fullest cache', () => {
    // As prometheus_client renders one family with a label set per engine: its lines together.
    const family = (name: string, values: string[]) => HELP(name) + values.map((v, e) => `${name}{model_name="m",engine="${e}"} ${v}\n`).join('')
    const text = family('vllm:num_requests_running', ['3.0', '4.0', '0.0']) + family('vllm:num_requests_waiting', ['1.0', '2.0', '5.0']) + family('vllm:kv_cache_usage_perc', ['0.25', '0.75', '0.5'])
    expect(readEngineGauges(text)).toEqual({ ok: true, gauges: { running: 7, waiting: 8, kvCacheUsage: 0.75 } })
  })

  it('refuses a negative engine even when the sum over engines is positive, and a count past 2^32 - 1', () => {
    const family = (name: string, values: string[]) => HELP(name) + values.map((v, e) => `${name}{model_name="m",engine="${e}"} ${v}\n`).join('')
    const text = family('vllm:num_requests_running', ['30.0', '-5.0']) + family('vllm:num_requests_waiting', ['1.0', '2.0'])
    expect(readEngineGauges(text)).toEqual({ ok: false, result: 'failed', reason: 'vllm:num_requests_running is negative: -5' })
    expect(readEngineGauges(vllm('1.0', '-1e9', '0.5'))).toMatchObject({ ok: false, reason: 'vllm:num_requests_waiting is negative: -1000000000' })
    expect(readEngineGauges(vllm('4294967296', '0', '0.5'))).toMatchObject({ ok: false, reason: expect.stringContaining('more than 4294967295') })
    expect(readEngineGauges(vllm('4294967295', '0', '0.5'))).toMatchObject({ ok: true })
  })

  it("reads a family's group of lines and stops there, as the text format groups them", () => {
    const text = 'vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_running{engine="1"} 2\nvllm:num_requests_running_x 9\nvllm:num_requests_waiting 0\nvllm:num_requests_running{engine="2"} 100\n'
    expect(readEngineGauges(text)).toMatchObject({ ok: true, gauges: { running: 3 } })
  })

  it('finds a sample on the first line, without labels, with a timestamp, CRLF endings', () => {
    const text = 'vllm:num_requests_running 2\r\nvllm:num_requests_waiting{engine="0"} 3 1700000000000\r\n'
    expect(readEngineGauges(text)).toEqual({ ok: true, gauges: { running: 2, waiting: 3, kvCacheUsage: undefined } })
  })

  it('is not misled by comments, longer names, or braces and spaces in label values', () => {
    const text =
      '# HELP vllm:num_requests_running 99\n' +
      'vllm:num_requests_running_total{engine="0"} 1000\n' +
      'vllm:num_requests_running{model_name="a } b {\\"x\\" 7",engine="0"} 1\n' +
      'other_vllm:num_requests_waiting 50\n' +
      'vllm:num_requests_waiting{model_name="m"} 2\n'
    expect(readEngineGauges(text)).toEqual({ ok: true, gauges: { running: 1, waiting: 2, kvCacheUsage: undefined } })
  })

  it("falls back to vLLM's earlier name for the cache usage", () => {
    const text = 'vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc{engine="0"} 0.4\n'
    expect(readEngineGauges(text)).toMatchObject({ ok: true, gauges: { kvCacheUsage: 0.4 } })
  })

  it('an answer without vllm:num_requests_running is not vLLM', () => {
    for (const text of ['', 'http_requests_total 5\n', '<html>not metrics</html>', '# HELP vllm:num_requests_running x\n']) {
      expect(readEngineGauges(text)).toMatchObject({ ok: false, result: 'not_vllm' })
    }
  })

  it('a gauge missing or not a number fails the read, naming it', () => {
    expect(readEngineGauges('vllm:num_requests_running 1\n')).toMatchObject({ ok: false, result: 'failed', reason: expect.stringContaining('vllm:num_requests_waiting') })
    expect(readEngineGauges(vllm('banana', '1', '0'))).toMatchObject({ ok: false, result: 'failed', reason: expect.stringContaining('banana') })
    expect(readEngineGauges(vllm('1', 'NaN', '0'))).toMatchObject({ ok: false, result: 'failed', reason: expect.stringContaining('vllm:num_requests_waiting') })
    expect(readEngineGauges(vllm('1', '1', '+Inf'))).toMatchObject({ ok: false, result: 'failed', reason: expect.stringContaining('vllm:kv_cache_usage_perc') })
    expect(readEngineGauges('vllm:num_requests_running{engine="0"\nvllm:num_requests_waiting 1\n')).toMatchObject({ ok: false, result: 'not_vllm' })
  })
})

describe('the start of a body still arriving', () => {
  const text = HELP('vllm:num_requests_running') + vllm('12.0', '3.0', '0.5') + 'vllm:prefix_cache_hits_total 1\n' + '# lots more\n'.repeat(50)

  it('tells nothing until every gauge\'s group of lines has ended, and never reads a line cut short', () => {
    const whole = readEngineGauges(text)
    expect(whole).toEqual({ ok: true, gauges: { running: 12, waiting: 3, kvCacheUsage: 0.5 } })
    // The usage line's group ends where the next line's name parts from it: at its 'p'.
    const decided = text.indexOf('vllm:prefix_cache_hits_total') + 'vllm:p'.length
    for (let cut = 0; cut < text.length; cut++) {
      const r = readEngineGauges(Buffer.from(text.slice(0, cut)), false)
      if (cut < decided) expect(r, `cut at ${cut}`).toBeUndefined()
      else expect(r, `cut at ${cut}`).toEqual(whole)
    }
  })

  it('a gauge that is not there is known only at the end of the body', () => {
    const noKv = 'vllm:num_requests_running 1\nvllm:num_requests_waiting 2\nhttp_requests_total 5\n'
    expect(readEngineGauges(Buffer.from(noKv), false)).toBeUndefined()
    expect(readEngineGauges(Buffer.from(noKv), true)).toEqual({ ok: true, gauges: { running: 1, waiting: 2, kvCacheUsage: undefined } })
    expect(readEngineGauges(Buffer.from('http_requests_total 5\n'), false)).toBeUndefined()
  })
})

describe('scanSamples', () => {
  it('counts finite samples and keeps the first bad one', () => {
    const s = scanSamples(Buffer.from('x 1\nx{a="1"} 2\nx{a="2"} oops\nx 4\n'), new Family('x'))
    expect(s).toEqual({ count: 3, sum: 7, max: 4, min: 1, bad: 'oops', complete: true })
    expect(sumSamples(Buffer.from('y 1\n'), new Family('x'))).toBeUndefined()
  })

  it("is probe.ts's counter sum too", () => {
    const text = 'vllm:prefix_cache_hits_total{engine="0"} 5.0\nvllm:prefix_cache_hits_total{engine="1"} 7.0\nvllm:prefix_cache_hits_total_created 1.7e9\n'
    expect(sumMetric(text, 'vllm:prefix_cache_hits_total')).toBe(12)
    expect(sumMetric(text, 'vllm:prefix_cache_queries_total')).toBeUndefined()
  })
})
