// Instances behind an API key (vLLM --api-key, here the simulator's): /v1/models answers 401
// to a probe without the key. The router must say so (the instance's error, a log line naming
// the setting), send the key configured in probeAuth with its probes only, never show the key,
// and forward a client's own Authorization unchanged.
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { ConfigError, parseConfig } from '../../src/config/config.js'
import { ProxyServer } from '../../src/proxy/proxy.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { capturedLog } from '../faults/log-lines.js'
import { chat, post, startStub, testConfig, type Stub } from '../proxy/helpers.js'

const KEY = 'sk-probe-secret-1234'
const dir = mkdtempSync(join(tmpdir(), 'probe-auth-'))

let sim: SimFleet | undefined
let stub: Stub | undefined
let router: ProxyServer | undefined
afterEach(async () => {
  await router?.close()
  await sim?.close()
  await stub?.close()
  router = sim = stub = undefined
})

interface AdminInstance {
  id: string
  healthy: boolean
  models: string[]
  lastError: string | null
}

async function instances(r: ProxyServer): Promise<{ text: string; list: AdminInstance[] }> {
  const text = await (await fetch(`${r.adminUrl}/admin/instances`)).text()
  return { text, list: (JSON.parse(text) as { endpoints: { instances: AdminInstance[] }[] }).endpoints[0]!.instances }
}

async function routerFor(urls: string[], overrides: Record<string, unknown> = {}) {
  const { logger, lines } = capturedLog()
  router = await ProxyServer.start(testConfig([{ name: 'default', instances: urls }], overrides), { logger })
  return { router, lines }
}

function tokenFile(content: string): string {
  const f = join(dir, `key-${Math.random().toString(36).slice(2)}`)
  writeFileSync(f, content)
  return f
}

describe('probes of instances behind an API key', () => {
  it('without probeAuth: the 401 on /v1/models is the instance’s error, naming the setting, and logged once', async () => {
    sim = await startSimFleet({ instances: 1, apiKey: KEY })
    const { router, lines } = await routerFor(sim.urls)
    await router.endpoint('default')!.owner!.probe()
    const [inst] = (await instances(router)).list
    // /health is open (as vLLM's is): the instance takes traffic, only its models are unknown.
    expect(inst!.healthy).toBe(true)
    expect(inst!.models).toEqual([])
    expect(inst!.lastError).toMatch(/GET \/v1\/models\) answered 401: the instance wants an API key .*probeAuth\.tokenFile or probeAuth\.tokenEnv \(--probe-token-file, --probe-token-env\)/)
    const warned = lines.filter((l) => l.msg === 'model discovery failed')
    expect(warned).toHaveLength(1)
    expect(warned[0]).toMatchObject({ level: 40, instance: sim.urls[0], reason: inst!.lastError })
  })

  it('probeAuth.tokenFile: models are discovered; the key is never logged nor shown', async () => {
    sim = await startSimFleet({ instances: 1, apiKey: KEY, model: 'guarded-model' })
    const { router, lines } = await routerFor(sim.urls, { probeAuth: { tokenFile: tokenFile(`${KEY}\n`) }, log: { level: 'trace' } })
    const { text, list } = await instances(router)
    expect(list[0]!.models).toEqual(['guarded-model'])
    expect(list[0]!.lastError).toBeNull()
    // A client with the key gets its answer; one without is refused by the instance (401
    // passed through): the router does not lend its probe key to clients.
    expect((await post(`${router.url}/v1/chat/completions`, chat('with key', { model: 'guarded-model' }), { authorization: `Bearer ${KEY}` })).status).toBe(200)
    const without = await post(`${router.url}/v1/chat/completions`, chat('no key', { model: 'guarded-model' }))
    expect([without.status, without.text]).toEqual([401, '{"error":"Unauthorized"}'])
    expect(text).not.toContain(KEY)
    expect(JSON.stringify(lines)).not.toContain(KEY)
  })

  it('the probes send the key; client requests reach the instance with their own Authorization, or none', async () => {
    stub = await startStub('guarded', (req, res) => {
      if (req.url === '/v1/models') {
        const ok = req.headers.authorization === `Bearer ${KEY}`
        res.writeHead(ok ? 200 : 401, { 'content-type': 'application/json' })
        return res.end(ok ? JSON.stringify({ data: [{ id: 'm' }] }) : '{"error":"Unauthorized"}')
      }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{}')
    })
    process.env.PROBE_AUTH_TEST_KEY = KEY
    try {
      const { router } = await routerFor([stub.url], { probeAuth: { tokenEnv: 'PROBE_AUTH_TEST_KEY' } })
      expect((await instances(router)).list[0]!.models).toEqual(['m'])
      await post(`${router.url}/v1/chat/completions`, chat('a'), { authorization: 'Bearer client-own-key' })
      await post(`${router.url}/v1/chat/completions`, chat('b'))
    } finally {
      delete process.env.PROBE_AUTH_TEST_KEY
    }
    const probes = stub.seen.filter((s) => s.url === '/health' || s.url === '/v1/models' || s.url === '/metrics')
    expect(probes.length).toBeGreaterThan(0)
    for (const p of probes) expect(p.headers.authorization).toBe(`Bearer ${KEY}`)
    const clients = stub.seen.filter((s) => s.url === '/v1/chat/completions')
    expect(clients.map((c) => c.headers.authorization)).toEqual(['Bearer client-own-key', undefined])
  })

  it('a refused key is the error, naming where it came from; a rotated file is read again after the 401', async () => {
    sim = await startSimFleet({ instances: 1, apiKey: KEY })
    const file = tokenFile('sk-wrong')
    const { router, lines } = await routerFor(sim.urls, { probeAuth: { tokenFile: file } })
    const before = (await instances(router)).list[0]!
    expect(before.lastError).toBe(`model discovery (GET /v1/models) answered 401 to the probe token from file ${file}: is it the instance's API key (probeAuth)?`)
    expect(before.lastError).not.toContain('sk-wrong')
    writeFileSync(file, KEY)
    // The next probe is refused with the old key and reads the file again; the one after uses the new key.
    await router.endpoint('default')!.owner!.probe()
    await router.endpoint('default')!.owner!.probe()
    const after = (await instances(router)).list[0]!
    expect(after.lastError).toBeNull()
    expect(after.models.length).toBeGreaterThan(0)
    expect(lines.filter((l) => l.msg === 'model discovery works again')).toHaveLength(1)
  })

  it('a reload whose key cannot be read is refused whole: the running endpoints keep their key', async () => {
    sim = await startSimFleet({ instances: 1, apiKey: KEY })
    const file = tokenFile(KEY)
    const { router } = await routerFor(sim.urls, { probeAuth: { tokenFile: file } })
    // The first endpoint's routing changes too: none of it may be applied.
    const running = router.endpoint('default')!.routing.strategy
    expect(running).not.toBe('random')
    const next = (probeAuth: unknown) => testConfig([{ name: 'default', instances: sim!.urls, routing: { strategy: 'random' } }, { name: 'second', instances: sim!.urls, probeAuth }], { probeAuth: { tokenFile: file } })
    expect(() => router.reload(next({ tokenEnv: 'PROBE_AUTH_TEST_UNSET' }))).toThrow(new ConfigError('endpoints[second].probeAuth.tokenEnv: the environment variable PROBE_AUTH_TEST_UNSET is not set (or empty)'))
    expect([...router.endpoints()].map((e) => e.name)).toEqual(['default'])
    expect(router.endpoint('default')!.routing.strategy).toBe(running)
    await router.endpoint('default')!.owner!.probe()
    expect((await instances(router)).list[0]!.lastError).toBeNull()
  })

  it('a key that cannot be read stops the start with the setting named; a bad probeAuth is refused', async () => {
    sim = await startSimFleet({ instances: 1 })
    const start = (probeAuth: unknown, ep: Record<string, unknown> = {}) => ProxyServer.start(testConfig([{ name: 'default', instances: sim!.urls, ...ep }], probeAuth === undefined ? {} : { probeAuth }), { logger: capturedLog().logger })
    await expect(start({ tokenEnv: 'PROBE_AUTH_TEST_UNSET' })).rejects.toThrow(new ConfigError('probeAuth.tokenEnv: the environment variable PROBE_AUTH_TEST_UNSET is not set (or empty)'))
    const missing = join(dir, 'absent')
    await expect(start(undefined, { probeAuth: { tokenFile: missing } })).rejects.toThrow(new ConfigError(`endpoints[default].probeAuth.tokenFile: cannot read '${missing}': ENOENT`))
    await expect(start({ tokenFile: tokenFile('  \n') })).rejects.toThrow(/probeAuth\.tokenFile: '.*' is empty/)
    expect(() => parseConfig({ probeAuth: { tokenFile: 'a', tokenEnv: 'B' } })).toThrow(/probeAuth: set one of tokenFile or tokenEnv/)
    expect(() => parseConfig({ probeAuth: {} })).toThrow(/probeAuth: set one of tokenFile or tokenEnv/)
    expect(() => parseConfig({ probeAuth: { tokenEnv: 'not a name' } })).toThrow(/probeAuth\.tokenEnv: must be an environment variable name/)
    expect(() => parseConfig({ probeAuth: { token: KEY } })).toThrow(/probeAuth: unknown key 'token'/)
  })
})
