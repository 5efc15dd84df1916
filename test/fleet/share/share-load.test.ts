// Replicas sharing their queued prefill through a real redis-server: what one queues reaches
// the others' sinks as its figure (summed over several), a replica that stops or goes silent
// is dropped, Redis going away costs nothing but the shared figures (which expire) and comes
// back by itself, and junk on the channel is counted, never thrown. No wall-clock assertions:
// every wait is for a count, a figure or a log line.
import { Writable } from 'node:stream'
import { createClient } from '@redis/client'
import { pino } from 'pino'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { parseConfig } from '../../../src/config/config.js'
import { buildConfig } from '../../../src/commands/serve-config.js'
import { Router } from '../../../src/core/router.js'
import { decodeLoad, defaultReplicaId, MAX_FIGURE, MAX_PEERS, redactRedisUrl, redisUrlProblem, routerSink, ShareLoad, type SharedLoadSink } from '../../../src/fleet/share/index.js'
import { until } from '../../proxy/helpers.js'
import { startRedis, type RedisServer } from './redis-server.js'

let redis: RedisServer
beforeAll(async () => {
  redis = await startRedis()
})
afterAll(async () => {
  await redis?.stop()
})

/** Short heartbeat and expiry, so that the waits below are short; the defaults are 1 s and 3 s. */
const FAST = { intervalMs: 10, heartbeatMs: 200, expireMs: 1000 }

const ids = ['http://i0:8000', 'http://i1:8000', 'http://i2:8000']
const prompt = (k: number) => `Document ${k}: ${'some words of its own '.repeat(60)}`

interface Replica {
  id: string
  router: Router
  share: ShareLoad
  /** What the sink was given last, by instance (endpoint 'default'). */
  seen: Map<string, number>
  logs: { msg: string; [k: string]: unknown }[]
}

const open: Replica[] = []
afterEach(async () => {
  for (const r of open.splice(0)) {
    await r.share.close({ goodbye: false })
    r.router.close()
  }
})

function logger(lines: Replica['logs']) {
  return pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        for (const l of chunk.toString().split('\n')) if (l) lines.push(JSON.parse(l) as Replica['logs'][number])
        cb()
      },
    }),
  )
}

async function replica(id: string, opts: { url?: string; prefix?: string; expireMs?: number; sink?: (r: Replica) => SharedLoadSink } = {}): Promise<Replica> {
  const router = new Router({ strategy: 'longest_prefix', prefixLength: 65536, instances: ids.map((i) => ({ id: i })) })
  const r = { id, router, seen: new Map<string, number>(), logs: [] } as unknown as Replica
  const record: SharedLoadSink = { setSharedPrefill: (ep, inst, blocks) => ep === 'default' && r.seen.set(inst, blocks) }
  const sink = opts.sink?.(r) ?? record
  r.share = await ShareLoad.start({
    url: opts.url ?? redis.url,
    replicaId: id,
    endpoints: () => [{ name: 'default', router }],
    ...FAST,
    ...(opts.expireMs !== undefined && { expireMs: opts.expireMs }),
    ...(opts.prefix !== undefined && { prefix: opts.prefix }),
    sink,
    log: logger(r.logs),
  })
  open.push(r)
  return r
}

/** A lease holding queued prefill (its first token not back) on some instance of `r`. */
function queue(r: Replica, k: number) {
  const lease = r.router.pick(prompt(k))
  const blocks = r.router.instances().find((i) => i.id === lease.instance)!.queuedPrefillBlocks
  expect(blocks).toBeGreaterThan(0)
  return { lease, instance: lease.instance, blocks }
}

const seen = (r: Replica, instance: string) => r.seen.get(instance) ?? 0
const logged = (r: Replica, re: RegExp) => r.logs.some((l) => re.test(l.msg))

describe('share-load between replicas', () => {
  it("gives B the queued prefill A holds, per instance, and C the sum of A's and B's", async () => {
    const a = await replica('a')
    const b = await replica('b')
    const c = await replica('c')
    await until(() => a.share.peerCount() === 2 && b.share.peerCount() === 2 && c.share.peerCount() === 2, 10_000, 'every replica to hear the other two')
    const qa = queue(a, 1)
    await until(() => seen(b, qa.instance) === qa.blocks && seen(c, qa.instance) === qa.blocks, 5000, "A's figure at B and C")
    // B queues on the same instance: C sees the sum, A sees B's only (never its own).
    let qb = queue(b, 2)
    while (qb.instance !== qa.instance) {
      qb.lease.release()
      qb = queue(b, Math.floor(Math.random() * 1e6))
    }
    const bOwn = b.router.instances().find((i) => i.id === qa.instance)!.queuedPrefillBlocks
    await until(() => seen(c, qa.instance) === qa.blocks + bOwn, 5000, 'the sum at C')
    await until(() => seen(a, qa.instance) === bOwn, 5000, "B's figure at A")
    // The first token ends the prefill: the figure goes back to what is left.
    qa.lease.firstToken()
    await until(() => seen(c, qa.instance) === bOwn && seen(b, qa.instance) === 0, 5000, "A's figure back to 0")
    qa.lease.release()
    qb.lease.release()
    expect(a.share.counts.received).toBeGreaterThan(0)
    expect(a.share.counts.sent).toBeGreaterThan(0)
    expect(a.share.counts.dropped).toBe(0)
    const report = b.share.report()
    expect(report.peers.map((p) => p.replica)).toEqual(['a', 'c'])
    expect(report.connected).toBe(true)
    expect(report.channel).toBe('prefix-router:load')
  })

  it("writes the figure into B's router as load beyond its own leases (the test sink)", async () => {
    let rb: Router | undefined
    const a = await replica('a')
    const b = await replica('b', { sink: (r) => ((rb = r.router), routerSink(() => rb)) })
    await until(() => b.share.peerCount() === 1, 10_000, 'B to hear A')
    const q = queue(a, 3)
    const row = () => b.router.instances().find((i) => i.id === q.instance)!
    await until(() => row().engineQueuedPrefillBlocks === q.blocks, 5000, "A's figure in B's router")
    expect(row().queuedPrefillBlocks).toBe(0) // B's own leases: none
    q.lease.release()
    await until(() => row().engineQueuedPrefillBlocks === 0, 5000, 'the figure back to 0')
  })

  it('drops a replica that says goodbye at once, and one closed without it once it has been silent for expireMs', async () => {
    const a = await replica('a')
    const b = await replica('b')
    const c = await replica('c')
    await until(() => b.share.peerCount() === 2, 10_000, 'B to hear A and C')
    const qa = queue(a, 4)
    const qc = queue(c, 5)
    await until(() => seen(b, qa.instance) > 0 && seen(b, qc.instance) > 0, 5000, 'both figures at B')
    // C vanishes without a word (as a SIGKILLed replica would): it counts until it expires.
    await c.share.close({ goodbye: false })
    open.splice(open.indexOf(c), 1)
    await until(() => b.share.peerCount() === 1, 5000, 'C expired at B')
    expect(logged(b, /replica silent/)).toBe(true)
    expect(seen(b, qc.instance)).toBe(qa.instance === qc.instance ? qa.blocks : 0)
    // A stops cleanly: its goodbye drops it without waiting for the expiry.
    await a.share.close()
    open.splice(open.indexOf(a), 1)
    await until(() => logged(b, /replica stopped/), 5000, "A's goodbye at B")
    expect(b.share.peerCount()).toBe(0)
    expect(seen(b, qa.instance)).toBe(0)
    qa.lease.release()
    qc.lease.release()
    c.router.close()
    a.router.close()
  })

  it('drops a replica whose messages stop while its connection stays', async () => {
    const a = await replica('a')
    const b = await replica('b')
    await until(() => b.share.peerCount() === 1, 10_000, 'B to hear A')
    const q = queue(a, 6)
    await until(() => seen(b, q.instance) === q.blocks, 5000, "A's figure at B")
    // A's timer stops (an event loop stuck, say); its Redis connections stay open.
    const tick = a.share.tick.bind(a.share)
    a.share.tick = () => undefined
    await until(() => b.share.peerCount() === 0, 5000, 'A expired at B')
    expect(seen(b, q.instance)).toBe(0)
    a.share.tick = tick
    await until(() => b.share.peerCount() === 1 && seen(b, q.instance) === q.blocks, 5000, 'A heard again')
    q.lease.release()
  })

  it('routes on its own counts while Redis is down, says so once, and shares again when it is back', async () => {
    const a = await replica('a')
    const b = await replica('b')
    await until(() => b.share.peerCount() === 1 && a.share.peerCount() === 1, 10_000, 'A and B to hear each other')
    const q = queue(a, 7)
    await until(() => seen(b, q.instance) === q.blocks, 5000, "A's figure at B")
    const failures = b.share.counts.connectionFailures
    await redis.kill()
    await until(() => !a.share.connected && !b.share.connected, 10_000, 'both to see Redis gone')
    expect(b.share.counts.connectionFailures).toBe(failures + 1)
    // Nothing throws; picks go on; the others' figures expire to 0.
    await until(() => seen(b, q.instance) === 0 && b.share.peerCount() === 0, 5000, "A's figure expired at B")
    b.router.pick(prompt(8)).release()
    expect(b.logs.filter((l) => /lost the Redis connection/.test(l.msg))).toHaveLength(1)
    expect(b.logs.find((l) => /lost the Redis connection/.test(l.msg))!.reason).toEqual(expect.any(String))
    await redis.restart()
    await until(() => a.share.connected && b.share.connected, 15_000, 'both to reconnect')
    await until(() => seen(b, q.instance) === q.blocks, 5000, "A's figure at B again")
    expect(logged(b, /connection restored/)).toBe(true)
    expect(b.share.counts.connectionFailures).toBe(failures + 1)
    q.lease.release()
  })

  it('starts without Redis, says it cannot reach it, and shares once it answers', async () => {
    const lost = await startRedis()
    await lost.kill()
    try {
      const a = await replica('a', { url: lost.url })
      const b = await replica('b', { url: lost.url })
      await until(() => logged(a, /cannot reach Redis/), 5000, 'the start-up warning')
      expect(a.share.connected).toBe(false)
      expect(a.share.counts.connectionFailures).toBe(1)
      a.router.pick(prompt(9)).release()
      await lost.restart()
      await until(() => a.share.peerCount() === 1 && b.share.peerCount() === 1, 15_000, 'A and B to hear each other')
      expect(logged(a, /connected to Redis/)).toBe(true)
      expect(a.share.counts.connectionFailures).toBe(1)
    } finally {
      await lost.stop()
    }
  })

  it('counts and drops what is not a replica\'s message, and hears nothing from another prefix', async () => {
    const b = await replica('b')
    const other = await replica('x', { prefix: 'other-fleet' })
    await until(() => b.share.connected && other.share.connected, 10_000, 'connected')
    const raw = createClient({ url: redis.url })
    await raw.connect()
    try {
      for (const junk of ['not json', '[1,2]', '{"replica":"z","seq":-1,"ts":1,"endpoints":{}}', '{"replica":"z","seq":1,"ts":1,"endpoints":{"default":{"i":"12"}}}', '{"replica":"z","seq":1,"ts":1,"endpoints":{"__proto__":{"toString":1.5}}}']) {
        await raw.publish('prefix-router:load', junk)
      }
      await until(() => b.share.counts.dropped === 5, 5000, 'five dropped')
      expect(b.logs.filter((l) => /not a replica's load/.test(l.msg))).toHaveLength(1)
      // A well-formed message naming "__proto__" is a figure like any other, not a prototype.
      await raw.publish('prefix-router:load', '{"replica":"z","seq":1,"ts":1,"endpoints":{"__proto__":{"toString":3},"default":{"http://i1:8000":4}}}')
      await until(() => seen(b, 'http://i1:8000') === 4, 5000, "z's figure")
    } finally {
      raw.destroy()
    }
    expect(b.share.shared()).toEqual({ ['__proto__']: { toString: 3 }, default: { 'http://i1:8000': 4 } })
    expect(b.share.peerCount()).toBe(1)
    expect(other.share.peerCount()).toBe(0)
    expect(other.share.counts.dropped).toBe(0)
  })
})

describe('share-load against a hostile publisher', () => {
  it(`keeps ${MAX_PEERS} peers of 1,000 ids naming 1,001 instances each, counts the rest, says so once, and clamps the sums`, async () => {
    const a = await replica('a')
    // The made-up replicas send no heartbeat: they must not expire while the test reads them.
    const b = await replica('b', { expireMs: 60_000 })
    await until(() => b.share.peerCount() === 1, 10_000, 'B to hear A')
    const qa = queue(a, 7)
    await until(() => seen(b, qa.instance) === qa.blocks, 5000, "A's figure at B")
    const raw = createClient({ url: redis.url })
    await raw.connect()
    try {
      // The real instances and 998 made up, each with a block queued.
      const row = Object.fromEntries([...ids, ...Array.from({ length: 998 }, (_, i) => `http://made-up-${i}:8000`)].map((id) => [id, 1]))
      const body = JSON.stringify({ default: row })
      await Promise.all(Array.from({ length: 1000 }, (_, k) => raw.publish('prefix-router:load', `{"replica":"hostile-${k}","seq":0,"ts":1,"endpoints":${body}}`)))
      await until(() => b.share.counts.refused === 1000 - (MAX_PEERS - 1), 20_000, 'the refused messages counted')
      expect(b.share.peerCount()).toBe(MAX_PEERS)
      expect(b.logs.filter((l) => /more than 64 other replicas/.test(l.msg))).toHaveLength(1)
      // Refused from its first bytes: a new id's message is not parsed (this one would not parse).
      await raw.publish('prefix-router:load', '{"replica":"hostile-new","seq":0,"ts":1,"endpoints":{"default":')
      await until(() => b.share.counts.refused === 1000 - (MAX_PEERS - 1) + 1, 5000, 'the unparsed message refused')
      expect(b.share.counts.dropped).toBe(0)
      // A, heard first, still counts; the kept hostile ones add their one block each.
      expect(seen(b, qa.instance)).toBe(qa.blocks + MAX_PEERS - 1)
      const report = b.share.report()
      expect(report.messages.refused).toBe(1000 - (MAX_PEERS - 1) + 1)
      expect(report.maxPeers).toBe(MAX_PEERS)
      // Two kept peers at MAX_SAFE_INTEGER: the sum given to the router is 2^32 - 1, not past 2^53.
      const big = JSON.stringify({ default: { [ids[0]!]: Number.MAX_SAFE_INTEGER } })
      for (const k of [0, 1]) await raw.publish('prefix-router:load', `{"replica":"hostile-${k}","seq":1,"ts":1,"endpoints":${big}}`)
      await until(() => seen(b, ids[0]!) === MAX_FIGURE, 5000, 'the clamped sum')
      expect(b.share.shared().default![ids[0]!]).toBe(MAX_FIGURE)
    } finally {
      raw.destroy()
    }
    qa.lease.release()
  })
})

describe('share-load ids', () => {
  it('warns when two processes publish under one id, and refuses an id with spaces', async () => {
    const a = await replica('dup')
    const b = await replica('dup')
    await until(() => logged(a, /another process publishes under this replica's id/) && logged(b, /another process publishes under this replica's id/), 5000, 'both warned')
    expect(a.share.peerCount()).toBe(0)
    await expect(ShareLoad.start({ url: redis.url, replicaId: 'has space', endpoints: () => [] })).rejects.toThrow(/replicaId/)
    await expect(ShareLoad.start({ url: redis.url, replicaId: 'r', endpoints: () => [], intervalMs: 10, heartbeatMs: 1000, expireMs: 500 })).rejects.toThrow(/expireMs/)
  })

  it('makes a default id of the host, the pid and random bytes', () => {
    const id = defaultReplicaId()
    expect(id).toMatch(new RegExp(`-${process.pid}-[0-9a-f]{6}$`))
    expect(defaultReplicaId()).not.toBe(id)
  })
})

describe('share-load configuration', () => {
  it('refuses a malformed URL at start, naming the flag and the value', () => {
    expect(() => buildConfig({ 'share-load': 'http://10.0.0.5:6379', upstream: ['http://127.0.0.1:1'] }, {})).toThrow(
      /shareLoad\.url: must start with redis:\/\/ \(or rediss:\/\/ for TLS\); got "http:\/\/10\.0\.0\.5:6379" \(from --share-load\)/,
    )
    expect(() => buildConfig({ upstream: ['http://127.0.0.1:1'] }, { PREFIX_ROUTER_SHARE_LOAD: 'redis://h:6379/zero' })).toThrow(/\/DB, a database number.*got "redis:\/\/h:6379\/zero" \(from PREFIX_ROUTER_SHARE_LOAD\)/)
    expect(() => buildConfig({ 'share-load': 'redis://:99999', upstream: ['http://127.0.0.1:1'] }, {})).toThrow(/--share-load/)
    expect(() => buildConfig({ 'share-load-interval-ms': '5', upstream: ['http://127.0.0.1:1'] }, {})).toThrow(/--share-load-interval-ms goes with --share-load/)
    expect(() => buildConfig({ 'share-load': 'redis://h:6379', 'share-load-interval-ms': '0', upstream: ['http://127.0.0.1:1'] }, {})).toThrow(/shareLoad\.intervalMs.*from --share-load-interval-ms/)
    expect(() => buildConfig({ 'replica-id': 'has space', upstream: ['http://127.0.0.1:1'] }, {})).toThrow(/replicaId.*from --replica-id/)
    const ok = buildConfig({ 'share-load': 'rediss://user:pw@redis.internal:6380/2', 'share-load-prefix': 'fleet-b', 'replica-id': 'r1', upstream: ['http://127.0.0.1:1'] }, {}).config
    expect(ok.shareLoad).toEqual({ url: 'rediss://user:pw@redis.internal:6380/2', intervalMs: 10, prefix: 'fleet-b', expireMs: 3000 })
    expect(ok.replicaId).toBe('r1')
    expect(parseConfig({}).shareLoad).toBeUndefined()
  })

  it('reads URLs as the client does, and never shows a password', () => {
    for (const u of ['redis://127.0.0.1:6379', 'redis://h', 'rediss://h:6380/15', 'redis://[::1]:6379', 'redis://u:p%40ss@h:1/0']) expect(redisUrlProblem(u), u).toBeUndefined()
    for (const u of ['127.0.0.1:6379', 'redis:/h', 'redis://', 'redis://h:6379/a', 'redis://h?x=1', 'unix:///tmp/r.sock']) expect(redisUrlProblem(u), u).toBeDefined()
    expect(redactRedisUrl('redis://u:secret@h:1/0')).toBe('redis://u:***@h:1/0')
    expect(redactRedisUrl('redis://h:1')).toBe('redis://h:1')
  })

  it('decodes only well-formed messages', () => {
    expect(decodeLoad('{"replica":"a","seq":0,"ts":1,"endpoints":{"d":{"i":0}}}')).toMatchObject({ replica: 'a', endpoints: { d: { i: 0 } }, bye: false })
    expect(decodeLoad('{"replica":"a","seq":3,"ts":1,"endpoints":{},"bye":true}')).toMatchObject({ bye: true })
    expect(decodeLoad('{"replica":"","seq":0,"ts":1,"endpoints":{}}')).toMatch(/replica/)
    expect(decodeLoad('{"replica":"a","seq":0,"ts":1,"endpoints":{"d":{"i":1.5}}}')).toMatch(/whole number/)
    expect(decodeLoad('{"replica":"a","seq":0,"ts":1,"endpoints":{"d":[]}}')).toMatch(/not an object/)
  })
})
