// Set-up for the endpoint picker's tests: simulator pods on loopback, the picker in front of
// them on a free gRPC port, the test gateway, and the check every test ends with (no stream
// open, every in-flight count back to 0).
import type { Logger } from 'pino'
import { afterEach, expect } from 'vitest'
import { EppServer, type EppOptions } from '../../src/epp/server.js'
import type { BodyMode } from '../../src/epp/exchange.js'
import { startSimFleet, type SimFleet } from '../../src/sim/index.js'
import { testConfig, totalInFlight, until } from '../proxy/helpers.js'
import { TestGateway, tlsTrusting } from './gateway.js'

export const MODEL = 'sim-tiny'

export interface Rig {
  fleet: SimFleet
  epp: EppServer
  gw: TestGateway
  /** host:port of each pod, in the order of fleet.urls. */
  pods: string[]
}

const open: Rig[] = []

export async function startRig(n: number, mode: BodyMode = 'streamed', overrides: Record<string, unknown> = {}, urls?: string[], logger?: Logger, extra: Pick<EppOptions, 'tls' | 'healthPort' | 'maxStreams'> = {}): Promise<Rig> {
  const fleet = await startSimFleet({ instances: n, profile: 'tiny' })
  const instances = urls ?? fleet.urls
  const epp = await EppServer.start(testConfig([{ name: 'default', instances }], { log: { level: 'silent' }, ...overrides }), { grpcHost: '127.0.0.1', grpcPort: 0, bodyMode: mode, ...(logger && { logger }), ...extra })
  // Over TLS the gateway trusts the picker's certificate (its names include 127.0.0.1).
  const gw = new TestGateway(epp.grpcAddress, mode, ...(extra.tls ? [tlsTrusting(extra.tls.cert)] : []))
  const rig = { fleet, epp, gw, pods: fleet.urls.map((u) => new URL(u).host) }
  open.push(rig)
  return rig
}

export const inFlight = (r: Rig) => totalInFlight(r.epp.runtime)

/** Every stream ended and every lease released: waited for, not slept for. */
export async function settled(r: Rig): Promise<void> {
  await until(() => r.epp.exchanges.size === 0 && inFlight(r) === 0, 5000, 'streams ended and leases released')
}

export function useRigs(): void {
  afterEach(async () => {
    for (const r of open.splice(0)) {
      await settled(r)
      expect(inFlight(r)).toBe(0)
      r.gw.close()
      await r.epp.close()
      await r.fleet.close()
    }
  })
}

export const chatBody = (content: string, extra: Record<string, unknown> = {}) => JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 2, ...extra })
