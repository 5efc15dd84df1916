// The request path's counter and histograms stand in for prom-client's: a scrape, a worker's
// JSON and a cluster's aggregate must read the same as prom-client's for the same events.
import { AggregatorRegistry, Counter, Histogram, Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { BoundCounter, BoundHistogram } from '../../src/metrics/bound-metrics.js'

const BUCKETS = [0.005, 0.01, 0.05, 0.1, 1]
const LABELS = ['endpoint', 'status'] as const
const events: [string, number, number][] = [
  ['default', 200, 0.003],
  ['default', 200, 0.005],
  ['default', 502, 0.07],
  ['other', 200, 2.5],
  ['default', 200, 0.0101],
  ['other', 404, 0],
]

/** The same events in a prom-client registry and in one of ours. */
function both(): { theirs: Registry; ours: Registry } {
  const theirs = new Registry()
  const ours = new Registry()
  const th = new Histogram({ name: 'h_seconds', help: 'a histogram', labelNames: LABELS, buckets: BUCKETS, registers: [theirs] })
  const tc = new Counter({ name: 'c_total', help: 'a counter', labelNames: LABELS, registers: [theirs] })
  const oh = new BoundHistogram({ name: 'h_seconds', help: 'a histogram', labelNames: LABELS, buckets: BUCKETS, registers: [ours] })
  const oc = new BoundCounter({ name: 'c_total', help: 'a counter', labelNames: LABELS, registers: [ours] })
  for (const [endpoint, status, v] of events) {
    th.observe({ endpoint, status: String(status) }, v)
    tc.inc({ endpoint, status: String(status) })
    oh.observe([endpoint, status], v)
    oc.inc([endpoint, status])
  }
  tc.inc({ endpoint: 'other', status: '200' }, 3)
  oc.inc(['other', 200], 3)
  return { theirs, ours }
}

describe('bound metrics', () => {
  it("scrape to the same text as prom-client's", async () => {
    const { theirs, ours } = both()
    const text = await ours.metrics()
    expect(text).toContain('h_seconds_bucket{le="0.01",endpoint="default",status="200"} 2')
    expect(text).toBe(await theirs.metrics())
  })

  it("give a cluster's primary the same JSON and the same aggregate", async () => {
    const { theirs, ours } = both()
    expect(await ours.getMetricsAsJSON()).toEqual(await theirs.getMetricsAsJSON())
    const a = both()
    const sum = (r: Registry[]) => Promise.all(r.map((x) => x.getMetricsAsJSON())).then((j) => AggregatorRegistry.aggregate(j).metrics())
    const aggregate = await sum([ours, a.ours])
    expect(aggregate).toContain('c_total{endpoint="other",status="200"} 8')
    expect(aggregate).toBe(await sum([theirs, a.theirs]))
  })

  it('refuse what prom-client refuses, and start over on reset', async () => {
    const r = new Registry()
    const h = new BoundHistogram({ name: 'h', help: 'h', labelNames: ['a'], buckets: [1], registers: [r] })
    const c = new BoundCounter({ name: 'c', help: 'c', labelNames: ['a'], registers: [r] })
    expect(() => h.observe(['x'], Number.NaN)).toThrow(TypeError)
    expect(() => c.inc(['x'], -1)).toThrow(TypeError)
    expect(() => c.inc(['x', 'y'])).toThrow(/expected 1 label value/)
    c.inc(['x'])
    h.observe(['x'], 2)
    expect(await r.metrics()).toContain('c{a="x"} 1')
    r.resetMetrics()
    expect(await r.metrics()).not.toContain('a="x"')
  })
})
