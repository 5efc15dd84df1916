// The subscriber against what a publisher may put on the wire: both replay framings vLLM has
// used (with and without a topic), floods of bad frames, oversized messages, replays that
// fail or never end, and a publisher that goes away with batches still queued.
import { afterEach, describe, expect, it } from 'vitest'
import { seqFrame } from '../../../src/fleet/events/frames.js'
import type { KvEventSubscriber, KvEventSubscriberOptions } from '../../../src/fleet/events/subscriber.js'
import { type RecordingTarget, removed, subscribeTo, TestPublisher, waitFor, type SubscriberLog } from './helpers.js'

const open: { close(): unknown }[] = []
afterEach(async () => {
  for (const o of open.splice(0)) await o.close()
})

type Log = SubscriberLog

interface Rig {
  pub: TestPublisher
  sub: KvEventSubscriber
  target: RecordingTarget
  logs: Log[]
}

type RigOptions = Partial<KvEventSubscriberOptions> & {
  replay?: boolean
  framing?: 'topic' | 'legacy'
  pubTopic?: string
  /** Batches in the publisher's buffer before the subscriber joins (not sent live). */
  before?: number[]
}

async function rig(o: RigOptions = {}): Promise<Rig> {
  const pub = await TestPublisher.open(o.replay ?? false)
  open.push(pub)
  pub.replayFraming = o.framing ?? 'topic'
  pub.topic = o.pubTopic ?? ''
  for (const s of o.before ?? []) await pub.batch(s, [removed(s)], { live: false })
  const { replay: _r, framing: _f, pubTopic: _t, before: _b, ...opts } = o
  return { pub, ...(await subscribeTo(pub, opts, open)) }
}

const warns = (logs: Log[], re: RegExp): Log[] => logs.filter((l) => l.level === 'warn' && re.test(l.msg))

describe('replay framings', () => {
  for (const framing of ['topic', 'legacy'] as const) {
    for (const topic of ['', 'kv@engine-a']) {
      const name = `${framing === 'topic' ? 'vLLM >= 0.26.0 (topic frame)' : 'older vLLM (no topic frame)'}, topic ${JSON.stringify(topic)}`

      it(`${name}: fills a gap from the replay, in order, without a loss`, async () => {
        const { pub, sub, target, logs } = await rig({ replay: true, framing, pubTopic: topic, topic })
        await pub.batch(0, [removed(0)])
        await waitFor(() => target.seqs.length === 1, 'batch 0')
        await pub.batch(1, [removed(1)], { live: false })
        await pub.batch(2, [removed(2)], { live: false })
        await pub.batch(3, [removed(3)])
        await waitFor(() => target.seqs.length === 4, 'batches 0-3')
        expect(target.seqs).toEqual([0n, 1n, 2n, 3n])
        expect(target.calls.filter((c) => c.kind === 'batch').map((c) => c.hashes)).toEqual([[0n], [1n], [2n], [3n]])
        expect(sub.status()).toMatchObject({ gaps: 1, replays: 1, lost: 0, undecodable: 0, replayFailures: 0, stale: false })
        expect(warns(logs, /dropped|failed/)).toEqual([])
      })

      it(`${name}: rebuilds a late joiner's view from the replay buffer`, async () => {
        const { pub, sub, target } = await rig({ replay: true, framing, pubTopic: topic, topic, before: [0, 1, 2, 3] })
        await waitFor(() => target.count('rebuilt') === 1, 'the rebuild')
        expect(target.seqs).toEqual([0n, 1n, 2n, 3n])
        expect(sub.status()).toMatchObject({ rebuiltFrom: 0n, rebuilds: 1, undecodable: 0, stale: false })
        await pub.batch(4, [removed(4)])
        await waitFor(() => target.seqs.includes(4n), 'batch 4 live')
        expect(sub.status()).toMatchObject({ seq: 4n, lost: 0, duplicates: 0 })
      })
    }
  }
})

describe('bad frames', () => {
  it('counts every bad frame but logs the first, then one summary per interval', async () => {
    const { pub, sub, target, logs } = await rig({ resyncMs: 60_000, logIntervalMs: 200 })
    await pub.batch(0, [removed(0)])
    await waitFor(() => target.seqs.length === 1, 'batch 0')
    const N = 2000
    for (let i = 0; i < N; i++) await pub.raw(['', Buffer.alloc(5), Buffer.from([0xc1])])
    await waitFor(() => sub.status().undecodable === N, `${N} bad frames counted`)
    const bad = warns(logs, /dropped a sequence frame of 5 bytes/)
    expect(bad).toHaveLength(1) // the first one only, so far
    await waitFor(() => warns(logs, /more like that/).length === 1, 'the summary line')
    const summary = warns(logs, /more like that/)[0]!
    expect(summary.msg).toMatch(new RegExp(`engine-a \\(tcp://127\\.0\\.0\\.1:\\d+\\): ${N - 1} more like that`))
    expect(summary.msg).toMatch(/the last: .*sequence frame of 5 bytes/)
    expect(summary.fields).toMatchObject({ suppressed: N - 1 })
  })

  it('wild sequence numbers are counted as gaps and restarts, with a bounded number of log lines', async () => {
    const { pub, sub, target, logs } = await rig({ resyncMs: 60_000, logIntervalMs: 60_000 })
    await pub.batch(5000, [removed(0)])
    await waitFor(() => target.seqs.length === 1, 'the first batch')
    const N = 1000
    // Up and down by more than the restart distance each time: a gap, then a "restart".
    for (let i = 1; i <= N; i++) await pub.batch(i % 2 === 1 ? 100_000 + i * 5000 : 1, [removed(i)])
    await waitFor(() => target.seqs.length === N + 1, `${N} more batches`)
    const st = sub.status()
    expect(st.gaps + st.restarts).toBeGreaterThanOrEqual(N)
    expect(logs.length).toBeLessThan(10)
  })

  it('names a negative sequence number as such', async () => {
    const { pub, sub, logs } = await rig()
    await pub.raw(['', seqFrame(-5), Buffer.from([0x90])])
    await waitFor(() => sub.status().undecodable === 1, 'the bad frame')
    expect(warns(logs, /dropped/)[0]!.msg).toMatch(/negative sequence number -5/)
  })
})

describe('bounds', () => {
  it('refuses a message over maxMessageBytes unread, counts it, logs it once naming the source, and reconnects', async () => {
    const { pub, sub, target, logs } = await rig({ maxMessageBytes: 64 * 1024, resyncMs: 60_000 })
    await pub.batch(0, [removed(0)])
    await waitFor(() => target.seqs.length === 1, 'batch 0')
    const big = Array.from({ length: 20_000 }, (_, i) => 2 ** 40 + i) // 9 bytes each: ~180 KB
    await pub.batch(1, [removed(...big)])
    await waitFor(() => sub.status().oversized === 1, 'the oversized message')
    const lines = warns(logs, /over the 0\.1 MiB cap/)
    expect(lines).toHaveLength(1)
    expect(lines[0]!.msg).toContain(pub.endpoint)
    // Connected again: later batches flow (batch 1 is lost: a gap, without a replay endpoint).
    await waitFor(() => pub.subscriptions > 1, 'the resubscription')
    await pub.batch(2, [removed(2)])
    await waitFor(() => target.seqs.includes(2n), 'batch 2 after the reconnect')
    expect(target.calls.filter((c) => c.kind === 'batch').some((c) => c.hashes!.length > 1)).toBe(false)
    expect(sub.status()).toMatchObject({ lost: 1, stale: true })
  })

  it('applies a batch of many blocks in pieces, a turn of the event loop each', async () => {
    const { pub, sub, target } = await rig()
    let ticks = 0
    let ticking = true
    const tick = (): void => {
      ticks++
      if (ticking) setImmediate(tick)
    }
    setImmediate(tick)
    const at: number[] = []
    const batch = target.batch.bind(target)
    target.batch = (i, b, s) => {
      at.push(ticks)
      batch(i, b, s)
    }
    const N = 40_000
    await pub.batch(0, [removed(...Array.from({ length: N }, (_, i) => i))])
    await waitFor(() => target.calls.filter((c) => c.kind === 'batch').flatMap((c) => c.hashes!).length === N, 'every hash')
    ticking = false
    const calls = target.calls.filter((c) => c.kind === 'batch')
    expect(calls.length).toBeGreaterThanOrEqual(3)
    expect(calls.every((c) => c.seq === 0n)).toBe(true)
    expect(calls.flatMap((c) => c.hashes)).toEqual(Array.from({ length: N }, (_, i) => BigInt(i)))
    expect(new Set(at).size).toBe(at.length) // no two pieces in one turn
    expect(sub.status()).toMatchObject({ batches: 1, events: 1 })
  })

  it('a replay that fails declares its whole gap lost, and the endpoint is not asked again during the backoff', async () => {
    const { pub, sub, target, logs } = await rig({ replay: true, replayTimeoutMs: 100, replayBackoffMs: 60_000, resyncMs: 60_000 })
    await pub.batch(0, [removed(0)])
    await waitFor(() => target.seqs.length === 1, 'batch 0')
    pub.replayMode = { kind: 'silent' }
    const asked = pub.replayRequests.length
    await pub.batch(5, [removed(5)]) // gap 1..4: the replay times out
    await waitFor(() => target.seqs.includes(5n), 'batch 5')
    await pub.batch(9, [removed(9)]) // gap 6..8: lost at once, no replay asked
    await pub.batch(12, [removed(12)]) // and 10..11
    await waitFor(() => target.seqs.includes(12n), 'batch 12')
    expect(pub.replayRequests.length).toBe(asked + 1)
    expect(target.seqs).toEqual([0n, 5n, 9n, 12n])
    expect(sub.status()).toMatchObject({ gaps: 3, lost: 3, replayFailures: 1, replays: 0, stale: true })
    const lost = warns(logs, /lost batches/)
    expect(lost[0]!.msg).toMatch(/1\.\.4 \(the replay failed: no end of replay within 100 ms; the replay endpoint is not asked again for 60000 ms\)/)
  })

  it('keeps at most maxReplayBatches answers of a replay that never ends, and fails it', async () => {
    const { pub, sub, target, logs } = await rig({ replay: true, maxReplayBatches: 500, replayTimeoutMs: 60_000, resyncMs: 60_000 })
    await pub.batch(0, [removed(0)])
    await waitFor(() => target.seqs.length === 1, 'batch 0')
    pub.replayMode = { kind: 'flood', count: 5000 }
    await pub.batch(3, [removed(3)])
    await waitFor(() => target.seqs.includes(3n), 'batch 3')
    expect(sub.status()).toMatchObject({ replayFailures: 1, lost: 1 })
    expect(warns(logs, /replay from 0 failed: more than 500 batches/)).toHaveLength(1)
  })

  it('a publisher that goes away with batches still queued is not reported as having lost them', async () => {
    const { pub, sub, target, logs } = await rig({ maxBatchesPerTurn: 16, resyncMs: 60_000 })
    const N = 5000
    let appliedAfterDisconnect = 0
    const batch = target.batch.bind(target)
    target.batch = (i, b, s) => {
      if (!sub.status().connected) appliedAfterDisconnect++
      // A consumer slower than loopback, so that batches are still queued when the publisher goes.
      const until = performance.now() + 0.1
      while (performance.now() < until);
      batch(i, b, s)
    }
    for (let s = 0; s < N; s++) await pub.batch(s, [removed(s)])
    pub.pub.linger = 60_000 // every batch still goes out; then the connection closes
    pub.close()
    await waitFor(() => target.seqs.length === N, `all ${N} batches`, 20_000)
    // The point of the test: some batches were still queued when the disconnect was seen.
    expect(appliedAfterDisconnect).toBeGreaterThan(0)
    expect(sub.status()).toMatchObject({ lost: 0, stale: false, seq: BigInt(N - 1) })
    expect(warns(logs, /lost/)).toEqual([])
  })
})
