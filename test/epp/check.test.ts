// `prefix-router epp-check HOST:PORT` (dist/cli.js) against real pickers on loopback, over
// TLS and in plaintext, in both body modes: it sends a chat through the picker and the pod it
// names, and says what is wrong when the two sides do not speak the same way.
import { spawn } from 'node:child_process'
import { createServer, type AddressInfo } from 'node:net'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { selfSignedPair } from '../../src/epp/tls.js'
import { MODEL, startRig, useRigs } from './helpers.js'

const cli = fileURLToPath(new URL('../../dist/cli.js', import.meta.url))

useRigs()

function eppCheck(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const c = spawn(process.execPath, [cli, 'epp-check', ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  c.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
  c.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
  return new Promise((resolve) => c.once('close', (status) => resolve({ status, stdout, stderr })))
}

const answered = (address: string, how: string, pods: string[]) =>
  new RegExp(`^the picker at ${address.replace(/\./g, '\\.')} \\(${how}\\) chose (${pods.map((p) => p.replace(/\./g, '\\.')).join('|')}) \\(header and metadata agree\\)\\n\\1 answered 200 through the picker: \\{"id":"chatcmpl-`)

describe('prefix-router epp-check', () => {
  it('over TLS to an IP address (the default): the chat goes through, with no warning (DEP0123) on stderr', async () => {
    const r = await startRig(2, 'streamed', {}, undefined, undefined, { tls: await selfSignedPair() })
    const out = await eppCheck([r.epp.grpcAddress, '--model', MODEL])
    expect(out.stderr).toBe('')
    expect(out.stdout).toMatch(answered(r.epp.grpcAddress, 'TLS, streamed bodies', r.pods))
    expect(out.status).toBe(0)
  })

  it('in plaintext, and with buffered bodies', async () => {
    const plain = await startRig(1)
    const a = await eppCheck([plain.epp.grpcAddress, '--tls', 'off', '--model', MODEL, '--content', 'hello'])
    expect([a.status, a.stderr]).toEqual([0, ''])
    expect(a.stdout).toMatch(answered(plain.epp.grpcAddress, 'plaintext, streamed bodies', plain.pods))
    const buffered = await startRig(1, 'buffered')
    const b = await eppCheck([buffered.epp.grpcAddress, '--tls', 'off', '--body-mode', 'buffered', '--model', MODEL])
    expect([b.status, b.stderr]).toEqual([0, ''])
    expect(b.stdout).toMatch(answered(buffered.epp.grpcAddress, 'plaintext, buffered bodies', buffered.pods))
  })

  it('plaintext to a TLS picker, TLS to a plaintext one: says which the picker speaks and the flag to use', async () => {
    const tls = await startRig(1, 'streamed', {}, undefined, undefined, { tls: await selfSignedPair(), healthPort: 0 })
    const plain = await startRig(1)
    const a = await eppCheck([tls.epp.grpcAddress, '--tls', 'off'])
    expect([a.status, a.stdout, a.stderr]).toEqual([1, '', `prefix-router: the picker at ${tls.epp.grpcAddress} speaks TLS (epp's default), not plaintext: use --tls on\n`])
    const b = await eppCheck([plain.epp.grpcAddress])
    expect([b.status, b.stdout, b.stderr]).toEqual([1, '', `prefix-router: the picker at ${plain.epp.grpcAddress} speaks plaintext (epp --grpc-tls off), not TLS: use --tls off\n`])
    // The plaintext health port beside a TLS picker answers gRPC, but not ext_proc.
    const c = await eppCheck([tls.epp.healthAddress!, '--tls', 'off'])
    expect([c.status, c.stderr]).toEqual([1, `prefix-router: ${tls.epp.healthAddress} speaks gRPC but not ext_proc: the picker's health port? ext_proc is on its --grpc-port (default 9002)\n`])
  })

  it('a body mode other than the picker’s, and a port nobody listens on', async () => {
    const buffered = await startRig(1, 'buffered')
    const a = await eppCheck([buffered.epp.grpcAddress, '--tls', 'off', '--model', MODEL])
    expect([a.status, a.stderr]).toEqual([1, 'prefix-router: the picker did not hand the request body back (streamed mode): is it running with --body-mode buffered? Use --body-mode buffered here too\n'])
    const streamed = await startRig(1)
    // A streamed picker waits for the body a buffered gateway holds back: the check's own timeout ends it.
    const b = await eppCheck([streamed.epp.grpcAddress, '--tls', 'off', '--body-mode', 'buffered', '--timeout-ms', '1000'])
    expect([b.status, b.stderr]).toEqual([
      1,
      `prefix-router: no answer from the picker at ${streamed.epp.grpcAddress} within 1000 ms: in buffered mode the picker answers the headers first; one running with --body-mode streamed waits for the body: try --body-mode streamed\n`,
    ])
    const free = createServer()
    await new Promise<void>((res) => free.listen(0, '127.0.0.1', res))
    const port = (free.address() as AddressInfo).port
    await new Promise((res) => free.close(res))
    const c = await eppCheck([`127.0.0.1:${port}`])
    expect([c.status, c.stderr]).toEqual([1, `prefix-router: nothing listens at 127.0.0.1:${port} (connection refused)\n`])
  })

  it('--help; a bad address or value is one line naming it, exit 2', async () => {
    const help = await eppCheck(['--help'])
    expect([help.status, help.stderr]).toEqual([0, ''])
    expect(help.stdout).toMatch(/^usage: prefix-router epp-check HOST:PORT/)
    for (const [args, message] of [
      [[], "give one picker address, HOST:PORT; got none (see --help)"],
      [['127.0.0.1'], "the picker's address must be HOST:PORT (a port 1-65535); got '127.0.0.1'"],
      [['127.0.0.1:9002', '--tls', 'yes'], "--tls must be on or off; got 'yes'"],
      [['127.0.0.1:9002', '--body-mode', 'chunked'], "--body-mode must be streamed or buffered; got 'chunked'"],
      [['127.0.0.1:9002', '--timeout-ms', '0'], "--timeout-ms must be an integer from 1 to 600000; got '0'"],
    ] as const) {
      const r = await eppCheck([...args])
      expect([r.status, r.stderr], args.join(' ')).toEqual([2, `prefix-router: ${message}\n`])
    }
  })
})
