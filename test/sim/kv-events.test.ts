// A live sim worker publishing its cache's KV events as vLLM does, read with plain ZeroMQ
// sockets (the wire) and with the router's KvEventSubscriber (the recovery paths).
import { spawn, spawnSync } from 'node:child_process'
import net from 'node:net'
import { fileURLToPath } from 'node:url'
import { Dealer, Subscriber } from 'zeromq'
import { afterEach, describe, expect, it } from 'vitest'
import { decodeBatch } from '../../src/fleet/events/codec.js'
import { readSeq, seqFrame } from '../../src/fleet/events/frames.js'
import { KvEventSubscriber } from '../../src/fleet/events/subscriber.js'
import type { BlockStoredEvent, KvEvent } from '../../src/fleet/events/types.js'
import { renderChat, tokenIdsOf, type SimFleet, type SimWorker } from '../../src/sim/index.js'
import { RecordingTarget, waitFor } from '../fleet/events/helpers.js'
import { fleet, post, promptOf } from './helpers.js'

interface Msg {
  topic: string
  seq: bigint
  payload: Buffer
  events: KvEvent[]
}

const sockets: { close(): unknown }[] = []
afterEach(async () => {
  for (const s of sockets.splice(0)) await s.close()
})

/** A raw SUB socket on a worker's publisher, collecting every message; resolves once subscribed. */
async function listen(w: SimWorker, topic = ''): Promise<Msg[]> {
  const pub = w.kvPublisher!
  const before = pub.subscribers
  const sub = new Subscriber({ linger: 0 })
  sockets.push(sub)
  sub.connect(pub.endpoint)
  sub.subscribe(topic)
  const out: Msg[] = []
  void (async () => {
    try {
      for await (const frames of sub) {
        const [t, s, p] = frames as [Buffer, Buffer, Buffer]
        out.push({ topic: t.toString(), seq: readSeq(s)!, payload: p, events: decodeBatch(p).events })
      }
    } catch {
      // closed
    }
  })()
  await waitFor(() => pub.subscribers > before, 'the subscription to reach the sim')
  return out
}

const chat = (content: string, extra: object = {}): object => ({ messages: [{ role: 'user', content }], max_tokens: 2, ...extra })
const storedOf = (msgs: Msg[]): BlockStoredEvent[] => msgs.flatMap((m) => m.events).filter((e): e is BlockStoredEvent => e.type === 'BlockStored')

describe('sim --kv-events-port: the wire', () => {
  it('publishes BlockStored after a chat, with the prompt\'s tokens, the LoRA name and cache_salt', async () => {
    const f = await fleet({ loras: ['ad'], kvEvents: { port: 0 } })
    const msgs = await listen(f.workers[0]!)
    const content = promptOf(150, 'wire')
    const r = await post(f.urls[0]!, '/v1/chat/completions', chat(content, { model: 'ad', cache_salt: 's1' }))
    expect(r.status).toBe(200)
    await waitFor(() => storedOf(msgs).length > 0, 'a BlockStored')
    const ev = storedOf(msgs)
    const rendered = new TextEncoder().encode(renderChat([{ role: 'user', content }], true))
    const full = Math.floor(rendered.length / 64) // blocks of 16 tokens of 4 bytes
    expect(ev.flatMap((e) => e.tokenIds)).toEqual([...tokenIdsOf(rendered)].slice(0, full * 16))
    expect(ev.flatMap((e) => e.blockHashes).length).toBe(full)
    expect(ev[0]!.parentBlockHash).toBeNull()
    expect(ev.every((e) => e.loraName === 'ad' && e.medium === 'GPU' && e.blockSize === 16)).toBe(true)
    const extra = ev.flatMap((e) => e.extraKeys!)
    expect(extra[0]).toEqual(['ad', 's1'])
    expect(extra.slice(1).every((k) => JSON.stringify(k) === '["ad"]')).toBe(true)
    expect(msgs[0]!.seq).toBe(0n)
    expect(msgs.map((m) => m.seq)).toEqual(msgs.map((_, i) => BigInt(i)))
    expect(msgs[0]!.topic).toBe('')
  })

  it('reports evictions under a tiny cache as BlockRemoved of blocks it stored', async () => {
    const f = await fleet({ kvBlocks: 16, kvEvents: { port: 0 } })
    const msgs = await listen(f.workers[0]!)
    for (let i = 0; i < 4; i++) expect((await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(100, `ev${i}`), max_tokens: 2 })).status).toBe(200)
    await waitFor(() => msgs.some((m) => m.events.some((e) => e.type === 'BlockRemoved')), 'a BlockRemoved')
    const stored = new Set(storedOf(msgs).flatMap((e) => e.blockHashes as bigint[]))
    const removed = msgs.flatMap((m) => m.events).flatMap((e) => (e.type === 'BlockRemoved' ? (e.blockHashes as bigint[]) : []))
    expect(removed.every((h) => stored.has(h))).toBe(true)
  })

  it('writes map or array encodings and the topic frame', async () => {
    for (const encoding of ['map', 'array'] as const) {
      const f = await fleet({ kvEvents: { port: 0, encoding, topic: 'kv@sim' } })
      const msgs = await listen(f.workers[0]!, 'kv@')
      await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, encoding), max_tokens: 1 })
      await waitFor(() => msgs.length > 0, 'a message')
      expect(msgs[0]!.topic).toBe('kv@sim')
      // fixmap of 3 (ts, events, data_parallel_rank) or fixarray of 3
      expect(msgs[0]!.payload[0]).toBe(encoding === 'map' ? 0x83 : 0x93)
      expect(storedOf(msgs).length).toBeGreaterThan(0)
      await f.close()
    }
  })

  it('a restart (POST /sim/restart or the restart fault) starts the sequence again at 0 with an empty cache', async () => {
    const f = await fleet({ kvEvents: { port: 0 } })
    const w = f.workers[0]!
    const msgs = await listen(w)
    for (let i = 0; i < 3; i++) await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, `r${i}`), max_tokens: 1 })
    await waitFor(() => msgs.length >= 3, 'three batches')
    expect((await post(f.urls[0]!, '/sim/restart', {})).status).toBe(200)
    expect(w.engine.cache.cachedBlocks).toBe(0)
    // New sockets: the subscriber reconnects and subscribes again by itself.
    await waitFor(() => w.kvPublisher!.subscribers > 0, 'the resubscription')
    const n = msgs.length
    await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, 'after'), max_tokens: 1 })
    await waitFor(() => msgs.length > n, 'a batch after the restart')
    expect(msgs[n]!.seq).toBe(0n)
    expect(msgs.slice(n).flatMap((m) => m.events).some((e) => e.type === 'AllBlocksCleared')).toBe(false)

    const r = await post(f.urls[0]!, '/sim/faults', { restart: true })
    expect(r.body.restart).toBe(true)
    await waitFor(() => w.kvPublisher!.subscribers > 0, 'the resubscription')
    const m = msgs.length
    await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, 'again'), max_tokens: 1 })
    await waitFor(() => msgs.length > m, 'a batch after the second restart')
    expect(msgs[m]!.seq).toBe(0n)
    expect((await post(f.urls[0]!, '/sim/faults', { restart: 'yes' })).status).toBe(400)
  })

  for (const [framing, topic] of [
    [undefined, 'kv@w0'],
    [undefined, ''],
    ['legacy', 'kv@w0'],
  ] as const) {
    const name = framing === undefined ? "vLLM 0.26.0's framing by default, the topic after the delimiter" : "older vLLM's framing with replayFraming 'legacy', no topic frame"
    it(`answers replay requests with ${name} (topic ${JSON.stringify(topic)}), from the asked sequence number, then -1`, async () => {
      const f = await fleet({ kvEvents: { port: 0, replayPort: 0, topic, ...(framing !== undefined ? { replayFraming: framing } : {}) } })
      const msgs = await listen(f.workers[0]!)
      for (let i = 0; i < 3; i++) await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, `rp${i}`), max_tokens: 1 })
      await waitFor(() => msgs.length >= 3, 'three batches')
      const dealer = new Dealer({ linger: 0 })
      sockets.push(dealer)
      dealer.connect(f.kvReplayEndpoints![0]!)
      await dealer.send(['', seqFrame(1)])
      const withTopic = framing === undefined
      const seqAt = withTopic ? 2 : 1
      const got: Buffer[][] = []
      for (;;) {
        const frames = await dealer.receive()
        got.push(frames)
        if (readSeq(frames[seqAt]!) === -1n) break
      }
      const live = msgs.slice(1)
      expect(got.length).toBe(live.length + 1)
      got.slice(0, -1).forEach((frames, i) => {
        expect(frames).toHaveLength(withTopic ? 4 : 3)
        expect(frames[0]!.length).toBe(0)
        if (withTopic) expect(frames[1]!.toString()).toBe(topic)
        expect(readSeq(frames[seqAt]!)).toBe(live[i]!.seq)
        expect(frames[seqAt + 1]!.equals(live[i]!.payload)).toBe(true)
      })
      // vLLM's end marker has an empty topic frame whatever the stream's topic.
      expect(got.at(-1)!.map((b) => b.toString('hex'))).toEqual(withTopic ? ['', '', 'ffffffffffffffff', ''] : ['', 'ffffffffffffffff', ''])
    })
  }
})

describe('sim KV events through KvEventSubscriber', () => {
  async function follow(f: SimFleet, target: RecordingTarget, resyncMs = 60_000): Promise<KvEventSubscriber> {
    const w = f.workers[0]!
    const before = w.kvPublisher!.subscribers
    const sub = new KvEventSubscriber({
      instance: w.id,
      endpoint: f.kvEndpoints![0]!,
      ...(f.kvReplayEndpoints !== undefined ? { replayEndpoint: f.kvReplayEndpoints[0]! } : {}),
      target,
      resyncMs,
    })
    sockets.push(sub)
    sub.start()
    await waitFor(() => w.kvPublisher!.subscribers > before, 'the subscriber')
    return sub
  }

  it('dropped batches are replayed: every sequence number applied once, no reset after the first', async () => {
    const f = await fleet({ kvEvents: { port: 0, replayPort: 0 }, faults: { kvDropRate: 0.5, seed: 7 } })
    const target = new RecordingTarget()
    const sub = await follow(f, target)
    for (let i = 0; i < 12; i++) await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, `drop${i}`), max_tokens: 1 })
    await post(f.urls[0]!, '/sim/faults', {}) // the last batch goes out live, closing any trailing gap
    await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, 'final'), max_tokens: 1 })
    const p = f.workers[0]!.kvPublisher!
    expect(p.dropped).toBeGreaterThan(0)
    await waitFor(() => sub.status().seq === BigInt(p.nextSeq - 1), 'the subscriber to catch up')
    const seqs = target.seqs // from the first batch seen live (batch 0 may have been dropped)
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + BigInt(i)))
    expect(target.count('reset')).toBe(1)
    expect(sub.status()).toMatchObject({ stale: false, lost: 0 })
    expect(sub.status().replays).toBeGreaterThan(0)
  })

  it('a restart replaces the sockets; the subscriber reconnects and follows the new process from 0', async () => {
    const f = await fleet({ kvEvents: { port: 0, replayPort: 0 } })
    const target = new RecordingTarget()
    const sub = await follow(f, target)
    for (let i = 0; i < 3; i++) await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, `old${i}`), max_tokens: 1 })
    await waitFor(() => target.count('batch') >= 3, 'three batches')
    await post(f.urls[0]!, '/sim/restart', {})
    // Requests right away: batches the new process sends before the subscriber is back are replayed.
    for (let i = 0; i < 2; i++) await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, `new${i}`), max_tokens: 1 })
    await waitFor(() => f.workers[0]!.kvPublisher!.subscribers > 0, 'the resubscription')
    await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, 'new2'), max_tokens: 1 })
    const p = f.workers[0]!.kvPublisher!
    await waitFor(() => sub.status().seq === BigInt(p.nextSeq - 1) && sub.status().restarts === 1, 'the new process followed')
    const afterReset = target.calls.slice(target.calls.findIndex((c) => c.kind === 'reset' && c.why === 'restart') + 1)
    expect(afterReset.filter((c) => c.kind === 'batch').map((c) => c.seq)).toEqual(Array.from({ length: p.nextSeq }, (_, i) => BigInt(i)))
    expect(sub.status()).toMatchObject({ stale: false, lost: 0 })
  })

  it('without a replay socket dropped batches make the view stale; a restart resets it', async () => {
    const f = await fleet({ kvEvents: { port: 0 }, faults: { kvDropRate: 1, seed: 3 } })
    const target = new RecordingTarget()
    const sub = await follow(f, target)
    await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, 'lost'), max_tokens: 1 })
    await post(f.urls[0]!, '/sim/faults', {})
    await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, 'seen'), max_tokens: 1 })
    await waitFor(() => target.count('batch') >= 1, 'a batch')
    // Whether the very first batch was lost or not, nothing before the first seen one is known.
    expect(target.calls[0]).toEqual({ kind: 'reset', why: 'connect' })

    await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, 'more'), max_tokens: 1 })
    await post(f.urls[0]!, '/sim/faults', { kv_drop_rate: 1 })
    await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, 'gone'), max_tokens: 1 })
    await post(f.urls[0]!, '/sim/faults', {})
    await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, 'back'), max_tokens: 1 })
    await waitFor(() => sub.status().stale, 'the view to go stale')
    expect(target.calls.some((c) => c.kind === 'reset' && c.why === 'gap')).toBe(true)

    const restarts = sub.status().restarts
    await post(f.urls[0]!, '/sim/restart', {})
    await waitFor(() => f.workers[0]!.kvPublisher!.subscribers > 0, 'the resubscription')
    await post(f.urls[0]!, '/v1/completions', { prompt: promptOf(40, 'fresh'), max_tokens: 1 })
    await waitFor(() => sub.status().restarts > restarts, 'the restart to be seen')
    expect(target.calls.some((c) => c.kind === 'reset' && c.why === 'restart')).toBe(true)
    expect(sub.status().seq).toBe(0n)
  })
})

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

describe('prefix-router sim --kv-events-*', () => {
  it('lists the flags in --help', () => {
    const r = spawnSync(process.execPath, [cli, 'sim', '--help'], { encoding: 'utf8' })
    for (const flag of ['--kv-events-port', '--kv-events-replay-port', '--kv-events-encoding', '--kv-events-topic', '--kv-events-replay-framing', '--fault-kv-drop-rate', '--fault-kv-delay-ms', '/sim/restart']) {
      expect(r.stdout).toContain(flag)
    }
  })

  it('rejects bad values with one line naming the flag and the value, exit 2', () => {
    const cases: [string[], RegExp][] = [
      [['--kv-events-port', 'x'], /--kv-events-port must be an integer from 0 to 65535; got 'x'/],
      [['--kv-events-port', '70000'], /--kv-events-port must be an integer from 0 to 65535; got '70000'/],
      [['--kv-events-port', '65535', '--instances', '2'], /--kv-events-port \+ --instances - 1 must be at most 65535; got 65536/],
      [['--kv-events-port', '5557', '--kv-events-encoding', 'json'], /--kv-events-encoding must be map or array; got 'json'/],
      [['--kv-events-replay-port', '5558'], /--kv-events-replay-port needs --kv-events-port/],
      [['--kv-events-port', '5557', '--kv-events-replay-port', '5600', '--kv-events-replay-framing', 'v2'], /--kv-events-replay-framing must be topic or legacy; got 'v2'/],
      [['--kv-events-port', '5557', '--kv-events-replay-framing', 'legacy'], /--kv-events-replay-framing needs --kv-events-replay-port/],
      [['--kv-events-port', '5557', '--kv-events-replay-port', '5557'], /--kv-events-replay-port 5557 overlaps/],
      [['--fault-kv-drop-rate', '0.5'], /--fault-kv-drop-rate needs --kv-events-port/],
      [['--kv-events-port', '5557', '--fault-kv-drop-rate', '2'], /--fault-kv-drop-rate must be a number from 0 to 1; got '2'/],
      [['--kv-events-port', '5557', '--fault-kv-delay-ms=-1'], /--fault-kv-delay-ms must be a number from 0 to 3600000; got '-1'/],
    ]
    for (const [args, re] of cases) {
      const r = spawnSync(process.execPath, [cli, 'sim', '--port', '0', ...args], { encoding: 'utf8' })
      expect(r.stderr, args.join(' ')).toMatch(re)
      expect(r.status).toBe(2)
      expect(r.stderr.trim().split('\n')).toHaveLength(1)
    }
  })

  it('a KV-event port in use is named, with its socket and flag, in one line (exit 1)', async () => {
    // A plain TCP listener holds the port, as another process would.
    const busy = net.createServer()
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r))
    const port = (busy.address() as net.AddressInfo).port
    try {
      const sim = (args: string[]) => spawnSync(process.execPath, [cli, 'sim', '--port', '0', '--profile', 'tiny', ...args], { encoding: 'utf8' })
      const pub = sim(['--kv-events-port', String(port)])
      expect(pub.stderr).toBe(`prefix-router sim: cannot listen on tcp://127.0.0.1:${port} (worker 0's KV events PUB socket, --kv-events-port): address already in use (EADDRINUSE)\n`)
      expect(pub.status).toBe(1)
      // The second worker's publisher is on the next port: that is the one named.
      const second = sim(['--instances', '2', '--kv-events-port', String(port - 1)])
      expect(second.stderr).toBe(`prefix-router sim: cannot listen on tcp://127.0.0.1:${port} (worker 1's KV events PUB socket, --kv-events-port ${port - 1} + 1): address already in use (EADDRINUSE)\n`)
      expect(second.status).toBe(1)
      const replay = sim(['--kv-events-port', '0', '--kv-events-replay-port', String(port)])
      expect(replay.stderr).toBe(`prefix-router sim: cannot listen on tcp://127.0.0.1:${port} (worker 0's KV events replay socket, --kv-events-replay-port): address already in use (EADDRINUSE)\n`)
      expect(replay.status).toBe(1)
    } finally {
      await new Promise((r) => busy.close(r))
    }
  })

  it('publishes on the given ports and says where', async () => {
    const child = spawn(process.execPath, [cli, 'sim', '--port', '0', '--profile', 'tiny', '--kv-events-port', '0', '--kv-events-replay-port', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    try {
      let err = ''
      const line = await new Promise<string>((resolve, reject) => {
        child.stderr.on('data', (d: Buffer) => {
          err += d.toString()
          const l = err.split('\n').find((x) => x.includes('KV events'))
          if (l !== undefined) resolve(l)
        })
        child.once('exit', (code) => reject(new Error(`exited early with ${code}: ${err}`)))
      })
      expect(line).toMatch(/KV events \(map\) on tcp:\/\/127\.0\.0\.1:\d+; replay on tcp:\/\/127\.0\.0\.1:\d+/)
    } finally {
      child.kill('SIGTERM')
    }
  })
})
