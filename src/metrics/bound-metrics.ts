// The counter and histograms every proxied request updates, read by prom-client's Registry
// like its own (the same values, so the same exposition text and the same cluster
// aggregation). prom-client finds a label set's series by building a string from a labels
// object on every call; here a label set is found by walking one Map per label with the
// values as they are, so a request that updates four series allocates nothing for them.
import type { Metric, Registry } from 'prom-client'

type LabelValue = string | number

/** A series: its labels (as prom-client shows them) and whatever it counts. */
interface Series {
  labels: Record<string, string>
}

/** One Map per label, in labelNames order, ending in the series. */
class SeriesTree<S extends Series> {
  readonly #root = new Map<LabelValue, unknown>()
  readonly #all: S[] = []

  constructor(
    readonly labelNames: readonly string[],
    private readonly make: (labels: Record<string, string>) => S,
  ) {}

  at(values: readonly LabelValue[]): S {
    if (values.length !== this.labelNames.length) throw new Error(`expected ${this.labelNames.length} label values (${this.labelNames.join(', ')}), got ${values.length}`)
    let node = this.#root
    const last = values.length - 1
    for (let i = 0; i < last; i++) {
      let next = node.get(values[i]!) as Map<LabelValue, unknown> | undefined
      if (next === undefined) node.set(values[i]!, (next = new Map()))
      node = next
    }
    let s = node.get(values[last]!) as S | undefined
    if (s === undefined) {
      const labels: Record<string, string> = {}
      this.labelNames.forEach((n, i) => (labels[n] = String(values[i])))
      s = this.make(labels)
      node.set(values[last]!, s)
      this.#all.push(s)
    }
    return s
  }

  series(): readonly S[] {
    return this.#all
  }

  clear(): void {
    this.#root.clear()
    this.#all.length = 0
  }
}

interface Options<L extends string> {
  name: string
  help: string
  labelNames: readonly L[]
  registers: Registry[]
}

/** What both kinds share: a name and help, the series, and a place in the registries. */
abstract class BoundMetric<S extends Series> {
  // Not readonly: the registry renames counters for OpenMetrics.
  name: string
  readonly help: string
  readonly aggregator = 'sum'
  protected readonly tree: SeriesTree<S>

  constructor(o: Options<string>, make: (labels: Record<string, string>) => S) {
    this.name = o.name
    this.help = o.help
    this.tree = new SeriesTree(o.labelNames, make)
    for (const r of o.registers) r.registerMetric(this as unknown as Metric)
  }

  reset(): void {
    this.tree.clear()
  }
}

interface CounterSeries extends Series {
  value: number
}

/** A counter with labels: `inc([values in labelNames order])`. */
export class BoundCounter<L extends string> extends BoundMetric<CounterSeries> {
  readonly type = 'counter'

  constructor(o: Options<L>) {
    super(o, (labels) => ({ labels, value: 0 }))
  }

  inc(values: readonly LabelValue[], by = 1): void {
    if (!(by >= 0) || !Number.isFinite(by)) throw new TypeError(`${this.name}: a counter only goes up by a finite number, not ${by}`)
    this.tree.at(values).value += by
  }

  async get() {
    return { name: this.name, help: this.help, type: this.type, values: this.tree.series().map((s) => ({ value: s.value, labels: s.labels })), aggregator: this.aggregator }
  }
}

interface HistogramSeries extends Series {
  /** Observations per bucket, not cumulative; the last is above every bound. */
  counts: Float64Array
  sum: number
  count: number
}

/** A histogram with labels: `observe([values in labelNames order], seconds)`. */
export class BoundHistogram<L extends string> extends BoundMetric<HistogramSeries> {
  readonly type = 'histogram'
  readonly upperBounds: readonly number[]

  constructor(o: Options<L> & { buckets: readonly number[] }) {
    const upperBounds = [...o.buckets].sort((a, b) => a - b)
    super(o, (labels) => ({ labels, counts: new Float64Array(upperBounds.length + 1), sum: 0, count: 0 }))
    this.upperBounds = upperBounds
  }

  observe(values: readonly LabelValue[], value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`${this.name}: not a finite number: ${value}`)
    const s = this.tree.at(values)
    const b = this.upperBounds
    let i = 0
    while (i < b.length && value > b[i]!) i++
    s.counts[i]!++
    s.sum += value
    s.count++
  }

  /** What prom-client's Histogram gives for the same observations, in its order: the text exposition's form. */
  async getForPromString() {
    return this.#values(false)
  }

  /** The same with each value's labels whole (le and the series'), as the JSON a cluster's primary aggregates. */
  async get() {
    return this.#values(true)
  }

  #values(splay: boolean) {
    const bucket = `${this.name}_bucket`
    const values: { labels: Record<string, string | number>; sharedLabels?: Record<string, string>; value: number; metricName: string; exemplar?: null }[] = []
    const push = (labels: Record<string, string | number>, shared: Record<string, string>, value: number, metricName: string, exemplar?: null) => {
      if (splay) values.push({ labels: { ...labels, ...shared }, value, metricName, ...(exemplar === null && { exemplar }) })
      else values.push({ labels, sharedLabels: shared, value, metricName, ...(exemplar === null && { exemplar }) })
    }
    for (const s of this.tree.series()) {
      let acc = 0
      this.upperBounds.forEach((le, i) => {
        acc += s.counts[i]!
        push({ le }, s.labels, acc, bucket, null)
      })
      push({ le: '+Inf' }, s.labels, s.count, bucket, null)
      push({}, s.labels, s.sum, `${this.name}_sum`)
      push({}, s.labels, s.count, `${this.name}_count`)
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator }
  }
}
