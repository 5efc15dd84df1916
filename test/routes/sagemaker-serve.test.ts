// The SageMaker runtime SDK against `prefix-router serve` as an operator runs it (a child
// process, a configuration file naming the endpoint), in front of simulated vLLM workers.
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { InvokeEndpointCommand, InvokeEndpointWithResponseStreamCommand, SageMakerRuntimeClient } from '@aws-sdk/client-sagemaker-runtime'
import { afterEach, expect, it } from 'vitest'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { freePort } from '../helpers/ports.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))
let fleet: SimFleet | undefined
let child: ChildProcess | undefined
let dir: string | undefined
afterEach(async () => {
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child!.once('exit', r))
    child.kill('SIGTERM')
    await exited
  }
  await fleet?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
  child = fleet = dir = undefined
})

/** Resolves once the router answers /ping; rejects if the process exits first. */
async function ready(url: string, proc: ChildProcess, stderr: () => string): Promise<void> {
  let exited = false
  proc.once('exit', () => (exited = true))
  for (;;) {
    if (exited) throw new Error(`serve exited:\n${stderr()}`)
    try {
      if ((await fetch(`${url}/ping`)).ok) return
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 20))
  }
}

it('InvokeEndpoint and InvokeEndpointWithResponseStream through serve', async () => {
  fleet = await startSimFleet({ instances: 2, profile: 'tiny' })
  dir = mkdtempSync(join(tmpdir(), 'pr-sagemaker-'))
  const config = join(dir, 'router.yaml')
  writeFileSync(config, `endpoints:\n  - name: my-llm-endpoint\n    instances: [${fleet.urls.join(', ')}]\n`)
  const port = await freePort()
  child = spawn(process.execPath, [cli, 'serve', '--config', config, '--host', '127.0.0.1', '--port', String(port), '--admin-port', '0', '--log-level', 'warn', '--drain-delay-ms', '0'])
  let stderr = ''
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()))
  const url = `http://127.0.0.1:${port}`
  await ready(url, child, () => stderr)

  const client = new SageMakerRuntimeClient({ endpoint: url, region: 'eu-west-1', credentials: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'not-a-secret' }, maxAttempts: 1 })
  try {
    const body = JSON.stringify({ messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 3 })
    const whole = await client.send(new InvokeEndpointCommand({ EndpointName: 'my-llm-endpoint', ContentType: 'application/json', Body: body, PrefixAwareId: 'customer-1' }))
    expect(whole.InvokedProductionVariant).toBe('AllTraffic')
    expect(JSON.parse(Buffer.from(whole.Body).toString('utf8')).choices[0].message.content).toBe('Lorem ipsum ')

    const streamed = await client.send(
      new InvokeEndpointWithResponseStreamCommand({ EndpointName: 'my-llm-endpoint', ContentType: 'application/json', Body: JSON.stringify({ ...JSON.parse(body), stream: true }), PrefixAwareId: 'customer-1' }),
    )
    let text = ''
    for await (const event of streamed.Body!) text += Buffer.from(event.PayloadPart!.Bytes!).toString('utf8')
    const deltas = text.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)).choices[0]?.delta?.content ?? '')
    expect(deltas.join('')).toBe('Lorem ipsum ')
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true)
  } finally {
    client.destroy()
  }
})
