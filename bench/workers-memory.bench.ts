// Resident memory of `serve --workers 2` against `serve --workers 1`, after the same requests,
// and how much of it is the shared routing state: the proportional set size (each shared page
// split between the processes that map it) of every process in the router's tree, from
// /proc/<pid>/smaps_rollup, and of the state's mappings alone, from /proc/<pid>/smaps. Rounds
// alternate the two, and each row reports its median. Linux only (/proc).
// Run: npm run bench:workers-memory   (REQUESTS=2000 ROUNDS=3)
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { machine, startProcess } from './harness.js'

const REQUESTS = Number(process.env.REQUESTS ?? 2000)
const ROUNDS = Number(process.env.ROUNDS ?? 3)
const root = fileURLToPath(new URL('..', import.meta.url))

// Each request its own conversation: about 4 KiB of prompt, 70 blocks of longest_prefix's index.
const body = (i: number) => JSON.stringify({ model: 'stub', messages: [{ role: 'user', content: `conversation ${i} ${'some long prompt text '.repeat(200)}` }] })

const kib = (text: string, key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0)

/** The router's processes: the primary and, with --workers, its children. */
function tree(pid: number): number[] {
  let kids: number[] = []
  try {
    kids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)
  } catch {
    // no children file: a kernel without CONFIG_PROC_CHILDREN
  }
  return [pid, ...kids]
}

/** KiB: resident and proportional, of the whole process and of its shared routing state's mappings. */
function memory(pid: number): { rss: number; pss: number; statePss: number } {
  const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8')
  let statePss = 0
  let inState = false
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inState = line.includes('prefix-router-state')
    else if (inState && line.startsWith('Pss:')) statePss += kib(line, 'Pss')
  }
  return { rss: kib(rollup, 'Rss'), pss: kib(rollup, 'Pss'), statePss }
}

async function measure(workers: number, strategy: string, upstream: string) {
  const router = await startProcess(
    process.execPath,
    ['dist/cli.js', 'serve', '--host', '127.0.0.1', '--port', '0', '--admin-port', '0', '--log-level', 'warn', '--workers', String(workers), '--strategy', strategy,
      ...['a', 'b', 'c'].flatMap((p) => ['--upstream', `${upstream}/${p}`])],
    /on (http:\/\/[\d.:]+)/,
    'stderr',
    { cwd: root },
  )
  try {
    const url = router.match[1]!
    for (let i = 0; i < REQUESTS; i += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, REQUESTS - i) }, async (_, j) => {
          const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(i + j) })
          await res.text()
          if (res.status !== 200) throw new Error(`request ${i + j}: status ${res.status}`)
        }),
      )
    }
    const procs = tree(router.pid).map(memory)
    const sum = (k: 'rss' | 'pss' | 'statePss') => procs.reduce((n, p) => n + p[k], 0) / 1024
    return { processes: procs.length, rss: sum('rss'), pss: sum('pss'), statePss: sum('statePss') }
  } finally {
    await router.stop()
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const f1 = (v: number) => v.toFixed(1)

console.log(`serve --workers memory — ${machine()}`)
console.log(`${REQUESTS} requests of ~4 KiB (each its own prompt) over 3 upstreams, then memory of every process; median of ${ROUNDS} rounds (MiB)`)
const stub = await startProcess(process.execPath, ['bench/stub-upstream.mjs'], /listening (\d+)/, 'stdout', { cwd: root })
const upstream = `http://127.0.0.1:${stub.match[1]}`
try {
  console.log(`${'strategy'.padEnd(16)}${'workers'.padEnd(9)}${'procs'.padEnd(7)}${'RSS'.padEnd(9)}${'PSS'.padEnd(9)}${'state PSS'.padEnd(11)}PSS ÷ --workers 1`)
  for (const strategy of ['prefix_aware', 'longest_prefix']) {
    const runs: Record<number, Awaited<ReturnType<typeof measure>>[]> = { 1: [], 2: [] }
    for (let r = 0; r < ROUNDS; r++) for (const w of [1, 2]) runs[w]!.push(await measure(w, strategy, upstream))
    const base = median(runs[1]!.map((m) => m.pss))
    for (const w of [1, 2]) {
      const ms = runs[w]!
      const pss = median(ms.map((m) => m.pss))
      // One process keeps its state in private memory, not told apart from the rest.
      const state = w === 1 ? 'n/a' : f1(median(ms.map((m) => m.statePss)))
      console.log(`${strategy.padEnd(16)}${String(w).padEnd(9)}${String(ms[0]!.processes).padEnd(7)}${f1(median(ms.map((m) => m.rss))).padEnd(9)}${f1(pss).padEnd(9)}${state.padEnd(11)}${(pss / base).toFixed(2)}×`)
    }
  }
} finally {
  await stub.stop()
}
