// KvEventSubscriber against a hand-driven publisher on loopback ZeroMQ sockets: order,
// gaps with and without replay, restarts, duplicates, malformed frames, floods.
import { afterEach, describe, expect, it } from 'vitest'
import { seqFrame } from '../../../src/fleet/events/frames.js'
import { KvEventSubscriber, type KvEventSubscriberOptions } from '../../../src/fleet/events/subscriber.js'
import { RecordingTarget, removed, subscribeTo, TestPublisher, waitFor, type SubscriberLog } from './helpers.js'

const open: { close(): unknown }[] = []
afterEach(async () => {
  for (const o of open.splice(0)) await o.close()
})

interface Rig {
  pub: TestPublisher
  sub: KvEventSubscriber
  target: RecordingTarget
  logs: SubscriberLog[]
}

async function rig(o: { replay?: boolean } & Partial<KvEventSubscriberOptions> = {}): Promise<Rig> {
  const pub = await TestPublisher.open(o.replay ?? false)
  open.push(pub)
  const { replay: _r, ...opts } = o
  return { pub, ...(await subscribeTo(pub, opts, open)) }
}

describe('KvEventSubscriber', () => {
  it('applies batches in order; the first one resets the view (connect)', async () => {
    const { pub, sub, target } = await rig()
    for (let s = 5; s < 10; s++) await pub.batch(s, [removed(s)])
    await waitFor(() => target.seqs.length === 5, 'five batches')
    expect(target.calls[0]).toEqual({ kind: 'reset', why: 'connect' })
    expect(target.seqs).toEqual([5n, 6n, 7n, 8n, 9n])
    expect(target.calls.filter((c) => c.kind === 'batch').map((c) => c.hashes)).toEqual([[5n], [6n], [7n], [8n], [9n]])
    const st = sub.status()
    expect(st).toMatchObject({ seq: 9n, batches: 5, events: 5, gaps: 0, stale: false, connected: true })
    expect(st.lastBatchAt).not.toBeNull()
  })

  it('fills a gap from the replay socket, in order, without resetting', async () => {
    const { pub, sub, target } = await rig({ replay: true })
    await pub.batch(0, [removed(0)])
    await waitFor(() => target.seqs.length === 1, 'batch 0')
    await pub.batch(1, [removed(1)], { live: false })
    await pub.batch(2, [removed(2)], { live: false })
    await pub.batch(3, [removed(3)])
    await pub.batch(4, [removed(4)])
    await waitFor(() => target.seqs.length === 5, 'batches 0-4')
    expect(target.seqs).toEqual([0n, 1n, 2n, 3n, 4n])
    // The rebuild on joining asks from 0 (once or twice: at the connect, and again at the
    // first batch if the buffer was still empty); the gap from the last applied, 0: the
    // engine's copy of it proves the same process.
    expect(pub.replayRequests.length).toBeGreaterThanOrEqual(2)
    expect(pub.replayRequests.every((s) => s === 0n)).toBe(true)
    expect(target.count('reset')).toBe(1) // the connect only
    expect(sub.status()).toMatchObject({ gaps: 1, replays: 1, lost: 0, stale: false })
  })

  it('without a replay endpoint a gap resets the view, marks it stale, and resyncs after resyncMs', async () => {
    const { pub, sub, target, logs } = await rig({ resyncMs: 50 })
    await pub.batch(10, [removed(10)])
    await waitFor(() => target.seqs.length === 1, 'batch 10')
    await pub.batch(14, [removed(14)])
    await waitFor(() => target.calls.some((c) => c.kind === 'stale' && c.stale === false), 'the view to be fresh again')
    const kinds = target.calls.map((c) => (c.kind === 'batch' ? `batch ${c.seq}` : c.kind === 'reset' ? `reset ${c.why}` : `stale ${c.stale}`))
    expect(kinds).toEqual(['reset connect', 'batch 10', 'reset gap', 'stale true', 'batch 14', 'stale false'])
    const warn = logs.find((l) => l.level === 'warn' && /lost/.test(l.msg))!
    expect(warn.msg).toMatch(/engine-a/)
    expect(warn.msg).toMatch(/11\.\.13/)
    expect(warn.fields).toMatchObject({ instance: 'engine-a', from: '11', to: '13' })
    expect(sub.status()).toMatchObject({ gaps: 1, lost: 1, stale: false, seq: 14n })
  })

  it('a replay that cannot fill the gap (starts too late, or never answers) resets and marks stale', async () => {
    const late = await rig({ replay: true, resyncMs: 60_000 })
    late.pub.replayMode = { kind: 'startAt', seq: 3 }
    await late.pub.batch(0, [removed(0)])
    await waitFor(() => late.target.seqs.length === 1, 'batch 0')
    for (const s of [1, 2, 3]) await late.pub.batch(s, [removed(s)], { live: false })
    await late.pub.batch(4, [removed(4)])
    await waitFor(() => late.target.seqs.includes(4n), 'batch 4')
    expect(late.target.seqs).toEqual([0n, 3n, 4n]) // the gap is 1..3; only 3 is replayed, after the reset
    expect(late.target.calls.filter((c) => c.kind === 'reset').map((c) => c.why)).toEqual(['connect', 'gap'])
    expect(late.sub.status()).toMatchObject({ stale: true, lost: 1 })

    const silent = await rig({ replay: true, replayTimeoutMs: 100 })
    silent.pub.replayMode = { kind: 'silent' }
    await silent.pub.batch(0, [removed(0)])
    await waitFor(() => silent.target.seqs.length === 1, 'batch 0')
    await silent.pub.batch(2, [removed(2)])
    await silent.pub.batch(3, [removed(3)])
    await waitFor(() => silent.target.seqs.length === 3, 'batches 2 and 3 after the replay times out')
    expect(silent.target.seqs).toEqual([0n, 2n, 3n])
    expect(silent.sub.status()).toMatchObject({ stale: true, lost: 1, gaps: 1 })
  })

  it('detects a restarted engine (sequence back to 0) and follows it', async () => {
    const { pub, sub, target } = await rig()
    for (let s = 0; s < 4; s++) await pub.batch(s, [removed(s)])
    await waitFor(() => target.seqs.length === 4, 'four batches')
    await pub.batch(0, [removed(100)], { ts: 5000 })
    await pub.batch(1, [removed(101)], { ts: 5001 })
    await waitFor(() => target.seqs.length === 6, 'the new process')
    expect(target.calls.filter((c) => c.kind === 'reset').map((c) => c.why)).toEqual(['connect', 'restart'])
    expect(target.calls.at(-1)!.hashes).toEqual([101n])
    expect(sub.status()).toMatchObject({ restarts: 1, seq: 1n, stale: false })
  })

  it('detects a restarted engine whose new sequence already passed the last one seen (the replay\'s anchor differs)', async () => {
    const { pub, sub, target } = await rig({ replay: true })
    await pub.batch(0, [removed(0)])
    await pub.batch(1, [removed(1)])
    await waitFor(() => target.seqs.length === 2, 'two batches')
    // A new process: its buffer starts over; its first batches never reach the subscriber.
    pub.buffer.clear()
    for (const s of [0, 1, 2]) await pub.batch(s, [removed(100 + s)], { live: false, ts: 5000 + s })
    await pub.batch(3, [removed(103)], { ts: 5003 })
    await waitFor(() => target.seqs.length === 6, 'the new process from 0')
    expect(target.seqs).toEqual([0n, 1n, 0n, 1n, 2n, 3n])
    expect(target.calls.filter((c) => c.kind === 'batch').slice(2).map((c) => c.hashes)).toEqual([[100n], [101n], [102n], [103n]])
    expect(target.calls.filter((c) => c.kind === 'reset').map((c) => c.why)).toEqual(['connect', 'restart'])
    // After the rebuild's requests from 0: from the last applied (the anchor), then from 0.
    expect(pub.replayRequests.slice(-2)).toEqual([1n, 0n])
    expect(pub.replayRequests.slice(0, -2).every((s) => s === 0n)).toBe(true)
    expect(sub.status()).toMatchObject({ restarts: 1, stale: false, lost: 0 })
  })

  it('after a reconnect, checks even a batch that follows on, and finds a new process', async () => {
    const first = await rig({ replay: true })
    const { sub, target } = first
    await first.pub.batch(0, [removed(0)])
    await waitFor(() => target.seqs.length === 1, 'batch 0')
    first.pub.close()
    await waitFor(() => !sub.status().connected, 'the disconnect')
    const next = await TestPublisher.open(true, first.pub)
    open.push(next)
    await waitFor(() => next.subscriptions > 0, 'the resubscription')
    await next.batch(0, [removed(200)], { live: false, ts: 9000 })
    await next.batch(1, [removed(201)], { ts: 9001 }) // seq 1 follows seq 0: only the anchor tells
    await waitFor(() => target.seqs.length === 3, 'the new process')
    expect(target.calls.filter((c) => c.kind === 'batch').map((c) => c.hashes)).toEqual([[0n], [200n], [201n]])
    expect(target.calls.filter((c) => c.kind === 'reset').map((c) => c.why)).toEqual(['connect', 'restart'])
    expect(next.replayRequests).toEqual([0n, 0n])
  })

  it('without a replay endpoint, distrusts the view after a reconnect unless the engine starts from 0', async () => {
    const first = await rig({ resyncMs: 60_000 })
    const { sub, target } = first
    await first.pub.batch(0, [removed(0)])
    await waitFor(() => target.seqs.length === 1, 'batch 0')
    first.pub.close()
    await waitFor(() => !sub.status().connected, 'the disconnect')
    const next = await TestPublisher.open(false, first.pub)
    open.push(next)
    await waitFor(() => next.subscriptions > 0, 'the resubscription')
    await next.batch(1, [removed(1)], { ts: 9001 }) // the same process after a blip, or a new one that got this far
    await waitFor(() => target.seqs.length === 2, 'batch 1')
    expect(target.calls.filter((c) => c.kind === 'reset').map((c) => c.why)).toEqual(['connect', 'gap'])
    expect(sub.status()).toMatchObject({ stale: true, lost: 1 })
  })

  it('drops duplicates', async () => {
    const { pub, sub, target } = await rig()
    await pub.batch(0, [removed(0)])
    await pub.batch(1, [removed(1)])
    await pub.raw(['', seqFrame(1), pub.buffer.get(1)!]) // batch 1 again
    await pub.batch(2, [removed(2)])
    await waitFor(() => target.seqs.length === 3, 'three batches')
    expect(target.seqs).toEqual([0n, 1n, 2n])
    expect(sub.status().duplicates).toBe(1)
  })

  it('counts malformed messages and never stops: 1 frame, 2 frames, a 7-byte seq, garbage, a wrong encoding', async () => {
    const { pub, sub, target } = await rig({ resyncMs: 60_000 })
    await pub.batch(0, [removed(0)])
    await pub.raw(['only-one'])
    await pub.raw(['', Buffer.alloc(8)])
    await pub.raw(['', Buffer.alloc(7), pub.buffer.get(0)!])
    await pub.raw(['', Buffer.alloc(9), pub.buffer.get(0)!])
    await pub.raw(['', Buffer.from('0000000000000001', 'hex'), Buffer.from([0xc1, 0xff, 0x00])]) // garbage as batch 1
    await pub.raw(['', Buffer.from('0000000000000002', 'hex'), Buffer.from(JSON.stringify({ ts: 1, events: [] }))]) // JSON, not msgpack
    await pub.batch(3, [removed(3)])
    await waitFor(() => target.seqs.includes(3n), 'batch 3')
    const st = sub.status()
    expect(st.undecodable).toBe(6)
    expect(target.seqs).toEqual([0n, 3n])
    // Batches 1 and 2 carried events nobody could read: the view cannot be trusted.
    expect(st.stale).toBe(true)
    expect(st.lost).toBe(2)
  })

  it('applies a flood of 20,000 small batches in order, yielding to the event loop every maxBatchesPerTurn', async () => {
    const { pub, target } = await rig({ maxBatchesPerTurn: 64 })
    let ticks = 0
    let ticking = true
    const tick = (): void => {
      ticks++
      if (ticking) setImmediate(tick)
    }
    setImmediate(tick)
    // The longest run of batches applied without one event-loop turn in between.
    let runTick = -1
    let run = 0
    let longest = 0
    const batch = target.batch.bind(target)
    target.batch = (i, b, s) => {
      if (ticks !== runTick) {
        runTick = ticks
        run = 0
      }
      longest = Math.max(longest, ++run)
      batch(i, b, s)
    }
    const N = 20_000
    for (let s = 0; s < N; s++) await pub.batch(s, [removed(s)])
    await waitFor(() => target.seqs.length === N, `${N} batches`, 20_000)
    ticking = false
    const seqs = target.seqs
    expect(seqs.every((s, i) => s === BigInt(i))).toBe(true)
    expect(longest).toBeLessThanOrEqual(64)
  })

  describe('joining a stream mid-way, with a replay endpoint', () => {
    /** A publisher whose buffer already holds `seqs` (sent before anyone subscribed), and a subscriber joining it. */
    async function joining(seqs: number[], o: Partial<KvEventSubscriberOptions> & { mode?: TestPublisher['replayMode'] } = {}): Promise<Rig> {
      const pub = await TestPublisher.open(true)
      open.push(pub)
      if (o.mode !== undefined) pub.replayMode = o.mode
      for (const s of seqs) await pub.batch(s, [removed(s)], { live: false })
      const target = new RecordingTarget()
      const logs: Rig['logs'] = []
      const sub = new KvEventSubscriber({
        instance: 'engine-a',
        endpoint: pub.endpoint,
        replayEndpoint: pub.replayEndpoint!,
        target,
        log: (level, msg, fields) => logs.push({ level, msg, ...(fields !== undefined ? { fields } : {}) }),
        ...o,
      })
      open.push(sub)
      sub.start()
      await waitFor(() => pub.subscriptions > 0, 'the subscription to reach the publisher')
      return { pub, sub, target, logs }
    }
    const kinds = (t: RecordingTarget) => t.calls.map((c) => (c.kind === 'reset' ? `reset ${c.why}` : c.kind === 'stale' ? `stale ${c.stale}` : `${c.kind} ${c.seq}`))

    it('rebuilds the view from the buffer as soon as it connects, with no live batch at all', async () => {
      const { pub, sub, target, logs } = await joining([0, 1, 2, 3, 4])
      await waitFor(() => target.count('rebuilt') === 1, 'the rebuild')
      expect(kinds(target)).toEqual(['reset connect', 'rebuilding 0', 'batch 0', 'batch 1', 'batch 2', 'batch 3', 'batch 4', 'rebuilt 0'])
      expect(pub.replayRequests).toEqual([0n])
      expect(sub.status()).toMatchObject({ seq: 4n, rebuiltFrom: 0n, rebuilds: 1, partialRebuilds: 0, replays: 0, duplicates: 0, stale: false })
      const info = logs.filter((l) => /rebuilt/.test(l.msg))
      expect(info).toHaveLength(1)
      expect(info[0]!.level).toBe('info')
      expect(info[0]!.msg).toMatch(/batches 0\.\.4 .*the whole cache/)
      // Then live, on from there.
      await pub.batch(5, [removed(5)])
      await waitFor(() => target.seqs.includes(5n), 'batch 5')
      expect(target.seqs).toEqual([0n, 1n, 2n, 3n, 4n, 5n])
    })

    it('a buffer that no longer reaches back to 0 gives a subset, reported as rebuilt from its first batch', async () => {
      const { sub, target, logs } = await joining([3, 4, 5, 6])
      await waitFor(() => target.count('rebuilt') === 1, 'the rebuild')
      expect(target.seqs).toEqual([3n, 4n, 5n, 6n])
      expect(target.calls.find((c) => c.kind === 'rebuilt')!.seq).toBe(3n)
      expect(sub.status()).toMatchObject({ rebuiltFrom: 3n, rebuilds: 1, partialRebuilds: 1, lost: 0, stale: false })
      expect(logs.find((l) => /rebuilt/.test(l.msg))!.msg).toMatch(/batches 3\.\.6 .*before batch 3 are unknown/)
    })

    it('holds live batches while the replay is in flight, then applies them once, in order', async () => {
      let open_ = (): void => undefined
      const gate = new Promise<void>((r) => (open_ = r))
      const { pub, sub, target } = await joining([0, 1, 2], { mode: { kind: 'gated', open: gate } })
      await waitFor(() => pub.replayRequests.length === 1, 'the replay request')
      await pub.batch(3, [removed(3)]) // live, and in the buffer the replay will answer from
      await pub.batch(4, [removed(4)])
      await new Promise((r) => setTimeout(r, 20)) // let both arrive and be held
      expect(target.seqs).toEqual([])
      open_()
      await waitFor(() => target.seqs.length === 5, 'the rebuild and the held batches')
      expect(target.seqs).toEqual([0n, 1n, 2n, 3n, 4n])
      expect(sub.status()).toMatchObject({ duplicates: 0, rebuiltFrom: 0n, seq: 4n })
    })

    it('a rebuild that times out follows live as before: the view starts at the first batch seen', async () => {
      const { pub, sub, target } = await joining([0, 1, 2], { mode: { kind: 'silent' }, replayTimeoutMs: 100 })
      await pub.batch(3, [removed(3)])
      await waitFor(() => target.seqs.length === 1, 'batch 3')
      expect(kinds(target)).toEqual(['reset connect', 'batch 3'])
      expect(sub.status()).toMatchObject({ rebuilds: 0, rebuiltFrom: null })
    })

    it('a restart after a rebuild starts over from 0, and the view no longer counts as rebuilt', async () => {
      const { pub, sub, target } = await joining([0, 1])
      await waitFor(() => target.count('rebuilt') === 1, 'the rebuild')
      await pub.batch(0, [removed(100)], { ts: 9000 })
      await waitFor(() => sub.status().restarts === 1, 'the restart')
      expect(sub.status()).toMatchObject({ rebuiltFrom: null, rebuilds: 1, seq: 0n })
    })
  })

  it('rejects bad options with a clear error', () => {
    const target = new RecordingTarget()
    expect(() => new KvEventSubscriber({ instance: 'a', endpoint: 'localhost:5557', target })).toThrow(/endpoint must be tcp:\/\/host:port/)
    expect(() => new KvEventSubscriber({ instance: '', endpoint: 'tcp://127.0.0.1:1', target })).toThrow(/instance/)
    expect(() => new KvEventSubscriber({ instance: 'a', endpoint: 'tcp://127.0.0.1:1', target, resyncMs: -1 })).toThrow(/resyncMs/)
  })

  it('reports connected=false once the publisher goes away', async () => {
    const { pub, sub } = await rig()
    await waitFor(() => sub.status().connected, 'connected')
    pub.close()
    await waitFor(() => !sub.status().connected, 'disconnected')
  })
})
