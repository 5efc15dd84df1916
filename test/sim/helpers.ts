// Shared by the simulator tests: fleets that are always closed, small HTTP helpers over
// global fetch, an SSE reader that timestamps chunks, and a Prometheus text parser.
import { afterEach } from 'vitest'
import { startSimFleet, type SimFleet, type SimFleetOptions } from '../../src/sim/index.js'

const open: SimFleet[] = []

afterEach(async () => {
  await Promise.all(open.splice(0).map((f) => f.close()))
})

/** A fleet on free loopback ports, closed after the test. */
export async function fleet(opts: Partial<SimFleetOptions> = {}): Promise<SimFleet> {
  const f = await startSimFleet({ instances: 1, profile: 'tiny', port: 0, host: '127.0.0.1', ...opts })
  open.push(f)
  return f
}

export interface JsonResponse {
  status: number
  headers: Headers
  body: any
  ms: number
}

export async function post(url: string, path: string, body: unknown, init: RequestInit = {}): Promise<JsonResponse> {
  const t = performance.now()
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...init,
  })
  const text = await res.text()
  const ms = performance.now() - t
  let parsed: unknown = text
  try {
    parsed = JSON.parse(text)
  } catch {
    // not JSON: keep the text
  }
  return { status: res.status, headers: res.headers, body: parsed, ms }
}

export async function get(url: string, path: string): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(url + path)
  return { status: res.status, headers: res.headers, text: await res.text() }
}

export interface StreamResult {
  status: number
  headers: Headers
  events: string[]
  /** ms from sending to the first event carrying generated text. */
  ttftMs: number
  totalMs: number
  content: string
  usage: any
  done: boolean
}

/** Posts a streaming request and reads the SSE events to the end. */
export async function stream(url: string, path: string, body: Record<string, unknown>): Promise<StreamResult> {
  const t = performance.now()
  const res = await fetch(url + path, { method: 'POST', body: JSON.stringify({ ...body, stream: true }) })
  const out: StreamResult = {
    status: res.status,
    headers: res.headers,
    events: [],
    ttftMs: -1,
    totalMs: 0,
    content: '',
    usage: undefined,
    done: false,
  }
  const decoder = new TextDecoder()
  let buf = ''
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true })
    let i: number
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i)
      buf = buf.slice(i + 2)
      out.events.push(ev)
      if (!ev.startsWith('data: ')) continue
      const data = ev.slice(6)
      if (data === '[DONE]') {
        out.done = true
        continue
      }
      const j = JSON.parse(data)
      if (j.usage) out.usage = j.usage
      const piece: string | undefined = j.choices?.[0]?.delta?.content ?? j.choices?.[0]?.text
      if (piece !== undefined && piece.length > 0) {
        if (out.ttftMs < 0) out.ttftMs = performance.now() - t
        out.content += piece
      }
    }
  }
  out.totalMs = performance.now() - t
  return out
}

/** A prompt of exactly `tokens` tokens under the simulator's 4-bytes-per-token tokenizer. */
export function promptOf(tokens: number, tag: string): string {
  return `${tag}|`.padEnd(tokens * 4, `${tag} lorem ipsum `)
}

export interface Sample {
  name: string
  labels: Record<string, string>
  value: number
}

export interface Family {
  name: string
  type: string
  help: string
  samples: Sample[]
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ([^ ]+)( -?\d+)?$/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)/y

/**
 * Parses Prometheus text format 0.0.4 strictly enough to catch malformed output: every
 * sample belongs to a family declared by HELP and TYPE, names and labels are well formed,
 * values are numbers, histogram buckets are cumulative and end at +Inf = _count.
 */
export function parsePrometheus(text: string): Map<string, Family> {
  const families = new Map<string, Family>()
  let current: Family | undefined
  for (const [n, line] of text.split('\n').entries()) {
    if (line === '') continue
    const where = `line ${n + 1}: ${line}`
    if (line.startsWith('# HELP ')) {
      const [name, ...help] = line.slice(7).split(' ')
      if (!NAME.test(name!)) throw new Error(`bad metric name, ${where}`)
      current = { name: name!, type: 'untyped', help: help.join(' '), samples: [] }
      if (families.has(name!)) throw new Error(`family declared twice, ${where}`)
      families.set(name!, current)
      continue
    }
    if (line.startsWith('# TYPE ')) {
      const [name, type] = line.slice(7).split(' ')
      if (current === undefined || current.name !== name) throw new Error(`TYPE without its HELP, ${where}`)
      if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(type!)) throw new Error(`bad type, ${where}`)
      current.type = type!
      continue
    }
    if (line.startsWith('#')) continue
    const m = SAMPLE.exec(line)
    if (m === null) throw new Error(`malformed sample, ${where}`)
    const name = m[1]!
    const labels: Record<string, string> = {}
    if (m[3] !== undefined && m[3] !== '') {
      LABEL.lastIndex = 0
      while (LABEL.lastIndex < m[3].length) {
        const l = LABEL.exec(m[3])
        if (l === null) throw new Error(`malformed labels, ${where}`)
        labels[l[1]!] = l[2]!
      }
    }
    const value = m[4] === '+Inf' ? Infinity : m[4] === '-Inf' ? -Infinity : Number(m[4])
    if (Number.isNaN(value) && m[4] !== 'NaN') throw new Error(`bad value, ${where}`)
    const fam = current
    const base = fam?.type === 'histogram' ? name.replace(/_(bucket|count|sum)$/, '') : name
    if (fam === undefined || fam.name !== base) throw new Error(`sample outside its family, ${where}`)
    fam.samples.push({ name, labels, value })
  }
  for (const f of families.values()) {
    if (f.type !== 'histogram') continue
    const buckets = f.samples.filter((s) => s.name.endsWith('_bucket'))
    for (let i = 1; i < buckets.length; i++) {
      if (buckets[i]!.value < buckets[i - 1]!.value) throw new Error(`${f.name}: buckets not cumulative`)
    }
    const inf = buckets.find((b) => b.labels.le === '+Inf')
    const count = f.samples.find((s) => s.name.endsWith('_count'))
    if (inf === undefined || count === undefined || inf.value !== count.value) throw new Error(`${f.name}: +Inf bucket != _count`)
  }
  return families
}

/** The value of the one sample of `name` whose labels include `labels`. */
export function metric(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number {
  for (const f of families.values()) {
    for (const s of f.samples) {
      if (s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) return s.value
    }
  }
  throw new Error(`no sample ${name} ${JSON.stringify(labels)}`)
}

export async function scrape(url: string): Promise<Map<string, Family>> {
  const r = await get(url, '/metrics')
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}`)
  return parsePrometheus(r.text)
}

/** Polls `check` until it returns true or `ms` pass. */
export async function eventually(check: () => Promise<boolean> | boolean, ms = 5000): Promise<boolean> {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (await check()) return true
    await new Promise((r) => setTimeout(r, 20))
  }
  return check()
}
