// Where the router's per-request allocations come from: the router of bench:alloc (access log
// off unless LOG=on) under the same load, with V8's sampling heap profiler
// (bench/alloc/heap-probe.mjs) running over the measured requests only. Prints the bytes per
// request by allocating function and its two callers, largest first: the list that
// bench:alloc's one figure per row does not give. Sampled (one sample per 256 bytes on
// average), so small sites are approximate.
// Run: npm run bench:alloc-sites   (REQUESTS=5000 TOP=40 LOG=on CASES=invoke)
import { cases, load, start, stop, stopAll } from './alloc/load.js'
const N = Number(process.env.REQUESTS ?? 5000)
const WARMUP = 2000
interface Node { callFrame: { functionName: string; url: string; lineNumber: number }; selfSize: number; children: Node[] }
const stub = await start(['bench/stub-upstream.mjs'], false)
for (const c of cases()) {
  const p = await start(['--import', './bench/alloc/heap-probe.mjs', 'bench/alloc/router.mjs', stub.url, process.env.LOG ?? 'off'], true)
  await load(p.url, WARMUP, c)
  await p.ask('start')
  await load(p.url, N, c)
  const { profile } = await p.ask<{ profile: { head: Node } }>('stop')
  const agg = new Map<string, number>()
  const walk = (n: Node, stack: string[]) => {
    const f = n.callFrame
    const name = `${f.functionName || '(anon)'} ${f.url.replace(/.*\/(dist|node_modules)\//, '$1/')}:${f.lineNumber + 1}`
    const s = [name, ...stack].slice(0, 3)
    if (n.selfSize > 0) agg.set(s.join(' < '), (agg.get(s.join(' < ')) ?? 0) + n.selfSize)
    for (const ch of n.children) walk(ch, s)
  }
  walk(profile.head, [])
  const total = [...agg.values()].reduce((a, b) => a + b, 0)
  console.log(`\n${c.label}, access log ${process.env.LOG ?? 'off'}: ${(total / N / 1024).toFixed(1)} KiB per request sampled`)
  for (const [k, v] of [...agg].sort((a, b) => b[1] - a[1]).slice(0, Number(process.env.TOP ?? 40))) console.log(`${(v / N).toFixed(0).padStart(6)} B  ${k.slice(0, 200)}`)
  await stop(p)
}
await stop(stub)
stopAll()
