// Discovery from a file of instances: edits (an editor's rename-on-save, an in-place write)
// move instances in and out of routing; a bad or missing file keeps the last list; a request
// in flight on an instance that left finishes before its connections are closed.
import { mkdtempSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Pool } from 'undici'
import { afterEach, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../../src/proxy/proxy.js'
import { resolveSim, SimWorker, startSimFleet, type SimFleet } from '../../../src/sim/index.js'
import { instancesReport } from '../../../src/runtime/admin/admin.js'
import { chat, closeRouter, post, until } from '../../proxy/helpers.js'
import { freePort } from '../../helpers/ports.js'
import { GatedClock, MODEL, members, membershipChange, reached, roles, sourceFailed, startDiscoveryRouter, untilLog, untilMembers, untilRoles } from './helpers.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-discovery-file-'))
let fleet: SimFleet | undefined
let router: ProxyServer | undefined
const extra: SimWorker[] = []
afterEach(async () => {
  await closeRouter(router, 10_000)
  await fleet?.close()
  await Promise.all(extra.splice(0).map((w) => w.close()))
  router = undefined
  fleet = undefined
})

/** Saves as editors do: a new file renamed over the old one (a new inode). */
function saveByRename(path: string, text: string): void {
  writeFileSync(`${path}.tmp`, text)
  renameSync(`${path}.tmp`, path)
}

describe('file discovery', () => {
  it('instances join and leave as the file is edited; a bad or missing file keeps the last list', async () => {
    fleet = await startSimFleet({ instances: 3, profile: 'tiny' })
    const [w0, w1, w2] = fleet.urls as [string, string, string]
    const path = join(dir, 'fleet.yaml')
    writeFileSync(path, `- ${w0}\n`)
    const s = await startDiscoveryRouter([{ type: 'file', path }])
    router = s.router
    // start() waited for the file's first reading and the probe of what it listed.
    expect(members(router)).toEqual([w0])
    expect(await reached(router, 5)).toEqual(new Set([w0]))

    const before = s.lines.length
    saveByRename(path, `- ${w0}\n- url: ${w1}\n  weight: 2\n- ${w2}\n`)
    await untilMembers(router, [w0, w1, w2])
    const joined = await untilLog(s.lines, membershipChange, 'the membership change logged', before)
    expect(joined).toMatchObject({ level: 30, endpoint: 'default', source: `file ${path}`, removed: [] })
    expect((joined.added as string[]).sort()).toEqual([w1, w2].sort())
    expect(s.endpoint.instances.get(w1)!.weight).toBe(2)
    expect(await reached(router, 60)).toEqual(new Set([w0, w1, w2]))

    const mark = s.lines.length
    writeFileSync(path, `- ${w0}\n- ${w1}\n`) // in place this time
    await untilMembers(router, [w0, w1])
    expect(await untilLog(s.lines, membershipChange, 'the removal logged', mark)).toMatchObject({ added: [], removed: [w2] })
    expect((await reached(router, 30)).has(w2)).toBe(false)

    // A half-written or wrong file is a warning, not an empty fleet.
    let from = s.lines.length
    saveByRename(path, `- ${w0}\n- not a url\n`)
    const bad = await untilLog(s.lines, sourceFailed, 'the bad file reported', from)
    expect(bad).toMatchObject({ level: 40, source: `file ${path}` })
    expect(bad.err).toMatch(/fleet\.yaml' must hold a list of instances .*: \[1\]: .*; got "not a url"/)
    from = s.lines.length
    unlinkSync(path)
    expect((await untilLog(s.lines, sourceFailed, 'the missing file reported', from)).err).toMatch(/cannot read .*fleet\.yaml': ENOENT/)
    expect(members(router)).toEqual([w0, w1].sort())
    expect(await reached(router, 30)).toEqual(new Set([w0, w1]))

    // And when it is back, it counts again.
    saveByRename(path, `- ${w2}\n`)
    await untilMembers(router, [w2])
    expect(s.lines.filter((l) => l.msg === 'discovery source answers again')).toHaveLength(1)
  })

  it("entries keep their own role and bootstrap port, the others take the source's; roles follow the file, and a mix with a leg missing is warned of as it comes and goes", async () => {
    fleet = await startSimFleet({ instances: 3, profile: 'tiny' })
    const [w0, w1, w2] = fleet.urls as [string, string, string]
    const path = join(dir, 'roles.yaml')
    writeFileSync(path, `- url: ${w0}\n  role: prefill\n  bootstrapPort: 8998\n- ${w1}\n`)
    const s = await startDiscoveryRouter([{ type: 'file', path, role: 'decode' }])
    router = s.router
    expect(roles(router)).toEqual([`${w0} prefill`, `${w1} decode`].sort())
    expect(s.endpoint.instances.get(w0)!.bootstrapPort).toBe(8998)
    expect(s.endpoint.instances.get(w1)!.bootstrapPort).toBeUndefined()
    const report = () => instancesReport(router!)[0]!
    expect(report()).toMatchObject({ roles: { prefill: 1, decode: 1, both: 0 }, missingRole: null })
    expect(report().instances.find((i) => i.id === w0)).toMatchObject({ role: 'prefill', bootstrapPort: 8998 })
    expect(report().instances.find((i) => i.id === w1)).toMatchObject({ role: 'decode', bootstrapPort: null })
    const noPrefill = (l: Record<string, unknown>) => l.level === 40 && typeof l.msg === 'string' && l.msg.includes('but no prefill instance')
    const noDecode = (l: Record<string, unknown>) => l.level === 40 && typeof l.msg === 'string' && l.msg.includes('but no decode instance')
    const whole = (l: Record<string, unknown>) => l.msg === 'endpoint default has instances for prefill and decode again'
    expect(s.lines.filter((l) => noPrefill(l) || noDecode(l))).toEqual([])
    const missing = async () => (await router!.metricsText()).split('\n').filter((l) => l.startsWith('prefix_router_role_missing{')).sort()

    // The prefill instance leaves: decode alone, warned of once, and the gauge says which leg.
    let from = s.lines.length
    saveByRename(path, `- ${w1}\n`)
    await untilMembers(router, [w1])
    const warned = await untilLog(s.lines, noPrefill, 'the missing prefill instance warned of', from)
    expect(warned).toMatchObject({ endpoint: 'default', missing: 'prefill', msg: 'endpoint default has 1 decode instance(s) but no prefill instance: requests run whole on the decode instances' })
    expect(report().missingRole).toBe('prefill')
    expect(await missing()).toEqual(['prefix_router_role_missing{endpoint="default",role="decode"} 0', 'prefix_router_role_missing{endpoint="default",role="prefill"} 1'])

    // An instance doing both comes: whole again.
    from = s.lines.length
    saveByRename(path, `- ${w1}\n- url: ${w2}\n  role: both\n`)
    await untilLog(s.lines, whole, 'the mix whole again', from)
    // The check counts the instance still being probed to join; it is in rotation once its first probe answers.
    await untilRoles(router, [`${w1} decode`, `${w2} both`])
    expect(roles(router)).toEqual([`${w1} decode`, `${w2} both`].sort())
    expect(report().missingRole).toBeNull()
    expect(await missing()).toEqual(['prefix_router_role_missing{endpoint="default",role="decode"} 0', 'prefix_router_role_missing{endpoint="default",role="prefill"} 0'])

    // A running instance takes another role; with the other leaving, prefill alone.
    from = s.lines.length
    saveByRename(path, `- url: ${w1}\n  role: prefill\n`)
    await untilRoles(router, [`${w1} prefill`])
    expect(await untilLog(s.lines, noDecode, 'the missing decode instance warned of', from)).toMatchObject({
      missing: 'decode',
      msg: 'endpoint default has 1 prefill instance(s) but no decode instance: requests cannot be served: no decode instance',
    })
    expect(s.lines.slice(from).filter(noDecode)).toHaveLength(1)

    // A role of no known name is refused, naming the entry; the last list stays.
    from = s.lines.length
    saveByRename(path, `- url: ${w1}\n  role: prefiller\n`)
    const bad = await untilLog(s.lines, sourceFailed, 'the bad role reported', from)
    expect(bad.err).toMatch(/roles\.yaml' must hold a list of instances .*\[0\]\.role: .*"prefill"\|"decode"\|"both".*; got "prefiller"/)
    expect(roles(router)).toEqual([`${w1} prefill`])
  })

  it('a list whose new instances all fail their first probe keeps the healthy ones that left until a replacement is up', async () => {
    fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
    const w0 = fleet.urls[0]!
    const port = await freePort()
    const dead = `http://127.0.0.1:${port}` // nothing listens here, until the worker started below
    const path = join(dir, 'replaced.yaml')
    writeFileSync(path, `- ${w0}\n`)
    const s = await startDiscoveryRouter([{ type: 'file', path }], { config: { health: { intervalMs: 100, timeoutMs: 2000 } } })
    router = s.router
    expect(members(router)).toEqual([w0])

    let from = s.lines.length
    saveByRename(path, `- ${dead}\n`)
    // The newcomer's first probe fails: w0, the only healthy instance, is kept and still serves.
    await untilLog(s.lines, (l) => l.msg === 'instance down' && l.instance === dead, 'the newcomer probed down', from)
    expect(members(router)).toEqual([w0])
    expect(await reached(router, 20)).toEqual(new Set([w0]))
    const kept = await untilLog(s.lines, (l) => l.msg === 'discovery: no listed instance is healthy; keeping the instances that left until one is', 'the keeping logged', from)
    expect(kept).toMatchObject({ level: 40, endpoint: 'default', kept: [w0], waitingFor: [dead] })
    const report = instancesReport(router)[0]!.instances
    expect(report.find((i) => i.id === w0)).toMatchObject({ healthy: true, keptUntilReplacementHealthy: true })
    expect(report.find((i) => i.id === dead)).toMatchObject({ healthy: false, keptUntilReplacementHealthy: false })

    // Versions that do not parse keep the last good list; each new one is reported (here two
    // with the same complaint), not only the first.
    from = s.lines.length
    writeFileSync(path, `- ${dead}\n- http:/\n`) // in place, as if cut short
    await untilLog(s.lines, sourceFailed, 'the first bad version reported', from)
    const second = s.lines.length
    writeFileSync(path, `- ${w0}\n- http:/\n`)
    const again = await untilLog(s.lines, sourceFailed, 'the second bad version reported', second)
    expect(again.err).toMatch(/replaced\.yaml' must hold a list of instances .*\[1\]: /)
    expect(members(router)).toEqual([w0])
    expect(await reached(router, 10)).toEqual(new Set([w0]))

    // The replacement comes up (the last good list named it): it takes over, w0 leaves.
    from = s.lines.length
    extra.push(...(await startSimFleet({ instances: 1, profile: 'tiny', host: '127.0.0.1', port })).workers)
    await untilMembers(router, [dead])
    expect(await untilLog(s.lines, (l) => l.msg === 'discovery: a listed instance is healthy; the kept instances leave', 'the release logged', from)).toMatchObject({ removed: [w0] })
    expect(await reached(router, 10)).toEqual(new Set([dead]))
    expect(s.endpoint.instances.has(w0)).toBe(false)
  })

  it('a reload starts, stops or keeps each source: a changed one takes its instances with it', async () => {
    fleet = await startSimFleet({ instances: 3, profile: 'tiny' })
    const [w0, w1, w2] = fleet.urls as [string, string, string]
    const a = join(dir, 'a.yaml')
    const b = join(dir, 'b.yaml')
    writeFileSync(a, `- ${w0}\n`)
    writeFileSync(b, `- ${w1}\n`)
    const s = await startDiscoveryRouter([{ type: 'file', path: a }])
    router = s.router
    expect(members(router)).toEqual([w0])
    const reload = (endpoint: Record<string, unknown>) => router!.reload({ ...router!.config, endpoints: [{ name: 'default', instances: [], routing: {}, ...endpoint }] as never })

    let from = s.lines.length
    reload({ discovery: [{ type: 'file', path: b }] })
    await untilMembers(router, [w1])
    const changes = s.lines.slice(from).filter(membershipChange)
    expect(changes).toEqual(expect.arrayContaining([expect.objectContaining({ source: `file ${a}`, removed: [w0] }), expect.objectContaining({ source: `file ${b}`, added: [w1] })]))
    // The old source is stopped: its file no longer counts. Two edits of b, each seen, made
    // after a's edit in the same directory, give a live watcher of a time to act on it.
    saveByRename(a, `- ${w2}\n`)
    saveByRename(b, `- ${w1}\n- ${w0}\n`)
    await untilMembers(router, [w0, w1])
    saveByRename(b, `- ${w1}\n`)
    await untilMembers(router, [w1])
    expect(s.lines.filter(membershipChange).some((l) => (l.added as string[]).includes(w2))).toBe(false)

    // Static instances with the same source: the source keeps running, its list stays.
    from = s.lines.length
    reload({ instances: [{ url: w0, weight: 1, models: [] }], discovery: [{ type: 'file', path: b }] })
    await untilMembers(router, [w0, w1])
    expect(s.lines.slice(from).filter(membershipChange)).toEqual([])
    // No sources at all: only the static instance.
    reload({ instances: [{ url: w0, weight: 1, models: [] }] })
    await untilMembers(router, [w0])
  })

  it('a request in flight on an instance that leaves finishes there; its connections close after', async () => {
    // The gated worker answers a stream's headers and then holds every token until opened.
    const clock = new GatedClock()
    const gated = new SimWorker({ id: 'gated', index: 0, sim: resolveSim({ profile: 'tiny' }), clock })
    extra.push(gated)
    await gated.start()
    fleet = await startSimFleet({ instances: 1, profile: 'tiny' })
    const other = fleet.urls[0]!
    const path = join(dir, 'fleet.json')
    writeFileSync(path, JSON.stringify([gated.url]))
    const s = await startDiscoveryRouter([{ type: 'file', path }])
    router = s.router
    const inst = s.endpoint.instances.get(gated.url)!

    const answer = fetch(`${router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chat('a long answer', { model: MODEL, max_tokens: 8, stream: true }),
    })
    await until(() => s.endpoint.router.inFlight(gated.url) === 1, 10_000, 'the stream open on the gated worker')

    saveByRename(path, JSON.stringify([{ url: other }]))
    await untilMembers(router, [other])
    await untilLog(s.lines, (l) => membershipChange(l) && (l.removed as string[]).includes(gated.url), 'the removal logged')
    // Out of routing at once: new requests go to the instance that stays.
    const r = await post(`${router.url}/v1/chat/completions`, chat('a new conversation', { model: MODEL, max_tokens: 1 }))
    expect(r.status).toBe(200)
    expect(r.headers.get('x-prefix-router-instance')).toBe(other)
    // Still open: its stream has not finished.
    expect((inst.dispatcher as Pool).closed).toBe(false)

    clock.open()
    const res = await answer
    expect(res.status).toBe(200)
    expect(res.headers.get('x-prefix-router-instance')).toBe(gated.url)
    const text = await res.text()
    expect(text).toMatch(/data: \[DONE\]\s*$/)
    expect(text).not.toMatch(/"error"/)
    await until(() => (inst.dispatcher as Pool).closed, 10_000, 'the removed instance closed')
  })
})

process.on('exit', () => rmSync(dir, { recursive: true, force: true }))
