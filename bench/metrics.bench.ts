// What a proxied request's metric updates cost: the four the handler makes (the requests
// counter, the decision, upstream TTFB and duration histograms), through prom-client's
// labelled calls, which find a series by hashing a labels object on every call, against the
// router's bound metrics (src/metrics/bound-metrics.ts), which walk one Map per label. Same labels,
// same registry kind, same run; label values rotate over 8 instances as a fleet's would.
// Run: npm run bench:metrics   (BENCH_TIME_MS per task, default 500)
import { Counter, Histogram, Registry } from 'prom-client'
import { BoundCounter, BoundHistogram } from '../src/metrics/bound-metrics.js'
import { machine, perCall } from './harness.js'

const TIME = Number(process.env.BENCH_TIME_MS ?? 500)
const instances = Array.from({ length: 8 }, (_, i) => `http://10.0.0.${i + 1}:8000`)
const buckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

function promClient(): (i: number) => void {
  const registers = [new Registry()]
  const requests = new Counter({ name: 'r', help: 'r', labelNames: ['endpoint', 'instance', 'strategy', 'status'], registers })
  const decision = new Histogram({ name: 'd', help: 'd', labelNames: ['strategy'], buckets, registers })
  const ttfb = new Histogram({ name: 't', help: 't', labelNames: ['instance'], buckets, registers })
  const duration = new Histogram({ name: 'u', help: 'u', labelNames: ['endpoint', 'status'], buckets, registers })
  return (i) => {
    const instance = instances[i & 7]!
    requests.inc({ endpoint: 'default', instance, strategy: 'prefix_aware', status: 200 })
    decision.observe({ strategy: 'prefix_aware' }, 4e-6)
    ttfb.observe({ instance }, 0.02)
    duration.observe({ endpoint: 'default', status: 200 }, 0.2)
  }
}

function bound(): (i: number) => void {
  const registers = [new Registry()]
  const requests = new BoundCounter({ name: 'r', help: 'r', labelNames: ['endpoint', 'instance', 'strategy', 'status'], registers })
  const decision = new BoundHistogram({ name: 'd', help: 'd', labelNames: ['strategy'], buckets, registers })
  const ttfb = new BoundHistogram({ name: 't', help: 't', labelNames: ['instance'], buckets, registers })
  const duration = new BoundHistogram({ name: 'u', help: 'u', labelNames: ['endpoint', 'status'], buckets, registers })
  return (i) => {
    const instance = instances[i & 7]!
    requests.inc(['default', instance, 'prefix_aware', 200])
    decision.observe(['prefix_aware'], 4e-6)
    ttfb.observe([instance], 0.02)
    duration.observe(['default', 200], 0.2)
  }
}

console.log(`machine: ${machine()}`)
console.log('the four metric updates of one proxied request, per request (median of batched samples, warm-up discarded)')
const p = promClient()
const b = bound()
let i = 0
let j = 0
const prom = await perCall('prom-client', () => p(i++), 3000, { timeMs: TIME, warmupMs: 200, targetUs: 50 })
const ours = await perCall('bound', () => b(j++), 200, { timeMs: TIME, warmupMs: 200, targetUs: 50 })
const fmt = (ns: number) => (ns < 1000 ? `${ns.toFixed(0)} ns` : `${(ns / 1000).toFixed(2)} µs`)
console.log(`  prom-client labelled calls  ${fmt(prom.medianNs)}`)
console.log(`  bound metrics               ${fmt(ours.medianNs)}   ratio ${(prom.medianNs / ours.medianNs).toFixed(1)}x`)
