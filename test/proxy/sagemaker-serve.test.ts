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

/** serve's front URL, from the line it prints once it routes; rejects if it exits first. */
function listening(proc: ChildProcess): Promise<string> {
  let stderr = ''
  return new Promise((resolve, reject) => {
    proc.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString()
      const m = /on (http:\/\/[\d.:]+) \(admin/.exec(stderr)
      if (m) resolve(m[1]!)
    })
    proc.once('exit', (code) => reject(new Error(`serve exited with ${code}:\n${stderr}`)))
  })
}

it('InvokeEndpoint and InvokeEndpointWithResponseStream through serve', async () => {
  fleet = await startSimFleet({ instances: 2, profile: 'tiny' })
  dir = mkdtempSync(join(tmpdir(), 'pr-sagemaker-'))
  const config = join(dir, 'router.yaml')
  writeFileSync(config, `endpoints:\n  - name: my-llm-endpoint\n    instances: [${fleet.urls.join(', ')}]\n`)
  // Port 0, and the URL from serve itself: a port found free here could be taken by another
  // test's server before serve binds it, and the requests would then go there.
  child = spawn(process.execPath, [cli, 'serve', '--config', config, '--host', '127.0.0.1', '--port', '0', '--admin-port', '0', '--log-level', 'warn', '--drain-delay-ms', '0'])
  const url = await listening(child)

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
