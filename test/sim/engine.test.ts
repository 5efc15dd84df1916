// The model itself, in virtual time: exact and fast, so these tests can assert numbers.
import { describe, expect, it } from 'vitest'
import { LLAMA_3_1_70B_P5, TINY, VirtualFleet, type VirtualResult } from '../../src/sim/index.js'
import { promptOf } from './helpers.js'

function runAll(fleet: VirtualFleet, reqs: { text: string; maxTokens: number; at?: number; instance?: number }[]): VirtualResult[] {
  const out: VirtualResult[] = []
  reqs.forEach((r, i) =>
    fleet.submit(r.instance ?? 0, { text: r.text, maxTokens: r.maxTokens }, { at: r.at ?? 0, onFinish: (x) => (out[i] = x) }),
  )
  fleet.run()
  return out
}

describe('llama-3.1-70b-p5 calibration (SageMaker, Llama 3.1 70B on ml.p5.48xlarge)', () => {
  it('an 8,000-token prompt has TTFT ~280 ms uncached and ~63 ms fully cached', () => {
    const fleet = new VirtualFleet({ instances: 1 })
    const text = promptOf(8000, 'calibration')
    const [cold] = runAll(fleet, [{ text, maxTokens: 1 }])
    const [warm] = runAll(fleet, [{ text, maxTokens: 1, at: fleet.now + 1000 }])
    expect(cold!.cachedTokens).toBe(0)
    expect(warm!.cachedTokens).toBe(7984) // the last block is recomputed for logits, as in vLLM
    for (const point of LLAMA_3_1_70B_P5.calibration) {
      const got = point.cachedTokens === 0 ? cold!.ttftMs : warm!.ttftMs
      expect(Math.abs(got - point.ttftMs) / point.ttftMs).toBeLessThan(0.03)
    }
  })

  it('decodes at 20-30 ms per token (median gap) for one sequence and for a batch of 64', () => {
    for (const n of [1, 64]) {
      const fleet = new VirtualFleet({ instances: 1 })
      const e = fleet.engines[0]!
      const gaps: number[] = []
      for (let i = 0; i < n; i++) {
        let last = -1
        e.submit(
          { ...fleet.prepare({ text: promptOf(500, `itl${i}`) }), maxTokens: 50 },
          {
            onTokens: (_s, _n, at) => {
              if (last >= 0) gaps.push(at - last)
              last = at
            },
          },
        )
      }
      fleet.run()
      expect(gaps.length).toBe(n * 49)
      gaps.sort((a, b) => a - b)
      const median = gaps[gaps.length >> 1]!
      expect(median).toBeGreaterThanOrEqual(20)
      expect(median).toBeLessThanOrEqual(30)
    }
  })
})

describe('continuous batching', () => {
  it('32 concurrent uncached requests take longer per request than one alone', () => {
    const alone = runAll(new VirtualFleet({ instances: 1, profile: 'tiny' }), [{ text: promptOf(2000, 'solo'), maxTokens: 16 }])[0]!
    const many = runAll(
      new VirtualFleet({ instances: 1, profile: 'tiny' }),
      Array.from({ length: 32 }, (_, i) => ({ text: promptOf(2000, `many${i}`), maxTokens: 16 })),
    )
    const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length
    expect(mean(many.map((r) => r.e2eMs))).toBeGreaterThan(2 * alone.e2eMs)
    expect(mean(many.map((r) => r.ttftMs))).toBeGreaterThan(2 * alone.ttftMs)
    // ...but far less than 32 times longer: the batch shares steps.
    expect(Math.max(...many.map((r) => r.e2eMs))).toBeLessThan(32 * alone.e2eMs)
  })

  it('prefills a prompt longer than the step budget in chunks', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', maxNumBatchedTokens: 1000 })
    const [r] = runAll(fleet, [{ text: promptOf(2500, 'chunked'), maxTokens: 1 }])
    const lat = fleet.sim.engine.latency
    // three steps: 1000 + 1000 + 500 tokens
    expect(r!.ttftMs).toBeCloseTo(lat.idleTtftMs(2500, 0, 1000), 6)
    expect(fleet.engines[0]!.stats.steps).toBe(3)
  })

  it('runs decodes first: a long prefill arriving later stretches a step, it does not stall decoding', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', maxNumBatchedTokens: 512 })
    const res = runAll(fleet, [
      { text: promptOf(100, 'decoder'), maxTokens: 40 },
      { text: promptOf(8000, 'big'), maxTokens: 1, at: 10 },
    ])
    const lat = fleet.sim.engine.latency
    const worstStep = lat.stepMs(511, 1, 8000 + 140)
    // every decode step ran: ~40 steps, none waited for the whole 8,000-token prefill
    expect(res[0]!.e2eMs - res[0]!.ttftMs).toBeLessThan(39 * worstStep + 1e-6)
    expect(res[1]!.ttftMs).toBeGreaterThan(lat.idleTtftMs(8000, 0, 512))
  })

  it('respects max_num_seqs', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', maxNumSeqs: 4 })
    let maxRunning = 0
    const e = fleet.engines[0]!
    Array.from({ length: 12 }, (_, i) =>
      fleet.submit(0, { text: promptOf(64, `seqs${i}`), maxTokens: 5 }, { onFinish: () => (maxRunning = Math.max(maxRunning, e.numRunning + 1)) }),
    )
    while (fleet.clock.pending > 0) {
      fleet.clock.run(1)
      maxRunning = Math.max(maxRunning, e.numRunning)
      expect(e.numRunning).toBeLessThanOrEqual(4)
    }
    expect(maxRunning).toBe(4)
  })
})

describe('KV capacity', () => {
  it('preempts when decode runs out of blocks, and every request still completes with its full output', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', kvBlocks: 64, maxModelLen: 1024 })
    const res = runAll(
      fleet,
      Array.from({ length: 6 }, (_, i) => ({ text: promptOf(100, `pre${i}`), maxTokens: 150 })),
    )
    const e = fleet.engines[0]!
    expect(e.stats.preemptions).toBeGreaterThan(0)
    expect(res.map((r) => r.outputTokens)).toEqual(Array(6).fill(150))
    expect(res.some((r) => r.preemptions > 0)).toBe(true)
    expect(e.cache.usage).toBe(0)
    expect(e.numRunning + e.numWaiting).toBe(0)
  })

  it('rejects a request that could never fit', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', kvBlocks: 16 })
    expect(() => fleet.submit(0, { text: promptOf(300, 'huge'), maxTokens: 1 })).toThrow(/maximum context length is 256/)
  })

  it('an aborted sequence leaves the batch at once and unpins its blocks', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny' })
    const e = fleet.engines[0]!
    const seq = e.submit({ ...fleet.prepare({ text: promptOf(1000, 'abort') }), maxTokens: 1000 })
    fleet.run(100)
    expect(e.numRunning).toBe(1)
    expect(e.cache.usage).toBeGreaterThan(0)
    e.abort(seq)
    expect(e.numRunning).toBe(0)
    expect(e.cache.usage).toBe(0)
    expect(e.stats.success.abort).toBe(1)
    fleet.run()
    expect(seq.generated).toBeLessThan(1000)
  })
})

describe('prefix cache keys', () => {
  it('separates LoRA adapters and cache_salt values, and shares identical prompts', () => {
    const fleet = new VirtualFleet({ instances: 1, profile: 'tiny', loras: ['sql=/adapters/sql'] })
    const text = promptOf(640, 'keys')
    const base = fleet.prepare({ text })
    expect(fleet.prepare({ text }).blockKeys).toEqual(base.blockKeys)
    expect(base.blockKeys.length).toBe(40)
    expect(fleet.prepare({ text, model: 'sql' }).blockKeys[0]).not.toBe(base.blockKeys[0])
    expect(fleet.prepare({ text, cacheSalt: 'tenant-a' }).blockKeys[0]).not.toBe(base.blockKeys[0])
    const r: VirtualResult[] = []
    fleet.submit(0, { prepared: base, maxTokens: 1 }, { onFinish: (x) => r.push(x) })
    fleet.run()
    fleet.submit(0, { text, model: 'sql', maxTokens: 1 }, { onFinish: (x) => r.push(x) })
    fleet.submit(0, { text, maxTokens: 1 }, { at: fleet.now + 100, onFinish: (x) => r.push(x) })
    fleet.run()
    expect(r.map((x) => x.cachedTokens)).toEqual([0, 0, 624])
  })

  it('is deterministic: the same workload gives the same results', () => {
    const once = (): VirtualResult[] => {
      const fleet = new VirtualFleet({ instances: 2, profile: TINY })
      const res: VirtualResult[] = []
      for (let i = 0; i < 200; i++) {
        fleet.submit(i % 2, { text: promptOf(300 + (i % 7) * 50, `det${i % 13}`), maxTokens: 1 + (i % 9) }, {
          at: i * 3.7,
          onFinish: (r) => res.push(r),
        })
      }
      fleet.run()
      return res
    }
    expect(once()).toEqual(once())
  })
})
