// A hostile KV-event publisher against a real `prefix-router serve`: does the router keep
// answering /ping within 100 ms, and how far does its RSS go? The publisher (this process)
// is an instance's ZeroMQ PUB and replay ROUTER, on loopback. Attacks, one after another:
//   huge     one 117 MB batch (a single BlockStored of 4.7M blocks), as an engine never sends;
//   cap      20 batches just under the 1 MiB cap (42k blocks each), in a burst: the longest turns a publisher can cause
//            (the first time, the native index grows past 800k entries on the way: one rehash);
//   cap again the same burst, the index grown;
//   garbage  50,000 frames of garbage, as fast as the socket takes them;
//   stall    a replay socket that never answers while 100,000 small live batches with gaps flood;
//   flood    a replay socket that answers without end (2,100,000 answers, no end marker);
// each after serve has handled the one before, with a quiet second as its baseline (a warm-up
// second before the first is discarded), and measured until serve has handled all of it.
// /ping is asked every 10 ms (one at a time), serve's RSS read from /proc every 20 ms.
// Usage: npm run build && npx tsx bench/kv-hostile.bench.ts
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { Router, XPublisher } from 'zeromq'
import { encodeBatch } from '../src/fleet/events/codec.js'
import { seqFrame } from '../src/fleet/events/frames.js'
import { machine, startNodeScript, startProcess, stopStarted } from './harness.js'

const root = new URL('..', import.meta.url).pathname

/** A msgpack EventBatch map with one BlockStored of `blocks` 64-bit hashes and 16 one-byte tokens each, written straight into a buffer. */
function hugeBatch(blocks: number): Buffer {
  const bs = 16
  const str = (s: string) => Buffer.concat([Buffer.from([0xa0 | s.length]), Buffer.from(s)])
  const arr32 = (n: number) => {
    const b = Buffer.alloc(5)
    b[0] = 0xdd
    b.writeUInt32BE(n, 1)
    return b
  }
  const hashes = Buffer.alloc(blocks * 9)
  for (let i = 0; i < blocks; i++) {
    hashes[i * 9] = 0xcf
    hashes.writeBigUInt64BE(0x9e3779b97f4a7c15n ^ BigInt(i), i * 9 + 1)
  }
  const ts = Buffer.alloc(9)
  ts[0] = 0xcb
  ts.writeDoubleBE(Date.now() / 1000, 1)
  return Buffer.concat([
    Buffer.from([0x82]), str('ts'), ts, str('events'), Buffer.from([0x91]),
    Buffer.from([0x88]), str('type'), str('BlockStored'),
    str('block_hashes'), arr32(blocks), hashes,
    str('parent_block_hash'), Buffer.from([0xc0]),
    str('token_ids'), arr32(blocks * bs), Buffer.alloc(blocks * bs, 5),
    str('block_size'), Buffer.from([bs]),
    str('lora_id'), Buffer.from([0xc0]),
    str('medium'), str('GPU'),
    str('lora_name'), Buffer.from([0xc0]),
  ])
}

const rssMb = (pid: number): number => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m === null ? NaN : Number(m[1]) / 1024
}

interface Window {
  pings: number[]
  rss: number[]
  failed: number
}

/** /ping one at a time every 10 ms, and serve's RSS every 20 ms, until `stop` resolves. */
async function watch(url: string, pid: number, stop: Promise<unknown>): Promise<Window> {
  const w: Window = { pings: [], rss: [], failed: 0 }
  let done = false
  void stop.finally(() => (done = true))
  const rss = setInterval(() => w.rss.push(rssMb(pid)), 20)
  while (!done) {
    const t = performance.now()
    try {
      const r = await fetch(`${url}/ping`, { signal: AbortSignal.timeout(10_000) })
      await r.arrayBuffer()
      if (r.status !== 200) w.failed++
    } catch {
      w.failed++
    }
    w.pings.push(performance.now() - t)
    await sleep(10)
  }
  clearInterval(rss)
  w.rss.push(rssMb(pid))
  return w
}

const q = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))] ?? NaN
const f1 = (x: number) => x.toFixed(1)

async function main(): Promise<void> {
  console.log(`machine: ${machine()}`)
  const pub = new XPublisher({ linger: 0, sendHighWaterMark: 0 })
  await pub.bind('tcp://127.0.0.1:*')
  const replay = new Router({ linger: 0 })
  await replay.bind('tcp://127.0.0.1:*')
  const port = (e: string) => Number(e.slice(e.lastIndexOf(':') + 1))
  let replayMode = 'answer' as 'answer' | 'silent' | 'flood'
  let flooded = 0
  const buffer = new Map<number, Uint8Array>()
  void (async () => {
    for await (const [id, , start] of replay) {
      if (replayMode === 'silent') continue
      const from = Number(start!.readBigInt64BE(0))
      if (replayMode === 'flood') {
        // Answers without end, until the router has given up on this replay.
        const p = buffer.get(0)!
        for (flooded = 0; flooded < 2_100_000 && replayMode === 'flood'; flooded++) await replay.send([id!, '', '', seqFrame(from), p])
        continue
      }
      for (const [s, p] of buffer) if (s >= from) await replay.send([id!, '', '', seqFrame(s), p])
      await replay.send([id!, '', '', seqFrame(-1), ''])
    }
  })().catch(() => undefined)
  let subscribed = 0
  void (async () => {
    for await (const [f] of pub) if (f?.[0] === 1) subscribed++
  })().catch(() => undefined)

  const stub = await startNodeScript(['bench/stub-upstream.mjs'])
  const upstream = `http://127.0.0.1:${stub.match[1]}`
  const serve = await startProcess(
    process.execPath,
    ['dist/cli.js', 'serve', '--upstream', upstream, '--port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--log-level', 'warn',
      '--strategy', 'longest_prefix', '--kv-events-port', String(port(pub.lastEndpoint!)), '--kv-events-replay-port', String(port(replay.lastEndpoint!)), '--tokenizer', 'bytes'],
    /on (http:\/\/[\d.:]+) \(admin (http:\/\/[\d.:]+)/,
    'stderr',
    { cwd: root },
  )
  const url = serve.match[1]!
  const admin = serve.match[2]!
  for (let i = 0; i < 1000 && subscribed === 0; i++) await sleep(10)
  if (subscribed === 0) throw new Error('serve never subscribed')

  let seq = 0
  const small = (): Uint8Array => encodeBatch({ ts: Date.now() / 1000, events: [{ type: 'BlockRemoved', blockHashes: [BigInt(seq)], medium: 'GPU', groupIdx: null }], dataParallelRank: 0 }, 'map')
  const send = async (payload: Uint8Array, keep = true) => {
    const s = seq++
    if (keep) buffer.set(s, payload)
    await pub.send(['', seqFrame(s), payload])
  }
  await send(small()) // the view starts
  await sleep(500)
  // Warm-up, discarded: the first pings open connections and compile.
  await watch(url, serve.pid, sleep(1000))

  const huge = hugeBatch(4_700_000)
  const cap = hugeBatch(Math.floor((1024 * 1024 - 200) / 25))
  console.log(`payloads: huge ${f1(huge.length / 1e6)} MB, cap ${f1(cap.length / 2 ** 20)} MiB`)
  const attacks: [string, () => Promise<void>][] = [
    ['huge: one 117 MB batch', async () => {
      await send(huge, false)
      await sleep(2000)
      await send(small())
    }],
    ['cap: 20 batches just under 1 MiB, one burst', async () => {
      for (let i = 0; i < 20; i++) await send(cap, false)
    }],
    // The same again: the index has grown to hold them by now (its growth is one native rehash).
    ['cap again: the same 20 batches', async () => {
      for (let i = 0; i < 20; i++) await send(cap, false)
    }],
    ['garbage: 50,000 bad frames', async () => {
      for (let i = 0; i < 50_000; i++) await pub.send(['', Buffer.alloc(5), Buffer.from([0xc1])])
      await sleep(1000)
    }],
    ['stall: silent replay socket, 100,000 live batches with a gap every 100', async () => {
      replayMode = 'silent'
      const p = small()
      for (let i = 0; i < 100_000; i++) {
        if (i % 100 === 99) seq++ // a gap
        const s = seq++
        await pub.send(['', seqFrame(s), p])
      }
      await sleep(3000)
      replayMode = 'answer'
    }],
    ['flood: a replay answering 2,100,000 times without an end marker', async () => {
      const failures = Number((await publisher()).replayFailures)
      replayMode = 'flood'
      seq += 5 // a gap: the replay is asked
      await send(small())
      for (let i = 0; i < 600 && Number((await publisher()).replayFailures) === failures; i++) await sleep(100)
      replayMode = 'answer'
      console.log(`  (the replay socket had sent ${flooded} answers when serve gave up on it)`)
    }],
  ]
  /** Until serve's counters for the publisher stop moving for longer than a replay's timeout (2 s): the previous attack is fully handled. */
  const drained = async () => {
    let before = ''
    for (let i = 0; i < 200; i++) {
      const now = JSON.stringify(await publisher())
      if (now === before) return
      before = now
      await sleep(2500)
    }
  }
  const publisher = async () => {
    const st = (await (await fetch(`${admin}/admin/instances`)).json()) as { endpoints: { instances: { kvEvents: { publishers: Record<string, unknown>[] } }[] }[] }
    const { lastBatchAt: _l, ...p } = st.endpoints[0]!.instances[0]!.kvEvents.publishers[0]!
    return p
  }
  /** serve's own longest event-loop delay since the last scrape (prom-client resets it at each): what the pings do not see of the machine's other load. */
  const loopMaxMs = async () => {
    const m = /^nodejs_eventloop_lag_max_seconds (\S+)/m.exec(await (await fetch(`${admin}/metrics`)).text())
    return m === null ? NaN : Number(m[1]) * 1000
  }
  const rows: string[] = []
  for (const [name, attack] of attacks) {
    await drained()
    await loopMaxMs()
    const base = await watch(url, serve.pid, sleep(1000))
    const baseLoop = await loopMaxMs()
    // The attack, and then until serve has handled all of it.
    const during = await watch(url, serve.pid, attack().then(drained))
    const loop = await loopMaxMs()
    const p = await publisher()
    rows.push(
      `${name}\n  baseline: /ping max ${f1(Math.max(...base.pings))} ms, serve's loop delay max ${f1(baseLoop)} ms, RSS ${f1(Math.max(...base.rss))} MB` +
        `\n  attack:   /ping max ${f1(Math.max(...during.pings))} ms (p99 ${f1(q(during.pings, 0.99))}, ${during.pings.length} pings, ${during.failed} failed), serve's loop delay max ${f1(loop)} ms, RSS max ${f1(Math.max(...during.rss))} MB, ratio to baseline max ping ${f1(Math.max(...during.pings) / Math.max(...base.pings))}x` +
        `\n  counted:  ${JSON.stringify({ batches: p.batches, undecodable: p.undecodable, oversized: p.oversized, gaps: p.gaps, replays: p.replays, replayFailures: p.replayFailures })}`,
    )
    console.log(rows.at(-1))
  }
  const logs = serve.output().split('\n').filter((l) => l.includes('kv events'))
  console.log(`serve's KV-event log lines over the whole run: ${logs.length}`)
  await serve.stop()
  await stopStarted()
  pub.close()
  replay.close()
}

await main()
