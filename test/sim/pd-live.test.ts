// Prefill/decode disaggregation between live workers on loopback: vLLM's NixlConnector flow
// (prefill leg answers kv_transfer_params, the decode leg reads over the prefill's side
// channel) and SGLang's bootstrap flow (both legs at once), as a router drives them.
import { describe, expect, it } from 'vitest'
import { readEngineGauges } from '../../src/fleet/load/gauges.js'
import type { SimFleet } from '../../src/sim/index.js'
import { waitFor } from '../fleet/events/helpers.js'
import { fleet, get, metric, parsePrometheus, post, promptOf, stream } from './helpers.js'

const PROMPT_TOKENS = 600
const content = (tag: string): string => promptOf(PROMPT_TOKENS, tag)
const chat = (tag: string, extra: object = {}): Record<string, unknown> => ({ messages: [{ role: 'user', content: content(tag) }], max_tokens: 8, ...extra })
/** The prefill leg as vLLM's proxy sends it. */
const prefillLeg = (body: Record<string, unknown>): Record<string, unknown> => ({
  ...body,
  stream: false,
  max_tokens: 1,
  min_tokens: 1,
  kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null },
})

async function state(f: SimFleet, i: number): Promise<any> {
  return JSON.parse((await get(f.urls[i]!, '/sim/state')).text)
}

async function pdPair(p: object = {}, d: object = {}): Promise<{ pf: SimFleet; df: SimFleet }> {
  const pf = await fleet({ instances: 2, role: 'prefill', bootstrapPort: 0, ...p })
  const df = await fleet({ instances: 2, role: 'decode', ...d })
  return { pf, df }
}

describe('vLLM NixlConnector flow between live workers', () => {
  it('the prefill answers kv_transfer_params and holds the blocks; the decode pulls them over the side channel', async () => {
    const { pf, df } = await pdPair()
    const body = chat('nixl')
    const p = await post(pf.urls[1]!, '/v1/chat/completions', prefillLeg(body))
    expect(p.status).toBe(200)
    expect(p.headers.get('x-sim-instance')).toBe('prefill-1')
    expect(p.body.choices[0].finish_reason).toBe('length')
    const params = p.body.kv_transfer_params
    const ps = await state(pf, 1)
    expect(params).toEqual({
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_block_ids: [expect.any(Array)],
      remote_engine_id: ps.kv_transfer.engine_id,
      remote_request_id: p.body.id,
      remote_host: '127.0.0.1',
      remote_port: pf.sideChannelPorts![1],
      tp_size: 1,
      remote_num_tokens: p.body.usage.prompt_tokens,
      remote_blocks_expiry_time: null,
    })
    const blocks = Math.ceil(p.body.usage.prompt_tokens / 16)
    expect(params.remote_block_ids[0]).toHaveLength(blocks)
    expect(ps.kv_transfer.held_requests).toBe(1)
    expect(ps.kv_transfer.held_blocks).toBe(blocks)
    expect(ps.kv_blocks_used).toBe(blocks) // held blocks count as used

    const d = await post(df.urls[0]!, '/v1/chat/completions', { ...body, kv_transfer_params: params })
    expect(d.status).toBe(200)
    expect(d.headers.get('x-sim-instance')).toBe('decode-0')
    expect(d.body.kv_transfer_params).toBeNull()
    expect(d.body.usage.completion_tokens).toBe(8)
    expect(d.body.usage.prompt_tokens_details.cached_tokens).toBe(d.body.usage.prompt_tokens)
    const ds = await state(df, 0)
    expect(ds.prompt_tokens_computed).toBe(1) // the prompt was not computed there
    expect(ds.kv_transfer.transfers).toBe(1)
    expect(ds.kv_transfer.transfer_tokens).toBe(d.body.usage.prompt_tokens)
    expect(ds.kv_blocks_cached).toBe(Math.floor(d.body.usage.prompt_tokens / 16))
    const after = await state(pf, 1)
    expect(after.kv_transfer.held_requests).toBe(0)
    expect(after.kv_transfer.holds_read).toBe(1)
    expect(after.kv_transfer.side_channel_pulls).toBe(1)
    expect(after.kv_blocks_used).toBe(0)
    expect(after.kv_blocks_cached).toBe(Math.floor(p.body.usage.prompt_tokens / 16)) // freed, still cached

    // The same parameters again: the blocks are gone, the pull is refused (policy fail: 500).
    const again = await post(df.urls[1]!, '/v1/chat/completions', { ...body, kv_transfer_params: params })
    expect(again.status).toBe(500)
    expect(again.body.error.type).toBe('InternalServerError')
    expect(again.body.error.code).toBe(500)
    expect(again.body.error.message).toMatch(/Internal server error: KV transfer failed: .*no KV blocks are held/)
    expect((await state(pf, 1)).kv_transfer.side_channel_refused).toBe(1)
    const m = parsePrometheus((await get(df.urls[1]!, '/metrics')).text)
    expect(metric(m, 'vllm:nixl_num_failed_transfers_total')).toBe(1)
    expect(metric(m, 'vllm:request_success_total', { finished_reason: 'error' })).toBe(1)
  })

  it('streams a decode leg, and streams vLLM’s error event when its KV cannot be had', async () => {
    const { pf, df } = await pdPair()
    const p = await post(pf.urls[0]!, '/v1/completions', prefillLeg({ prompt: content('stream') }))
    const params = p.body.kv_transfer_params
    const ok = await stream(df.urls[0]!, '/v1/completions', { prompt: content('stream'), max_tokens: 5, kv_transfer_params: params, stream_options: { include_usage: true } })
    expect(ok.status).toBe(200)
    expect(ok.done).toBe(true)
    expect(ok.usage.completion_tokens).toBe(5)
    expect(ok.usage.prompt_tokens_details.cached_tokens).toBe(ok.usage.prompt_tokens)
    const bad = await stream(df.urls[1]!, '/v1/completions', { prompt: content('stream'), max_tokens: 5, kv_transfer_params: params })
    expect(bad.status).toBe(200)
    expect(bad.done).toBe(true)
    expect(bad.events.some((e) => /"error":\{"message":"Internal server error: KV transfer failed/.test(e))).toBe(true)
  })

  it('held blocks expire after the lease with no decode; a late decode fails, or recomputes with policy recompute', async () => {
    const { pf, df } = await pdPair({ kvLeaseMs: 100 }, {})
    const rf = await fleet({ instances: 1, role: 'decode', kvLoadFailurePolicy: 'recompute' })
    const p1 = await post(pf.urls[0]!, '/v1/chat/completions', prefillLeg(chat('lease1')))
    const p2 = await post(pf.urls[0]!, '/v1/chat/completions', prefillLeg(chat('lease2')))
    let s: any
    for (let i = 0; i < 2000; i++) {
      s = await state(pf, 0)
      if (s.kv_transfer.holds_expired === 2) break
      await new Promise((r) => setTimeout(r, 5))
    }
    expect(s.kv_transfer.holds_expired).toBe(2)
    expect(s.kv_transfer.held_blocks).toBe(0)
    expect(s.kv_blocks_used).toBe(0)
    const m = parsePrometheus((await get(pf.urls[0]!, '/metrics')).text)
    expect(metric(m, 'vllm:nixl_num_kv_expired_reqs_total')).toBe(2)

    const failed = await post(df.urls[0]!, '/v1/chat/completions', { ...chat('lease1'), kv_transfer_params: p1.body.kv_transfer_params })
    expect(failed.status).toBe(500)
    const recomputed = await post(rf.urls[0]!, '/v1/chat/completions', { ...chat('lease2'), kv_transfer_params: p2.body.kv_transfer_params })
    expect(recomputed.status).toBe(200)
    expect(recomputed.body.usage.completion_tokens).toBe(8)
    expect(recomputed.body.usage.prompt_tokens_details.cached_tokens).toBe(0)
    const rs = await state(rf, 0)
    expect(rs.prompt_tokens_computed).toBe(recomputed.body.usage.prompt_tokens)
    expect(rs.kv_transfer.transfer_failures).toBe(1)
  })

  it('a decode that keeps heartbeating holds the blocks past the lease while it waits', async () => {
    // The decode's one sequence slot is busy; the decode leg waits there four times the lease
    // (both sides configured alike, as vLLM's heartbeats every lease/6 assume).
    const { pf } = await pdPair({ kvLeaseMs: 500 })
    const df = await fleet({ instances: 1, role: 'decode', maxNumSeqs: 1, kvLeaseMs: 500 })
    const busy = post(df.urls[0]!, '/v1/completions', { prompt: 'busy', max_tokens: 1000 }) // ~2 s
    await waitFor(() => df.workers[0]!.engine.numRunning === 1, 'the busy request to run')
    const p = await post(pf.urls[0]!, '/v1/chat/completions', prefillLeg(chat('hb')))
    const d = await post(df.urls[0]!, '/v1/chat/completions', { ...chat('hb'), kv_transfer_params: p.body.kv_transfer_params })
    expect((await busy).status).toBe(200)
    expect(d.status).toBe(200)
    expect(d.body.usage.prompt_tokens_details.cached_tokens).toBe(d.body.usage.prompt_tokens)
    const ps = await state(pf, 0)
    expect(ps.kv_transfer.holds_expired).toBe(0)
    expect(ps.kv_transfer.holds_read).toBe(1)
    expect(ps.kv_transfer.heartbeats).toBeGreaterThan(4)
  })

  it('a restarted prefill instance no longer knows its old parameters: the decode fails', async () => {
    const { pf, df } = await pdPair()
    const p = await post(pf.urls[0]!, '/v1/chat/completions', prefillLeg(chat('restart')))
    expect((await post(pf.urls[0]!, '/sim/restart', {})).status).toBe(200)
    const s = await state(pf, 0)
    expect(s.kv_transfer.held_requests).toBe(0)
    expect(s.kv_transfer.engine_id).not.toBe(p.body.kv_transfer_params.remote_engine_id)
    const d = await post(df.urls[0]!, '/v1/chat/completions', { ...chat('restart'), kv_transfer_params: p.body.kv_transfer_params })
    expect(d.status).toBe(500)
    expect(d.body.error.message).toMatch(/unknown engine_id/)
  })

  it('a decode whose client leaves mid-transfer frees the prefill’s blocks', async () => {
    // 1 MB/s: the ~2.4 MB of this prompt's KV take ~2.4 s to arrive.
    const { pf } = await pdPair()
    const df = await fleet({ instances: 1, role: 'decode', kvLinkGbPerSec: 0.001 })
    const p = await post(pf.urls[0]!, '/v1/chat/completions', prefillLeg(chat('leave')))
    const ac = new AbortController()
    const d = post(df.urls[0]!, '/v1/chat/completions', { ...chat('leave'), kv_transfer_params: p.body.kv_transfer_params }, { signal: ac.signal })
    await waitFor(() => pf.workers[0]!.sideChannel!.pulls === 1, 'the pull to start')
    expect(pf.workers[0]!.engine.holds.get(p.body.id)?.state).toBe('reading')
    ac.abort()
    await expect(d).rejects.toThrow()
    await waitFor(() => pf.workers[0]!.engine.holds.size === 0, 'the prefill to free the blocks')
    const s = await state(pf, 0)
    expect(s.kv_transfer.holds_read).toBe(0)
    expect(s.kv_blocks_used).toBe(0)
    expect(df.workers[0]!.engine.cache.usedBlocks).toBe(0)
  })

  it('parameters vLLM cannot use make the decode prefill locally, counted', async () => {
    const { df } = await pdPair()
    const d = await post(df.urls[0]!, '/v1/chat/completions', {
      ...chat('invalid'),
      kv_transfer_params: { do_remote_prefill: true, remote_block_ids: [[1, 2, 3]], remote_engine_id: 'e', remote_host: '127.0.0.1', remote_port: 1 },
    })
    expect(d.status).toBe(200)
    expect(d.body.usage.prompt_tokens_details.cached_tokens).toBe(0)
    const s = await state(df, 0)
    expect(s.kv_transfer.invalid_params).toBe(1)
    expect(s.kv_transfer.transfers).toBe(0)
    expect(s.prompt_tokens_computed).toBe(d.body.usage.prompt_tokens)
    const m = parsePrometheus((await get(df.urls[0]!, '/metrics')).text)
    expect(metric(m, 'sim:kv_transfer_invalid_params_total')).toBe(1)
    // Not an object: refused as vLLM's request validation refuses it.
    const bad = await post(df.urls[0]!, '/v1/chat/completions', { ...chat('invalid'), kv_transfer_params: 'yes' })
    expect(bad.status).toBe(400)
    expect(bad.body.error.param).toBe('kv_transfer_params')
  })

  it('a decode leg refused before the engine (400) frees the prefill’s blocks, as vLLM’s rejection cleanup does', async () => {
    const { pf, df } = await pdPair()
    const p = await post(pf.urls[0]!, '/v1/chat/completions', prefillLeg(chat('reject')))
    expect((await state(pf, 0)).kv_transfer.held_requests).toBe(1)
    const d = await post(df.urls[0]!, '/v1/chat/completions', { ...chat('reject'), max_tokens: 10_000_000, kv_transfer_params: p.body.kv_transfer_params })
    expect(d.status).toBe(400)
    let s: any
    for (let i = 0; i < 2000 && (s = await state(pf, 0)).kv_transfer.held_requests !== 0; i++) await new Promise((r) => setTimeout(r, 5))
    expect(s.kv_transfer.held_requests).toBe(0)
    expect(s.kv_transfer.holds_expired).toBe(0)
  })

  it('the responses API runs through the engine and carries kv_transfer_params both ways', async () => {
    const { pf, df } = await pdPair()
    const body = { instructions: 'Be brief.', input: content('resp'), max_output_tokens: 6 }
    const p = await post(pf.urls[0]!, '/v1/responses', { ...body, max_output_tokens: 1, kv_transfer_params: prefillLeg({}).kv_transfer_params })
    expect(p.status).toBe(200)
    expect(p.body.object).toBe('response')
    expect(p.body.kv_transfer_params.do_remote_prefill).toBe(true)
    const d = await post(df.urls[0]!, '/v1/responses', { ...body, kv_transfer_params: p.body.kv_transfer_params })
    expect(d.status).toBe(200)
    expect(d.body.status).toBe('completed')
    expect(d.body.usage.output_tokens).toBe(6)
    expect(d.body.usage.input_tokens_details.cached_tokens).toBe(d.body.usage.input_tokens)
    expect((await state(df, 0)).prompt_tokens_computed).toBe(1)
    // Without PD fields, an ordinary answer of the same shape, its prompt computed by the engine.
    const plain = await post(df.urls[1]!, '/v1/responses', body)
    expect(plain.body.usage.input_tokens_details.cached_tokens).toBe(0)
    expect((await state(df, 1)).prompt_tokens_computed).toBe(plain.body.usage.input_tokens)
  })

  it('reports roles and transfers in /metrics without disturbing the gauges the router reads', async () => {
    const { pf, df } = await pdPair()
    const p = await post(pf.urls[0]!, '/v1/chat/completions', prefillLeg(chat('metrics')))
    await post(df.urls[0]!, '/v1/chat/completions', { ...chat('metrics'), kv_transfer_params: p.body.kv_transfer_params })
    const ptext = (await get(pf.urls[0]!, '/metrics')).text
    const dtext = (await get(df.urls[0]!, '/metrics')).text
    const pm = parsePrometheus(ptext)
    const dm = parsePrometheus(dtext)
    expect(metric(pm, 'sim:role_info', { role: 'prefill', kv_role: 'kv_producer' })).toBe(1)
    expect(metric(dm, 'sim:role_info', { role: 'decode', kv_role: 'kv_consumer' })).toBe(1)
    expect(metric(pm, 'sim:kv_holds_read_total')).toBe(1)
    expect(metric(dm, 'vllm:nixl_xfer_time_seconds_count')).toBe(1)
    expect(metric(dm, 'vllm:nixl_bytes_transferred_sum')).toBe(p.body.usage.prompt_tokens * 4096)
    expect(metric(dm, 'vllm:prompt_tokens_by_source_total', { source: 'external_kv_transfer' })).toBe(p.body.usage.prompt_tokens)
    expect(metric(dm, 'vllm:prompt_tokens_by_source_total', { source: 'local_compute' })).toBe(0)
    expect(metric(pm, 'vllm:prompt_tokens_by_source_total', { source: 'local_compute' })).toBe(p.body.usage.prompt_tokens)
    for (const text of [ptext, dtext]) {
      const g = readEngineGauges(text)
      expect(g).toEqual({ ok: true, gauges: { running: 0, waiting: 0, kvCacheUsage: 0 } })
    }
  })
})

describe('SGLang’s bootstrap flow between live workers', () => {
  const sglang = (pf: SimFleet, i: number, room: string, tag: string): string =>
    `{"messages":[{"role":"user","content":${JSON.stringify(content(tag))}}],"max_tokens":6,` +
    `"bootstrap_host":"127.0.0.1","bootstrap_port":${pf.bootstrapPorts![i]},"bootstrap_room":${room}}`

  it('pairs both legs by room in either order; the decode reads the KV and decodes', async () => {
    const { pf, df } = await pdPair()
    // A room beyond 2^53: kept exact from the raw body.
    const rooms = ['9223372036854775807', '12345']
    // Decode first: it registers and waits; the prefill then computes and hands over.
    const d1 = post(df.urls[0]!, '/v1/chat/completions', sglang(pf, 0, rooms[0]!, 'sg1'))
    await waitFor(() => pf.workers[0]!.bootstrap!.registered === 1, 'the decode to register its room')
    const p1 = await post(pf.urls[0]!, '/v1/chat/completions', sglang(pf, 0, rooms[0]!, 'sg1'))
    const r1 = await d1
    // Prefill first: its blocks wait held until the decode registers.
    const p2 = post(pf.urls[1]!, '/v1/chat/completions', sglang(pf, 1, rooms[1]!, 'sg2'))
    await waitFor(() => pf.workers[1]!.engine.holds.size === 1, 'the prefill to hold the room')
    const r2 = await post(df.urls[1]!, '/v1/chat/completions', sglang(pf, 1, rooms[1]!, 'sg2'))
    for (const [p, r] of [[p1, r1], [await p2, r2]] as const) {
      expect(p.status).toBe(200)
      expect(p.body.usage.completion_tokens).toBe(1) // the prefill computes one token
      expect(r.status).toBe(200)
      expect(r.body.usage.completion_tokens).toBe(6)
      expect(r.body.usage.prompt_tokens_details.cached_tokens).toBe(r.body.usage.prompt_tokens)
    }
    for (const i of [0, 1]) {
      expect((await state(df, i)).prompt_tokens_computed).toBe(1)
      expect((await state(df, i)).kv_transfer.transfers).toBe(1)
      expect((await state(pf, i)).kv_transfer.holds_read).toBe(1)
      expect((await state(pf, i)).kv_transfer.bootstrap_rooms_open).toBe(0)
    }
  })

  it('a both-role fleet plays the prefill leg where the bootstrap server named is its own', async () => {
    const f = await fleet({ instances: 2 })
    expect(f.bootstrapPorts!.every((p) => typeof p === 'number')).toBe(true)
    const body = sglang(f, 0, '4242', 'both')
    const [p, d] = await Promise.all([post(f.urls[0]!, '/v1/chat/completions', body), post(f.urls[1]!, '/v1/chat/completions', body)])
    expect(p.body.usage.completion_tokens).toBe(1)
    expect(d.body.usage.completion_tokens).toBe(6)
    expect((await state(f, 1)).kv_transfer.transfers).toBe(1)
    expect((await state(f, 0)).kv_transfer.holds_read).toBe(1)
  })

  it('a room that never completes times out: the waiting decode, or the waiting prefill, is answered 500', async () => {
    const { pf, df } = await pdPair({ bootstrapTimeoutMs: 150 })
    const d = await post(df.urls[0]!, '/v1/chat/completions', sglang(pf, 0, '777', 'lonely-decode'))
    expect(d.status).toBe(500)
    expect(d.body.error.message).toMatch(/bootstrap room 777 timed out/)
    const p = await post(pf.urls[1]!, '/v1/chat/completions', sglang(pf, 1, '778', 'lonely-prefill'))
    expect(p.status).toBe(500)
    expect(p.body.error.message).toMatch(/bootstrap room 778: no decode read its KV/)
    expect((await state(pf, 1)).kv_transfer.holds_expired).toBe(1)
    expect((await state(pf, 1)).kv_blocks_used).toBe(0)
  })

  it('refuses malformed bootstrap fields with a 400 naming the field', async () => {
    const { df } = await pdPair()
    for (const [extra, param] of [
      [{ bootstrap_room: -1, bootstrap_host: '127.0.0.1' }, 'bootstrap_room'],
      [{ bootstrap_room: 1 }, 'bootstrap_host'],
      [{ bootstrap_room: 1, bootstrap_host: '127.0.0.1', bootstrap_port: 'x' }, 'bootstrap_port'],
    ] as const) {
      const r = await post(df.urls[0]!, '/v1/chat/completions', { ...chat('bad'), ...extra })
      expect(r.status).toBe(400)
      expect(r.body.error.param).toBe(param)
    }
  })
})
