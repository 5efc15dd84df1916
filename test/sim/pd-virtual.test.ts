// Prefill/decode disaggregation in virtual time: the engine's holds and pulls, through the
// virtual fleet's submitPrefill / submitDecode / submitBootstrap.
import { describe, expect, it } from 'vitest'
import { transferMs } from '../../src/sim/kv-transfer.js'
import { VirtualFleet, type PdResult, type PrefillHandle, type VirtualResult } from '../../src/sim/virtual-fleet.js'

const PROMPT = 'The quick brown fox jumps over the lazy dog. '.repeat(180) // ~2,000 tokens of 4 bytes

/** Prefill on instance 0, then (from its answer) decode on instance 1. */
function disaggregated(vf: VirtualFleet, text = PROMPT, maxTokens = 8): { handle: PrefillHandle; result: () => PdResult } {
  let out: PdResult | undefined
  const handle = vf.submitPrefill(0, { text }, {
    onDone: (h, at) => vf.submitDecode(1, { text, maxTokens }, h, { at, onFinish: (r) => (out = r) }),
  })
  return {
    handle,
    result: () => {
      if (out === undefined) throw new Error('the decode leg did not finish')
      return out
    },
  }
}

describe('prefill/decode in virtual time', () => {
  it('a prefill leg holds its blocks (counted as used) and answers vLLM-shaped kv_transfer_params', () => {
    const vf = new VirtualFleet({ instances: 2, profile: 'tiny' })
    let params: unknown
    let usedAtDone = -1
    const h = vf.submitPrefill(0, { text: PROMPT }, {
      onDone: (handle) => {
        params = handle.kvTransferParams
        usedAtDone = vf.engines[0]!.cache.usedBlocks
      },
    })
    vf.run(1000)
    const e = vf.engines[0]!
    const blocks = Math.ceil(h.hold!.tokens / 16)
    expect(h.state).toBe('held')
    expect(params).toEqual({
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_block_ids: [h.hold!.blockIds],
      remote_engine_id: e.kvEngineId,
      remote_request_id: h.requestId,
      remote_host: 'virtual',
      remote_port: 0,
      tp_size: 1,
      remote_num_tokens: h.hold!.tokens,
      remote_blocks_expiry_time: null,
    })
    expect(h.hold!.blockIds).toHaveLength(blocks)
    expect(usedAtDone).toBe(blocks)
    expect(e.holds.blocks).toBe(blocks)
    expect(e.cache.usage).toBeCloseTo(blocks / e.cache.capacity, 10)
  })

  it('the decode leg pulls the KV after the transfer time, computes only the last prompt token, and frees the prefill’s blocks', () => {
    const vf = new VirtualFleet({ instances: 2, profile: 'tiny' })
    const { handle, result } = disaggregated(vf)
    vf.run()
    const r = result()
    const [p, d] = vf.engines as [typeof vf.engines[0], typeof vf.engines[0]]
    expect(r.legs).toBe('pd')
    expect(r.finishReason).toBe('length')
    expect(r.outputTokens).toBe(8)
    expect(r.cachedTokens).toBe(r.promptTokens)
    expect(r.pulledTokens).toBe(r.promptTokens)
    expect(r.transferMs).toBeCloseTo(transferMs(d.config.kv, r.promptTokens), 9)
    expect(d.stats.computedTokens).toBe(1)
    expect(d.stats.kvTransfers).toBe(1)
    expect(d.stats.externalTokens).toBe(r.promptTokens)
    expect(p.stats.computedTokens).toBe(r.promptTokens)
    // Read: the prefill's blocks are unpinned but stay cached.
    expect(handle.state).toBe('read')
    expect(p.holds.size).toBe(0)
    expect(p.cache.usedBlocks).toBe(0)
    expect(p.cache.cachedBlocks).toBe(Math.floor(r.promptTokens / 16))
    // The decode cached what it received (all full blocks but a block-aligned last one).
    expect(d.cache.cachedBlocks).toBe(Math.floor(r.promptTokens / 16))
    // TTFT counts from the prefill leg's arrival: prefill, transfer, then one decode step.
    expect(r.ttftMs).toBeGreaterThan(r.transferMs)
    expect(r.arrivalMs).toBe(handle.arrivalMs)
  })

  it('local cache hits on the decode instance shrink the pull', () => {
    const vf = new VirtualFleet({ instances: 2, profile: 'tiny' })
    vf.submit(1, { text: PROMPT.slice(0, 4000), maxTokens: 1 })
    vf.run()
    const { result } = disaggregated(vf)
    vf.run()
    const r = result()
    expect(r.localHitTokens).toBe(Math.floor(1000 / 16) * 16)
    expect(r.pulledTokens).toBe(r.promptTokens - r.localHitTokens)
    expect(r.cachedTokens).toBe(r.promptTokens)
  })

  it('held blocks expire after kvLeaseMs with no decode; the late decode then fails, or recomputes', () => {
    for (const policy of ['fail', 'recompute'] as const) {
      const vf = new VirtualFleet({ instances: 2, profile: 'tiny', kvLeaseMs: 500, kvLoadFailurePolicy: policy })
      let h: PrefillHandle | undefined
      let released = ''
      vf.submitPrefill(0, { text: PROMPT }, { onDone: (x) => (h = x), onReleased: (_x, how) => (released = how) })
      vf.run()
      const p = vf.engines[0]!
      expect(h!.state).toBe('expired')
      expect(released).toBe('expired')
      expect(p.stats.kvHoldsExpired).toBe(1)
      expect(p.cache.usedBlocks).toBe(0)
      expect(vf.now - h!.doneAt).toBe(500)
      let r: PdResult | undefined
      vf.submitDecode(1, { text: PROMPT, maxTokens: 4 }, h!, { onFinish: (x) => (r = x) })
      vf.run()
      const d = vf.engines[1]!
      expect(d.stats.kvTransferFailures).toBe(1)
      if (policy === 'fail') {
        expect(r!.finishReason).toBe('error')
        expect(r!.error).toMatch(/no KV blocks are held/)
        expect(r!.outputTokens).toBe(0)
        expect(d.stats.success.error).toBe(1)
        expect(d.cache.usedBlocks).toBe(0)
      } else {
        expect(r!.legs).toBe('recomputed')
        expect(r!.finishReason).toBe('length')
        expect(r!.outputTokens).toBe(4)
        expect(d.stats.computedTokens).toBe(r!.promptTokens)
      }
    }
  })

  it('a decode leg keeps the blocks alive while it waits in the queue, past the lease', () => {
    // One sequence slot on the decode instance, busy for long: the decode leg waits there.
    const vf = new VirtualFleet({ instances: 2, profile: 'tiny', kvLeaseMs: 50, maxNumSeqs: 1 })
    vf.submit(1, { text: 'busy', maxTokens: 200 }) // ~400 ms of decoding
    const { handle, result } = disaggregated(vf)
    vf.run()
    expect(result().legs).toBe('pd')
    expect(result().decodeArrivalMs + 100).toBeLessThan(result().firstTokenMs - result().transferMs)
    expect(handle.state).toBe('read')
  })

  it('a second pull of the same prefill is refused', () => {
    const vf = new VirtualFleet({ instances: 3, profile: 'tiny' })
    const results: PdResult[] = []
    vf.submitPrefill(0, { text: PROMPT }, {
      onDone: (h, at) => {
        vf.submitDecode(1, { text: PROMPT, maxTokens: 2 }, h, { at, onFinish: (r) => results.push(r) })
        vf.submitDecode(2, { text: PROMPT, maxTokens: 2 }, h, { at, onFinish: (r) => results.push(r) })
      },
    })
    vf.run()
    expect(results.map((r) => r.legs + ':' + r.finishReason).sort()).toEqual(['local:error', 'pd:length'])
    expect(results.find((r) => r.finishReason === 'error')!.error).toMatch(/already being read/)
  })

  it('parameters vLLM cannot use make the decode prefill locally, counted', () => {
    const vf = new VirtualFleet({ instances: 2, profile: 'tiny' })
    let r: PdResult | undefined
    vf.submitDecode(1, { text: PROMPT, maxTokens: 2 }, { do_remote_prefill: true, remote_block_ids: [[1, 2]], remote_engine_id: 'x' } as never, {
      onFinish: (x) => (r = x),
    })
    vf.run()
    expect(r!.legs).toBe('local')
    expect(r!.finishReason).toBe('length')
    expect(vf.engines[1]!.stats.kvInvalidParams).toBe(1)
    expect(vf.engines[1]!.stats.computedTokens).toBe(r!.promptTokens)
  })

  it('kv_transfer_params from a prefill handle work as well as the handle', () => {
    const vf = new VirtualFleet({ instances: 2, profile: 'tiny' })
    let r: PdResult | undefined
    vf.submitPrefill(0, { text: PROMPT }, {
      onDone: (h, at) => vf.submitDecode(1, { text: PROMPT, maxTokens: 2 }, h.kvTransferParams!, { at, onFinish: (x) => (r = x) }),
    })
    vf.run()
    expect(r!.legs).toBe('pd')
    expect(r!.prefillInstance).toBe(0)
  })

  it('refuses a decode leg submitted before its prefill answered', () => {
    const vf = new VirtualFleet({ instances: 2, profile: 'tiny' })
    const h = vf.submitPrefill(0, { text: PROMPT })
    expect(() => vf.submitDecode(1, { text: PROMPT }, h)).toThrow(/has not answered yet/)
  })

  it('SGLang’s both-at-once flow: the decode waits in its room for the prefill, then pulls', () => {
    const vf = new VirtualFleet({ instances: 2, profile: 'tiny' })
    let r: PdResult | undefined
    let prefillDone = -1
    vf.submitBootstrap(0, 1, { text: PROMPT, maxTokens: 4 }, { at: 10, onPrefillDone: (t) => (prefillDone = t), onFinish: (x) => (r = x) })
    vf.run()
    expect(r!.legs).toBe('pd')
    expect(r!.arrivalMs).toBe(10)
    expect(r!.prefillDoneMs).toBe(prefillDone)
    expect(r!.firstTokenMs).toBeGreaterThan(prefillDone + r!.transferMs)
    expect(vf.engines[0]!.holds.size).toBe(0)
    expect(vf.engines[1]!.stats.computedTokens).toBe(1)
  })

  it('reports TPOT: (finish - first token) / (output tokens - 1), -1 for a single token', () => {
    const vf = new VirtualFleet({ instances: 1, profile: 'tiny' })
    const out: VirtualResult[] = []
    vf.submit(0, { text: PROMPT, maxTokens: 10 }, { onFinish: (r) => out.push(r) })
    vf.submit(0, { text: 'one', maxTokens: 1 }, { at: 1000, onFinish: (r) => out.push(r) })
    vf.run()
    expect(out[0]!.tpotMs).toBeCloseTo((out[0]!.finishedMs - out[0]!.firstTokenMs) / 9, 12)
    expect(out[0]!.tpotMs).toBeGreaterThan(0)
    expect(out[1]!.tpotMs).toBe(-1)
  })
})

describe('the interference disaggregation removes', () => {
  // One long-running decode; a 30,000-token prompt arrives while it decodes. Aggregated, that
  // prompt is prefilled on the same engine, in steps the decode shares; disaggregated, it is
  // prefilled on another engine and only its last token joins the decode engine's batch.
  function decodeGaps(mode: 'aggregated' | 'disaggregated'): { tpot: number; maxGap: number } {
    const vf = new VirtualFleet({ instances: 2, profile: 'llama-3.1-70b-p5' })
    const times: number[] = []
    const chat = vf.prepare({ text: 'a conversation that goes on. '.repeat(100) })
    vf.engines[1]!.submit(
      { promptTokens: chat.promptTokens, blockKeys: chat.blockKeys, maxTokens: 60 },
      { onTokens: (_s, _n, at) => times.push(at) },
    )
    const doc = { text: 'a long document to summarize. '.repeat(4000) }
    if (mode === 'aggregated') vf.submit(1, { ...doc, maxTokens: 2 }, { at: 200 })
    else vf.submitPrefill(0, doc, { at: 200, onDone: (h, at) => vf.submitDecode(1, { ...doc, maxTokens: 2 }, h, { at }) })
    vf.run()
    expect(times).toHaveLength(60)
    const gaps = times.slice(1).map((t, i) => t - times[i]!)
    return { tpot: (times[59]! - times[0]!) / 59, maxGap: Math.max(...gaps) }
  }

  it('decode steps pay for a prefill batched with them in an aggregated engine, not in a decode-only one', () => {
    const agg = decodeGaps('aggregated')
    const pd = decodeGaps('disaggregated')
    // Aggregated: four ~8k-token chunks ride in the decode's steps (~245 ms each).
    expect(agg.maxGap).toBeGreaterThan(200)
    // Decode-only: every step is a decode step (~22-23 ms), the newcomer's one token included.
    expect(pd.maxGap).toBeLessThan(30)
    expect(agg.tpot).toBeGreaterThan(1.5 * pd.tpot)
  })
})
