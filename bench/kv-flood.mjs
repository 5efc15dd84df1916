// The publishing side of bench/exact-cost.bench.ts: N simulated engines, each publishing
// BLOCKS_PER_S blocks a second in vLLM's wire format (BlockStored chains of 10 blocks, the
// oldest chains removed as new ones come, so each engine's view stays the same size), on
// ports PORT..PORT+N-1. Prints "listening <port>" once bound, then publishes until killed.
import { KvEventPublisher } from '../dist/sim/kv-publisher.js'

const n = Number(process.env.ENGINES ?? 8)
const perSecond = Number(process.env.BLOCKS_PER_S ?? 1000)
const blockSize = 16
const chain = 10 // blocks per BlockStored
const keep = Number(process.env.KEEP_CHAINS ?? 2000) // chains each engine holds
const pubs = await Promise.all(Array.from({ length: n }, () => KvEventPublisher.open({ host: '127.0.0.1', port: 0 })))
console.log(`listening ${pubs.map((p) => p.endpoint.split(':').pop()).join(',')}`)
let next = 1n
const held = pubs.map(() => [])
const tokens = (c) => Array.from({ length: chain * blockSize }, (_, i) => (c * 7919 + i * 31) % 200_000)
// One tick every 10 ms: perSecond / 100 blocks per engine (whole chains).
const chainsPerTick = Math.max(1, Math.round(perSecond / 100 / chain))
let c = 0
setInterval(() => {
  pubs.forEach((p, e) => {
    const events = []
    for (let k = 0; k < chainsPerTick; k++) {
      const hashes = Array.from({ length: chain }, () => next++)
      events.push({ type: 'BlockStored', blockHashes: hashes, parentBlockHash: null, tokenIds: tokens(c++), blockSize, loraId: null, medium: 'GPU', loraName: null, extraKeys: null, groupIdx: null })
      held[e].push(hashes)
      if (held[e].length > keep) events.push({ type: 'BlockRemoved', blockHashes: held[e].shift(), medium: 'GPU', groupIdx: null })
    }
    p.publish(events, Date.now() / 1000)
  })
}, 10)
