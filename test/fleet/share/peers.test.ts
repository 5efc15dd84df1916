// The peer table alone: what a message costs (the instances it names, never a pass over the
// other peers), how many peers it keeps, and sums that stay exact and within the router's bound.
import { describe, expect, it } from 'vitest'
import { encodeLoad, leadingReplica, MAX_FIGURE, MAX_PEERS, PeerTable, type Figures, type LoadMessage } from '../../../src/fleet/share/index.js'

const msg = (replica: string, seq: number, endpoints: Figures): LoadMessage => ({ replica, seq, ts: 1, endpoints, inFlight: undefined, bye: false })

/** Figures whose every read (keys, values, own-property checks) is counted in `reads.n`. */
function counted(f: Figures, reads: { n: number }): Figures {
  const handler = <T extends object>(): ProxyHandler<T> => ({
    get: (t, k, r) => (reads.n++, Reflect.get(t, k, r)),
    ownKeys: (t) => (reads.n++, Reflect.ownKeys(t)),
    getOwnPropertyDescriptor: (t, k) => (reads.n++, Reflect.getOwnPropertyDescriptor(t, k)),
    has: (t, k) => (reads.n++, Reflect.has(t, k)),
  })
  return new Proxy(Object.fromEntries(Object.entries(f).map(([ep, row]) => [ep, new Proxy(row, handler())])), handler())
}

function table() {
  const writes: [string, string, number][] = []
  const t = new PeerTable('self', { setSharedPrefill: (ep, id, n) => void writes.push([ep, id, n]) })
  return { t, writes }
}

const row = (n: number, v: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`http://10.0.0.${i}:8000`, v]))

describe('PeerTable', () => {
  it("costs a message the instances it names: the other peers' figures are not read again", () => {
    const { t, writes } = table()
    const reads = { n: 0 }
    for (let p = 0; p < 40; p++) t.accept(msg(`p${p}`, 0, counted({ default: row(100, 1) }, reads)), 0)
    expect(t.shared().default!['http://10.0.0.7:8000']).toBe(40)
    reads.n = 0
    writes.length = 0
    // A new peer and an update of another: neither reads the 40 kept peers' figures, bar the updated one's.
    t.accept(msg('new', 0, { default: row(100, 2) }), 0)
    expect(reads.n).toBe(0)
    t.accept(msg('p3', 1, { default: row(100, 5) }), 0)
    // p3's previous figures are read once to take them back (its keys, its rows, their values).
    expect(reads.n).toBeLessThanOrEqual(2 * (2 + 2 * 100))
    expect(t.shared().default!['http://10.0.0.7:8000']).toBe(40 + 2 + 4)
    expect(writes).toHaveLength(200)
  })

  it(`keeps at most ${MAX_PEERS} peers; a new one past them is refused until one leaves`, () => {
    const { t } = table()
    for (let p = 0; p < MAX_PEERS; p++) expect(t.accept(msg(`p${p}`, 0, { default: row(2, 1) }), 0)).toBe('new')
    expect(t.accept(msg('late', 0, { default: row(2, 100) }), 0)).toBe('refused')
    expect(t.size).toBe(MAX_PEERS)
    expect(t.shared().default!['http://10.0.0.1:8000']).toBe(MAX_PEERS)
    // A kept peer still updates.
    expect(t.accept(msg('p0', 1, { default: row(2, 3) }), 0)).toBe('update')
    expect(t.accept({ ...msg('p1', 1, {}), bye: true }, 0)).toBe('bye')
    expect(t.accept(msg('late', 0, { default: row(2, 100) }), 0)).toBe('new')
    expect(t.shared().default!['http://10.0.0.1:8000']).toBe(MAX_PEERS - 2 + 3 + 100)
  })

  it('clamps each figure and the sums to 2^32 - 1, and the sums stay exact as peers come and go', () => {
    const { t, writes } = table()
    const id = 'http://10.0.0.0:8000'
    t.accept(msg('a', 0, { default: { [id]: Number.MAX_SAFE_INTEGER } }), 0)
    t.accept(msg('b', 0, { default: { [id]: Number.MAX_SAFE_INTEGER } }), 0)
    expect(t.shared()).toEqual({ default: { [id]: MAX_FIGURE } })
    expect(writes.at(-1)).toEqual(['default', id, MAX_FIGURE])
    expect(writes.every(([, , n]) => n <= MAX_FIGURE)).toBe(true)
    // Back to small figures: the sum is what the peers say now, not a rounding left over.
    t.accept(msg('a', 1, { default: { [id]: 3 } }), 0)
    t.accept(msg('b', 1, { default: { [id]: 4 } }), 0)
    expect(t.shared()).toEqual({ default: { [id]: 7 } })
    t.accept({ ...msg('a', 2, {}), bye: true }, 0)
    t.accept(msg('b', 2, { default: {} }), 0)
    expect(t.shared()).toEqual({})
    expect(writes.at(-1)).toEqual(['default', id, 0])
  })

  it("tells a full table's refusal from a message's first bytes, as encodeLoad writes them", () => {
    const { t } = table()
    expect(leadingReplica(encodeLoad('router-a-1', 3, 1, '{}', '{}'))).toBe('router-a-1')
    // Anything else is read whole by decodeLoad: other key orders, escapes, no id.
    for (const text of ['{"seq":1,"replica":"x"}', '{"replica":"a\\"b","seq":1}', '{"replica":', `{"replica":"${'x'.repeat(200)}"}`, 'junk']) expect(leadingReplica(text), text).toBeUndefined()
    for (let p = 0; p < MAX_PEERS; p++) t.accept(msg(`p${p}`, 0, {}), 0)
    expect(t.refuses('new')).toBe(true)
    expect(t.refuses('p1')).toBe(false)
    expect(t.refuses('self')).toBe(false)
  })
})
