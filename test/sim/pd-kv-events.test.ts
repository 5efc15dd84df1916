// KV events of a disaggregated request, on the wire: the prefill worker publishes the blocks
// it computed, the decode worker those it received (vLLM caches received blocks), each on its
// own publisher.
import { Subscriber } from 'zeromq'
import { afterEach, describe, expect, it } from 'vitest'
import { decodeBatch } from '../../src/fleet/events/codec.js'
import type { BlockStoredEvent, EngineBlockHash, KvEvent } from '../../src/fleet/events/types.js'
import type { SimWorker } from '../../src/sim/index.js'
import { waitFor } from '../fleet/events/helpers.js'
import { fleet, post, promptOf } from './helpers.js'

const sockets: Subscriber[] = []
afterEach(() => {
  for (const s of sockets.splice(0)) s.close()
})

async function listen(w: SimWorker): Promise<KvEvent[]> {
  const pub = w.kvPublisher!
  const before = pub.subscribers
  const sub = new Subscriber({ linger: 0 })
  sockets.push(sub)
  sub.connect(pub.endpoint)
  sub.subscribe('')
  const out: KvEvent[] = []
  void (async () => {
    try {
      for await (const [, , payload] of sub) out.push(...decodeBatch(payload as Buffer).events)
    } catch {
      // closed
    }
  })()
  await waitFor(() => pub.subscribers > before, 'the subscription to reach the sim')
  return out
}

const stored = (events: KvEvent[]): EngineBlockHash[] =>
  events.filter((e): e is BlockStoredEvent => e.type === 'BlockStored').flatMap((e) => e.blockHashes)

describe('KV events of both roles', () => {
  it('the prefill publishes the blocks it computed; the decode those it pulled, not those it had', async () => {
    const pf = await fleet({ role: 'prefill', bootstrapPort: 0, kvEvents: { port: 0 } })
    const df = await fleet({ role: 'decode', kvEvents: { port: 0 } })
    const pe = await listen(pf.workers[0]!)
    const de = await listen(df.workers[0]!)
    const text = promptOf(640, 'events') // 40 full blocks
    // The decode already holds the first 10 blocks.
    await post(df.urls[0]!, '/v1/completions', { prompt: text.slice(0, 160 * 4), max_tokens: 1 })
    await waitFor(() => stored(de).length === 10, "the decode's own 10 blocks")
    const had = stored(de)
    const p = await post(pf.urls[0]!, '/v1/completions', {
      prompt: text,
      max_tokens: 1,
      kv_transfer_params: { do_remote_decode: true },
    })
    await waitFor(() => stored(pe).length === 40, "the prefill's 40 blocks")
    const d = await post(df.urls[0]!, '/v1/completions', { prompt: text, max_tokens: 3, kv_transfer_params: p.body.kv_transfer_params })
    expect(d.status).toBe(200)
    // vLLM caches what it received up to the last token it recomputes: blocks 10..38, then the
    // recomputed last token completes block 39.
    await waitFor(() => stored(de).length === 40, "the decode's 30 received blocks")
    const computed = stored(pe)
    expect(stored(de)).toEqual(computed)
    expect(had).toEqual(computed.slice(0, 10))
    expect(de.filter((e) => e.type === 'BlockRemoved')).toEqual([])
  })
})
