// The record a `--workers` primary writes for each endpoint: host-set changes after a base
// snapshot. A reader that has followed reads only the changes after its own; one that starts
// late, falls behind the log, or meets another writer's record takes the snapshot; a record
// torn by a writer that died writing it is refused whole.
import { describe, expect, it } from 'vitest'
import { HostLogWriter, LOG_KEEP, LOG_MIN_BYTES, readHostLog, type HostLogPosition, type HostLogRead, type HostState } from '../../src/cluster/host-log.js'

function host(id: string, over: Partial<HostState> = {}): HostState {
  return {
    id,
    weight: 1,
    role: 'both',
    bootstrapPort: undefined,
    declaredModels: ['m'],
    discoveredModels: undefined,
    parents: [],
    indexBlocks: undefined,
    kvCacheBlocks: undefined,
    kvBlockTokens: undefined,
    kvCacheHitRatio: undefined,
    healthy: true,
    lastError: undefined,
    discoveryError: undefined,
    failReports: 0,
    ejectedUntil: 0,
    ejections: 0,
    ...over,
  }
}

/** A reader's copy of the set: what it gets by applying each read as a worker does. */
class Copy {
  at: HostLogPosition | undefined
  hosts = new Map<string, HostState>()
  reads: ('log' | 'snapshot' | 'torn' | 'current')[] = []
  read(text: string): void {
    const r = readHostLog(text, this.at)
    if (typeof r === 'string') return void this.reads.push(r)
    this.apply(r)
  }
  apply(r: HostLogRead): void {
    this.reads.push(r.from)
    if (r.from === 'snapshot') this.hosts = new Map(r.hosts.map((h) => [h.id, h]))
    for (const c of r.changes) {
      for (const id of c.removed) this.hosts.delete(id)
      for (const h of [...c.added, ...c.updated]) this.hosts.set(h.id, h)
    }
    this.at = r.head
  }
  list(): HostState[] {
    return [...this.hosts.values()].sort((a, b) => a.id.localeCompare(b.id))
  }
}

/** A fleet the writer publishes, changed one way or another at each step. */
class Fleet {
  hosts = new Map<string, HostState>()
  writer = new HostLogWriter()
  text = ''
  set(h: HostState): string {
    this.hosts.set(h.id, h)
    return this.publish()
  }
  remove(id: string): string {
    this.hosts.delete(id)
    return this.publish()
  }
  publish(): string {
    const t = this.writer.publish([...this.hosts.values()])
    if (t !== undefined) this.text = t
    return this.text
  }
  list(): HostState[] {
    return [...this.hosts.values()].sort((a, b) => a.id.localeCompare(b.id))
  }
}

describe('host-set changes in the shared record', () => {
  it('a reader that follows reads only the changes after its own: added, health flipped, removed', () => {
    const f = new Fleet()
    for (const id of ['a', 'b', 'c']) f.set(host(id))
    const r = new Copy()
    r.read(f.text)
    expect(r.list()).toEqual(f.list())
    const before = r.at!.seq
    f.set(host('b', { healthy: false, lastError: 'connection refused', failReports: 1 }))
    const one = readHostLog(f.text, r.at)
    expect(one).toMatchObject({ from: 'log', changes: [{ seq: before + 1, added: [], updated: [{ id: 'b', healthy: false }], removed: [] }] })
    r.apply(one as HostLogRead)
    f.remove('c')
    f.set(host('d'))
    r.read(f.text)
    expect(r.reads.slice(1)).toEqual(['log', 'log'])
    expect(r.list()).toEqual(f.list())
    expect(readHostLog(f.text, r.at)).toBe('current')
  })

  it('publishes nothing when nothing changed, but always a first record, even of an empty set', () => {
    const f = new Fleet()
    expect(f.writer.publish([])).toBeDefined()
    expect(f.writer.publish([])).toBeUndefined()
    f.set(host('a'))
    expect(f.writer.publish([...f.hosts.values()])).toBeUndefined()
    const r = new Copy()
    r.read(f.text)
    expect(r.list()).toEqual(f.list())
  })

  it('a reader that starts late takes the snapshot and the changes after it', () => {
    const f = new Fleet()
    for (let i = 0; i < 10; i++) f.set(host(`h${i}`))
    for (let i = 0; i < 5; i++) f.set(host(`h${i}`, { ejectedUntil: 1000 + i, ejections: 1 }))
    f.remove('h9')
    const late = new Copy()
    late.read(f.text)
    expect(late.reads).toEqual(['snapshot'])
    expect(late.list()).toEqual(f.list())
    expect(late.at!.seq).toBe(f.writer.head)
  })

  it('a reader that fell behind the log falls back to the snapshot; one a few changes behind reads the log', () => {
    const f = new Fleet()
    for (const id of ['a', 'b', 'c']) f.set(host(id))
    const behind = new Copy()
    const near = new Copy()
    behind.read(f.text)
    near.read(f.text)
    for (let i = 1; i <= LOG_KEEP * 3; i++) {
      f.set(host('b', { healthy: i % 2 === 0, failReports: i }))
      if (i % 5 === 0) near.read(f.text)
    }
    near.read(f.text)
    expect(near.reads[0]).toBe('snapshot')
    expect(near.reads.slice(1).filter((r) => r === 'snapshot')).toEqual([])
    expect(near.reads.length).toBeGreaterThan(LOG_KEEP / 2)
    expect(near.list()).toEqual(f.list())
    behind.read(f.text)
    expect(behind.reads).toEqual(['snapshot', 'snapshot'])
    expect(behind.list()).toEqual(f.list())
  })

  it("another writer's record (a new primary) is taken from its snapshot, whatever its sequence numbers", () => {
    const f = new Fleet()
    for (const id of ['a', 'b']) f.set(host(id))
    const r = new Copy()
    r.read(f.text)
    const g = new Fleet()
    g.set(host('x'))
    g.set(host('y'))
    r.read(g.text)
    expect(r.reads).toEqual(['snapshot', 'snapshot'])
    expect(r.list()).toEqual(g.list())
  })

  it("stays bounded: health flips beyond the log's bound leave a record of a few snapshots (or LOG_MIN_BYTES of changes)", () => {
    for (const size of [50, 300]) {
      const f = new Fleet()
      for (let i = 0; i < size; i++) f.set(host(`http://10.0.${i >> 8}.${i & 255}:8000`))
      const snapshot = JSON.stringify({ seq: 0, hosts: [...f.hosts.values()] }).length
      let most = 0
      for (let i = 0; i < 3 * LOG_KEEP + size; i++) {
        f.set(host(`http://10.0.${(i % size) >> 8}.${i % size & 255}:8000`, { healthy: i % 3 !== 0, failReports: i }))
        most = Math.max(most, f.text.length)
      }
      // The snapshot, the changes since it (at most one snapshot's worth), and the older ones kept.
      expect(most).toBeLessThan(2 * snapshot + Math.max(2 * snapshot, LOG_MIN_BYTES) + 1024)
      const r = new Copy()
      r.read(f.text)
      expect(r.list()).toEqual(f.list())
    }
  })

  it('a torn record (the new one written over the old only in part) is refused, wherever the write stopped', () => {
    const f = new Fleet()
    for (const id of ['a', 'b', 'c', 'd']) f.set(host(id))
    const r = new Copy()
    r.read(f.text)
    const old = f.text
    f.set(host('b', { healthy: false, lastError: 'connection refused', failReports: 1 }))
    f.remove('d')
    const next = f.text
    const fresh = new Copy()
    for (const reader of [r, fresh]) {
      for (let cut = 0; cut < Math.max(old.length, next.length); cut++) {
        const torn = next.slice(0, cut) + old.slice(cut)
        if (torn === next || torn === old) continue
        const got = readHostLog(torn, reader.at)
        expect(got, `cut at ${cut}`).toBe('torn')
      }
      // And cut short, as a length written before the bytes would leave it.
      for (let cut = 0; cut < next.length; cut += 3) expect(readHostLog(next.slice(0, cut), reader.at)).toBe('torn')
    }
    r.read(next)
    expect(r.list()).toEqual(f.list())
  })
})
