// Router replicas behind a real load balancer: Debian's HAProxy (mode http, roundrobin, health
// checks on /health), on the committed deploy/haproxy/haproxy.cfg, in front of three `serve` replicas (child processes), in front of four
// simulated vLLM workers publishing their KV events. Every replica follows every engine's
// events, so the three route as one router would:
//   1. the fleet's hit rate (the engines' own counters) through HAProxy and three replicas is
//      within 2 points of one router's, on the same workload against a twin fleet;
//   2. a replica SIGKILLed mid-run loses only the requests in flight on it;
//   3. a replica started later, on HAProxy's spare slot, has every other replica's view
//      (rebuilt from the engines' replay buffers) before it has routed a single request.
// The replicas run as recommended: the exact view, the engines' load (the default) and their
// queued prefill shared through a real redis-server; the survivors of the kill stop hearing the
// dead replica, and the fresh one hears them.
// No HAProxy or redis-server installed: the test fails, saying so (CI installs them).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { freePort } from '../helpers/ports.js'
import { builtCli, Client, haproxyBinary, metricSum, startHaproxy, startReplica, stopReplica, until, type Haproxy, type Replica, type Sent } from './helpers.js'
import { startRedis, type RedisServer } from '../fleet/share/redis-server.js'

const MODEL = 'sim-tiny'
const DOCS = 40
const QUESTIONS = 6
const CLIENTS = 8

// Documents of about 1,500 tokens (the simulator's bytes tokenizer: 4 bytes a token), each
// asked several questions: a question hits the cache only where its document already is.
const doc = (k: number) => `Document ${k}. ${Array.from({ length: 60 }, (_, s) => `Sentence ${s} of document ${k} says something of its own. `).join('')}`
const ask = (k: number, q: number) => JSON.stringify({ model: MODEL, max_tokens: 3, messages: [{ role: 'system', content: doc(k) }, { role: 'user', content: `Question ${q} about document ${k}?` }] })

/** Client c works through documents c, c + CLIENTS, ..., asking questions q0..q1-1 of each in turn. */
function plan(q0: number, q1: number): { id: string; body: string }[][] {
  return Array.from({ length: CLIENTS }, (_, c) => {
    const out: { id: string; body: string }[] = []
    for (let k = c; k < DOCS; k += CLIENTS) for (let q = q0; q < q1; q++) out.push({ id: `d${k}-q${q}`, body: ask(k, q) })
    return out
  })
}

/** Runs the clients concurrently against `base`; `onEach` sees every answer as it comes. */
async function drive(base: string, tag: string, work: { id: string; body: string }[][], onEach?: (s: Sent) => void): Promise<Sent[]> {
  const all: Sent[] = []
  await Promise.all(
    work.map(async (items) => {
      const c = new Client(base)
      try {
        for (const it of items) {
          const s = await c.post('/v1/chat/completions', it.body, `${tag}-${it.id}`)
          all.push(s)
          onEach?.(s)
        }
      } finally {
        c.close()
      }
    }),
  )
  return all
}

/** The fleet's prefix-cache hit rate from the engines' own counters, summed over the workers' /metrics. */
async function hitRate(f: SimFleet): Promise<{ hits: number; queries: number; rate: number }> {
  let hits = 0
  let queries = 0
  for (const url of f.urls) {
    const text = await (await fetch(`${url}/metrics`)).text()
    hits += metricSum(text, 'vllm:prefix_cache_hits_total')
    queries += metricSum(text, 'vllm:prefix_cache_queries_total')
  }
  return { hits, queries, rate: queries > 0 ? hits / queries : 0 }
}

interface InstanceReport {
  id: string
  requests: number
  kvEvents: { view: string; gpuBlocks: number; publishers: { connected: boolean; rebuiltFrom: string | null }[] } | null
}

async function report(admin: string): Promise<InstanceReport[]> {
  const b = (await (await fetch(`${admin}/admin/instances`)).json()) as { endpoints: { instances: InstanceReport[] }[] }
  return b.endpoints[0]!.instances
}

/** Instance id -> GPU blocks in a replica's view. */
async function blocks(admin: string): Promise<Record<string, number>> {
  return Object.fromEntries((await report(admin)).map((i) => [i.id, i.kvEvents?.gpuBlocks ?? -1]))
}

/** The dry run: instance id -> blocks of the body it holds. */
async function dryRun(admin: string, body: string): Promise<Record<string, number>> {
  const r = await fetch(`${admin}/admin/route?endpoint=default&api=chat`, { method: 'POST', body })
  if (r.status !== 200) throw new Error(`/admin/route answered ${r.status}: ${await r.text()}`)
  const d = (await r.json()) as { instances: { instance: string; blocks: number }[] }
  return Object.fromEntries(d.instances.map((i) => [i.instance, i.blocks]))
}

/** Replicas this one hears from through Redis (GET /admin/replicas). */
async function peers(r: Replica): Promise<number> {
  const res = await fetch(`${r.admin}/admin/replicas`)
  if (res.status !== 200) return -1
  return ((await res.json()) as { peers: unknown[] }).peers.length
}

const best = (held: Record<string, number>) => Object.entries(held).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))[0]
const pct = (x: number) => `${(100 * x).toFixed(2)}%`

function replicaConfig(dir: string, name: string, f: SimFleet, events: boolean, shareLoad?: string): string {
  const file = join(dir, `${name}.json`)
  const instances = f.urls.map((url, i) => (events ? { url, kvEvents: { endpoint: f.kvEndpoints![i]!, replayEndpoint: f.kvReplayEndpoints![i]! } } : url))
  writeFileSync(
    file,
    JSON.stringify({
      endpoints: [{ name: 'default', instances }],
      routing: { strategy: 'longest_prefix' },
      ...(events && { kvEvents: { port: 5557 }, tokenizer: { mode: 'bytes' } }),
      // The recommended replicas: the engines' load (on by default) and queued prefill shared through Redis.
      ...(shareLoad !== undefined && { shareLoad: { url: shareLoad } }),
      health: { intervalMs: 1000 },
    }),
  )
  return file
}

describe('three serve replicas behind HAProxy, every one following the engines\' KV events', () => {
  let dir = ''
  let fleetOne: SimFleet | undefined
  let fleetHa: SimFleet | undefined
  let one: Replica | undefined
  const replicas: Replica[] = []
  let spare: Replica | undefined
  let spareConfig = ''
  let sparePort = 0
  let lb: Haproxy | undefined
  let redis: RedisServer | undefined

  beforeAll(async () => {
    haproxyBinary() // throws, saying to install it, when it is not there
    builtCli()
    dir = mkdtempSync(join(tmpdir(), 'pr-ha-'))
    redis = await startRedis()
    const kv = { port: 0, replayPort: 0 }
    ;[fleetOne, fleetHa] = await Promise.all([
      startSimFleet({ instances: 4, profile: 'tiny', kvEvents: kv, idPrefix: 'one-' }),
      startSimFleet({ instances: 4, profile: 'tiny', kvEvents: kv, idPrefix: 'ha-' }),
    ])
    const ports = await Promise.all(Array.from({ length: 7 }, () => freePort()))
    const haConfig = replicaConfig(dir, 'replica', fleetHa, true, redis.url)
    spareConfig = haConfig
    sparePort = ports[3]!
    const started = await Promise.all([
      startReplica('one', replicaConfig(dir, 'one', fleetOne, true), ports[4]!),
      ...[0, 1, 2].map((i) => startReplica(`r${i + 1}`, haConfig, ports[i]!)),
    ])
    one = started[0]!
    replicas.push(...started.slice(1))
    // deploy/haproxy/haproxy.cfg's r1-r3, and r4, its fourth slot, as the spare: down (its port
    // refuses) until test 3 starts a replica there.
    lb = await startHaproxy([...replicas.map((r) => r.port), sparePort], ports[5]!, ports[6]!)
    const h = lb
    await until(async () => {
      const s = await h.servers()
      return ['r1', 'r2', 'r3'].every((n) => s.get(n)?.status === 'UP') && s.get('r4')?.status.startsWith('DOWN') === true
    }, 30_000, 'HAProxy to see r1-r3 up and r4 down')
    // Every replica hears the two others through Redis.
    await until(async () => (await Promise.all(replicas.map((r) => peers(r)))).every((n) => n === 2), 30_000, 'the replicas to hear each other through Redis')
    // Every replica subscribed to every engine before the first request.
    await until(() => fleetHa!.workers.every((w) => w.kvPublisher!.subscribers >= 3) && fleetOne!.workers.every((w) => w.kvPublisher!.subscribers >= 1), 30_000, 'the subscriptions')
  }, 60_000)

  afterAll(async () => {
    await Promise.all([one, ...replicas, spare].map((r) => stopReplica(r)))
    await lb?.close()
    await fleetOne?.close()
    await fleetHa?.close()
    await redis?.stop()
    if (dir !== '') rmSync(dir, { recursive: true, force: true })
  })

  it('hit rate: three replicas behind HAProxy within 2 points of one router, HAProxy spreading requests over all three', async () => {
    const work = plan(0, QUESTIONS)
    const alone = await drive(one!.url, 'one', work)
    const spread = await drive(lb!.url, 'ha', work)
    expect(alone.filter((s) => s.status !== 200).map((s) => `${s.id} ${s.status} ${s.body.slice(0, 200)}`)).toEqual([])
    expect(spread.filter((s) => s.status !== 200).map((s) => `${s.id} ${s.status} ${s.body.slice(0, 200)}`)).toEqual([])
    const a = await hitRate(fleetOne!)
    const b = await hitRate(fleetHa!)
    // Who served what, from HAProxy's own log.
    await until(() => lb!.lines().filter((l) => l.rid.startsWith('ha-')).length === spread.length, 30_000, "HAProxy's log of every request")
    const per = new Map<string, number>()
    for (const l of lb!.lines()) if (l.rid.startsWith('ha-')) per.set(l.server, (per.get(l.server) ?? 0) + 1)
    console.log(
      `[ha] ${spread.length} requests (${DOCS} documents x ${QUESTIONS} questions, ${CLIENTS} clients): hit rate one router ${pct(a.rate)} (${a.hits}/${a.queries} tokens), ` +
        `HAProxy + 3 replicas ${pct(b.rate)} (${b.hits}/${b.queries}); requests per replica ${[...per].map(([k, v]) => `${k} ${v}`).join(', ')}`,
    )
    expect(a.queries).toBeGreaterThan(0)
    expect(b.queries).toBe(a.queries) // the same workload reached both fleets
    expect(Math.abs(b.rate - a.rate)).toBeLessThanOrEqual(0.02)
    // A fair share each (roundrobin: a third), else the comparison shows nothing.
    for (const r of ['r1', 'r2', 'r3']) expect(per.get(r) ?? 0, `requests HAProxy sent to ${r}`).toBeGreaterThanOrEqual(Math.floor(spread.length * 0.25))
  })

  it('SIGKILL one replica mid-run: only requests in flight on it fail, every request ends', async () => {
    const victim = replicas[1]!
    const work = plan(QUESTIONS, QUESTIONS + 4)
    const total = work.reduce((n, w) => n + w.length, 0)
    let done = 0
    let killAt = 0
    let scurAtKill = -1
    let doneAtKill = 0
    const sentToVictim = () => lb!.lines().filter((l) => l.rid.startsWith('kill-') && l.server === victim.name).length
    const run = drive(lb!.url, 'kill', work, () => void done++)
    // Mid-run: once a quarter is answered and the victim has served some, while clients keep sending.
    await until(() => done >= total / 4 && sentToVictim() > 0, 30_000, 'a quarter of the requests answered')
    scurAtKill = (await lb!.servers()).get(victim.name)?.scur ?? -1
    let goneAt = 0
    victim.child.once('exit', () => (goneAt = Date.now()))
    killAt = Date.now()
    doneAtKill = done
    victim.child.kill('SIGKILL')
    const sent = await run
    await victim.exited
    expect(sent).toHaveLength(total)
    // Every request ended: none was cut by the client's bound.
    expect(sent.filter((s) => s.status === -1).map((s) => s.id)).toEqual([])
    await until(() => lb!.lines().filter((l) => l.rid.startsWith('kill-')).length === total, 30_000, "HAProxy's log of every request")
    const line = new Map(lb!.lines().filter((l) => l.rid.startsWith('kill-')).map((l) => [l.rid, l]))
    const failed = sent.filter((s) => s.status !== 200)
    // In flight on the victim when it died: HAProxy's log says it went there (not refused at
    // connect: termination state SC), and the client had sent it and not had its answer at
    // some moment between the signal and the exit seen here. Until the kernel has torn the
    // process down its listening socket still completes connections, so a request HAProxy
    // sends in those milliseconds reaches the dying replica too.
    const inFlight = sent.filter((s) => line.get(s.id)?.server === victim.name && !line.get(s.id)!.termination.startsWith('SC') && s.start <= goneAt && s.end >= killAt)
    const inFlightIds = new Set(inFlight.map((s) => s.id))
    console.log(
      `[ha] SIGKILL of ${victim.name} after ${doneAtKill} of ${total} answers (its exit seen ${goneAt - killAt} ms later): ${failed.length} failed ` +
        `(${failed.map((s) => `${s.id} ${s.status} ${line.get(s.id)?.termination ?? '?'}, sent ${s.start - killAt} ms after the signal`).join('; ') || 'none'}), ` +
        `${inFlight.length} were in flight on it (HAProxy's current sessions on it just before: ${scurAtKill}); ${sent.filter((s) => s.start > killAt && s.status === 200).length} sent after the kill succeeded`,
    )
    for (const f of failed) {
      expect(line.get(f.id)?.server, `failed request ${f.id} (${f.status})`).toBe(victim.name)
      expect(inFlightIds.has(f.id), `failed request ${f.id} was in flight on ${victim.name}`).toBe(true)
    }
    expect(failed.length).toBeLessThanOrEqual(inFlight.length)
    // Clients kept going after the kill, on the other replicas.
    expect(sent.filter((s) => s.start > killAt && s.status === 200).length).toBeGreaterThan(0)
    await until(async () => (await lb!.servers()).get(victim.name)?.status.startsWith('DOWN') === true, 30_000, `HAProxy to take ${victim.name} out`)
  })

  it('a replica started on the spare slot has the others\' view, rebuilt from the replay buffers, before routing a request', async () => {
    const survivors = [replicas[0]!, replicas[2]!]
    const f = fleetHa!
    // Quiet: every survivor's view is the engines' caches (nothing stored or evicted since).
    const engines = () => Object.fromEntries(f.workers.map((w) => [w.url, w.engine.cache.cachedBlocks]))
    const same = (x: Record<string, number>, y: Record<string, number>) => f.urls.every((u) => x[u] === y[u])
    for (const r of survivors) await until(async () => same(await blocks(r.admin), engines()), 30_000, `${r.name}'s view to settle`)
    const warm = engines()
    expect(Object.values(warm).every((n) => n > 0)).toBe(true)

    spare = await startReplica('r4', spareConfig, sparePort)
    const fresh = spare
    await until(async () => {
      const rep = await report(fresh.admin)
      return rep.every((i) => i.kvEvents?.view === 'fresh') && same(await blocks(fresh.admin), await blocks(survivors[0]!.admin))
    }, 30_000, "the fresh replica's view to equal the others'")
    const fullAt = Date.now()
    await until(async () => (await lb!.servers()).get('r4')?.status === 'UP', 30_000, 'HAProxy to bring r4 up')
    // Redis: the fresh one hears the two survivors, and they hear it (the killed one has expired).
    await until(async () => (await Promise.all([fresh, ...survivors].map((r) => peers(r)))).every((n) => n === 2), 30_000, 'the replicas to hear each other through Redis')
    const rep = await report(fresh.admin)
    console.log(
      `[ha] fresh replica: full view ${fullAt - fresh.spawnedAt} ms after spawn (${fullAt - fresh.readyAt} ms after it listened; ${fresh.readyAt - fresh.spawnedAt} ms to listen); ` +
        `blocks per instance ${f.urls.map((u) => warm[u]).join(', ')}; rebuilt from ${rep.map((i) => i.kvEvents!.publishers[0]!.rebuiltFrom).join(', ')}`,
    )
    // Rebuilt from the start of every engine's stream: the whole cache, not a subset.
    for (const i of rep) expect(i.kvEvents!.publishers[0]!.rebuiltFrom, i.id).toBe('0')
    expect(await blocks(fresh.admin)).toEqual(warm)
    // The dry run picks what the others pick, block for block, for the workload's documents.
    for (let k = 0; k < DOCS; k++) {
      const body = ask(k, 99)
      const mine = await dryRun(fresh.admin, body)
      for (const r of survivors) expect(await dryRun(r.admin, body), `document ${k}: ${r.name} against the fresh replica`).toEqual(mine)
      expect(best(mine)![1], `document ${k} is held somewhere`).toBeGreaterThan(0)
    }
    // ...and all of that before it routed anything.
    expect(rep.reduce((n, i) => n + i.requests, 0)).toBe(0)
    expect((await lb!.servers()).get('r4')!.stot).toBe(0)
  })
})
