// How an endpoint's membership travels from the `--workers` primary to its workers: as
// host-set changes (hosts added, removed, or updated with their health, ejection, models),
// not as the whole fleet each time. The region holds one text slot per endpoint, rewritten
// whole by every publication, so the record in it is a base and a tail:
//
//   <checksum> {"format":1,"epoch":…,"head":H,"base":B,"from":F,…}   the header line
//   {"seq":F+1,"added":[…],"updated":[…],"removed":[…]}             the log: one change a line,
//   …                                                                 covering (F, H]
//   {"seq":B,"hosts":[…]}                                             the snapshot: the set at B
//
// A worker that has applied change S reads only the log lines after S, when the log still
// reaches back to it (F <= S); one that starts late or fell further behind, or whose record
// came from another writer (epoch), takes the snapshot and the changes after it. The log is
// bounded (LOG_KEEP changes, and bytes: twice the snapshot's, or LOG_MIN_BYTES), and the
// snapshot rewritten once the changes since it outgrow it, so the record stays within a few
// snapshots' size. Every
// section carries its length and checksum: a record torn by a primary that died writing it is
// refused whole, and the worker keeps what it had until the next one.
import { randomUUID } from 'node:crypto'
import type { Role } from '../config/disaggregation.js'

/** One host as the primary decided it: what a worker's picks and /admin pages read of it. */
export interface HostState {
  id: string
  weight: number
  /** Its role in a disaggregated fleet, and its bootstrap port (SGLang's connector): a worker's picks read them. */
  role: Role
  bootstrapPort: number | undefined
  declaredModels: string[]
  discoveredModels: string[] | undefined
  parents: [string, string][]
  indexBlocks: number | undefined
  kvCacheBlocks: number | undefined
  kvBlockTokens: number | undefined
  kvCacheHitRatio: number | undefined
  healthy: boolean
  lastError: string | undefined
  /** Why its models cannot be discovered (a refused probe), for the workers' /admin/instances. */
  discoveryError: string | undefined
  /** Reports of traffic proving it down the primary has taken (Health.failReports). */
  failReports: number
  ejectedUntil: number
  ejections: number
}

/** One publication's changes to the host set. */
export interface HostChange {
  seq: number
  added: HostState[]
  updated: HostState[]
  removed: string[]
}

interface Header {
  format: 1
  /** This writer's: sequence numbers from another (a new primary's) mean nothing here. */
  epoch: string
  head: number
  base: number
  /** The log holds the changes after this one, to head. */
  from: number
  logLength: number
  logSum: string
  snapLength: number
  snapSum: string
}

/** Changes kept in the log, whatever their size: a worker this many publications behind still reads changes only. */
export const LOG_KEEP = 64
/** Bytes of changes kept even when the snapshot is smaller (a small fleet's workers still read changes, not snapshots). */
export const LOG_MIN_BYTES = 64 * 1024
/** Changes after which the snapshot is rewritten, at the latest (fewer when their bytes outgrow it). */
export const REBASE_AFTER = 32

/** FNV-1a over the text's UTF-16 units: enough to tell a torn section from a whole one. */
function checksum(text: string): string {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0).toString(16).padStart(8, '0')
}

/** The primary's side, one per endpoint's shared router. */
export class HostLogWriter {
  readonly epoch = randomUUID()
  /** Each host's state as last published, as JSON (what a change is found against). */
  #published = new Map<string, string>()
  #head = 0
  #base = 0
  #snapshot = JSON.stringify({ seq: 0, hosts: [] })
  #log: { seq: number; line: string }[] = []
  #logBytes = 0
  #written = false

  get head(): number {
    return this.#head
  }

  /**
   * The record to write after the host set became `hosts`, or undefined when nothing changed
   * since the last one (the slot keeps it). The first call always gives one: a worker told of
   * the router finds a record there.
   */
  publish(hosts: readonly HostState[]): string | undefined {
    const change: HostChange = { seq: this.#head + 1, added: [], updated: [], removed: [] }
    const now = new Map<string, string>()
    for (const h of hosts) {
      const text = JSON.stringify(h)
      now.set(h.id, text)
      const before = this.#published.get(h.id)
      if (before === undefined) change.added.push(h)
      else if (before !== text) change.updated.push(h)
    }
    for (const id of this.#published.keys()) if (!now.has(id)) change.removed.push(id)
    const changed = change.added.length + change.updated.length + change.removed.length > 0
    if (!changed && this.#written) return undefined
    this.#written = true
    this.#published = now
    if (changed) this.#append(change, hosts)
    return this.#record()
  }

  #append(change: HostChange, hosts: readonly HostState[]): void {
    const line = JSON.stringify(change)
    this.#head = change.seq
    this.#log.push({ seq: change.seq, line })
    this.#logBytes += line.length + 1
    const since = this.#log.filter((e) => e.seq > this.#base)
    const sinceBytes = since.reduce((n, e) => n + e.line.length + 1, 0)
    // Past this, a worker that starts reads less in the snapshot than in the changes since it.
    if (since.length >= REBASE_AFTER || sinceBytes > this.#snapshot.length) {
      this.#base = this.#head
      this.#snapshot = JSON.stringify({ seq: this.#base, hosts })
    }
    // Changes the snapshot already holds go first; those after it never (they are bounded above).
    while (this.#log.length > LOG_KEEP || (this.#logBytes > Math.max(2 * this.#snapshot.length, LOG_MIN_BYTES) && this.#log[0]!.seq <= this.#base)) {
      this.#logBytes -= this.#log.shift()!.line.length + 1
    }
  }

  #record(): string {
    const log = this.#log.map((e) => `${e.line}\n`).join('')
    const from = this.#log.length === 0 ? this.#head : this.#log[0]!.seq - 1
    const header: Header = { format: 1, epoch: this.epoch, head: this.#head, base: this.#base, from, logLength: log.length, logSum: checksum(log), snapLength: this.#snapshot.length, snapSum: checksum(this.#snapshot) }
    const h = JSON.stringify(header)
    return `${checksum(h)} ${h}\n${log}${this.#snapshot}`
  }
}

/** Where a worker stands: the writer it follows and the last change it applied. */
export interface HostLogPosition {
  epoch: string
  seq: number
}

/** What a worker does with a record: apply these changes, or start over from the snapshot and then apply them. */
export type HostLogRead = { from: 'log'; head: HostLogPosition; changes: HostChange[] } | { from: 'snapshot'; head: HostLogPosition; hosts: HostState[]; changes: HostChange[] }

/** Why a record was not used: torn (or not one this reader knows), or nothing new in it. */
export type HostLogRefusal = 'torn' | 'current'

/** The worker's side: the changes in `text` after `at` (undefined: none applied yet). */
export function readHostLog(text: string, at: HostLogPosition | undefined): HostLogRead | HostLogRefusal {
  const nl = text.indexOf('\n')
  if (nl < 10 || text[8] !== ' ') return 'torn'
  const h = text.slice(9, nl)
  if (checksum(h) !== text.slice(0, 8)) return 'torn'
  let header: Header
  try {
    header = JSON.parse(h) as Header
  } catch {
    return 'torn'
  }
  if (header.format !== 1 || text.length !== nl + 1 + header.logLength + header.snapLength) return 'torn'
  const head = { epoch: header.epoch, seq: header.head }
  const same = at !== undefined && at.epoch === header.epoch
  if (same && at.seq === header.head) return 'current'
  const log = text.slice(nl + 1, nl + 1 + header.logLength)
  if (checksum(log) !== header.logSum) return 'torn'
  const lines = log.length === 0 ? [] : log.slice(0, -1).split('\n')
  if (lines.length !== header.head - header.from) return 'torn'
  /** The changes after `seq`, parsed (the lines before are skipped unread). */
  const after = (seq: number): HostChange[] | undefined => {
    try {
      return lines.slice(seq - header.from).map((l) => JSON.parse(l) as HostChange)
    } catch {
      return undefined
    }
  }
  if (same && at.seq >= header.from && at.seq < header.head) {
    const changes = after(at.seq)
    return changes === undefined ? 'torn' : { from: 'log', head, changes }
  }
  const snap = text.slice(nl + 1 + header.logLength)
  if (checksum(snap) !== header.snapSum || header.base < header.from) return 'torn'
  let hosts: HostState[]
  try {
    hosts = (JSON.parse(snap) as { hosts: HostState[] }).hosts
  } catch {
    return 'torn'
  }
  const changes = after(header.base)
  return changes === undefined ? 'torn' : { from: 'snapshot', head, hosts, changes }
}
