// --workers as a setting, and a reload reaching every worker.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { availableParallelism, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { until } from '../proxy/helpers.js'
import { clientsOnDistinctWorkers, holdingStub, metrics, metricSum, serve, type Client, clusterFixture } from './helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
const dir = mkdtempSync(join(tmpdir(), 'pr-cluster-'))
const f = clusterFixture()
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe('serve --workers', () => {
  it('refuses a count that is not one, naming what was typed', () => {
    for (const [args, env, from] of [
      [['--workers', '0'], {}, '--workers'],
      [['--workers', 'many'], {}, '--workers'],
      [[], { PREFIX_ROUTER_WORKERS: '2.5' }, 'PREFIX_ROUTER_WORKERS'],
    ] as const) {
      const r = spawnSync(process.execPath, [cli, 'serve', '--upstream', 'http://127.0.0.1:1', ...args], { encoding: 'utf8', env: { ...process.env, ...env } })
      expect(r.status, r.stderr).toBe(2)
      expect(r.stderr).toMatch(new RegExp(`workers: must be auto or a whole number of processes from 1 to 63; got "[^"]+" \\(from ${from}\\)`))
    }
  })

  it('auto: one worker per core available, or the single process on one core', async () => {
    f.stubs = [await holdingStub('a')]
    f.served = await serve(['--workers', 'auto', '--upstream', f.stubs[0]!.url])
    const n = availableParallelism()
    if (n === 1) {
      expect(f.served.stderr()).not.toMatch(/worker processes/)
      expect(metricSum(await metrics(f.served.admin), 'prefix_router_workers')).toBe(0)
    } else {
      expect(f.served.stderr()).toMatch(new RegExp(`in ${n} worker processes on `))
      expect(metricSum(await metrics(f.served.admin), 'prefix_router_workers')).toBe(n)
    }
  })

  it('SIGHUP in the primary reloads every worker: both route with the new strategy', async () => {
    f.stubs = await Promise.all(['a', 'b'].map((n) => holdingStub(n)))
    const file = join(dir, 'router.yaml')
    const write = (strategy: string) =>
      writeFileSync(file, `routing: { strategy: ${strategy} }\nendpoints:\n  - name: default\n    instances: [${f.stubs.map((s) => s.url).join(', ')}]\n`)
    write('prefix_aware')
    f.served = await serve(['--workers', '2', '--config', file])
    const workers = await clientsOnDistinctWorkers(f.served.url, 2)
    f.clients.push(...workers.map((w) => w.client))
    const decision = async (c: Client) => (await c.chat('a prompt '.repeat(20))).headers['x-prefix-router-decision']
    for (const { client } of workers) expect(await decision(client)).toBe('target')

    write('least_outstanding_requests')
    f.served.child.kill('SIGHUP')
    for (const { client } of workers) await until(async () => (await decision(client)) === 'least_outstanding_requests', 50_000, 'the new strategy in each worker')

    // POST /admin/reload does the same, and a bad file changes nothing anywhere.
    write('random')
    expect((await fetch(`${f.served.admin}/admin/reload`, { method: 'POST' })).status).toBe(200)
    for (const { client } of workers) await until(async () => (await decision(client)) === 'random', 50_000, 'random in each worker')
    writeFileSync(file, 'routing: { prefixLength: 5 }\n')
    expect((await fetch(`${f.served.admin}/admin/reload`, { method: 'POST' })).status).toBe(400)
    for (const { client } of workers) expect(await decision(client)).toBe('random')
    expect(f.served.child.exitCode).toBeNull()
  })
})
