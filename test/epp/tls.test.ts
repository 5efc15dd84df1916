// TLS on the picker's gRPC port: the gateway picks through it (trusting the certificate, or
// skipping verification as gateways are told to), the pair served is the one given and is
// replaced in place, plaintext clients are turned away, and grpc.health.v1 answers in
// plaintext on its own port for the kubelet.
import { X509Certificate } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { eppSettings } from '../../src/commands/epp.js'
import { checkPair, ReloadableTlsCredentials, selfSignedPair } from '../../src/epp/tls.js'
import { until } from '../proxy/helpers.js'
import { servedFingerprint, TestGateway, tlsSkipVerify } from './gateway.js'
import { chatBody, startRig, useRigs } from './helpers.js'

useRigs()

describe('the self-signed certificate', () => {
  it('is EC P-256, names the host, localhost and 127.0.0.1, is valid a year, and its key is its own', async () => {
    const pair = await selfSignedPair('picker-0')
    const x = new X509Certificate(pair.cert)
    expect(x.subject).toContain('CN=picker-0')
    expect(x.subjectAltName).toContain('DNS:picker-0')
    expect(x.subjectAltName).toContain('DNS:localhost')
    expect(x.subjectAltName).toContain('IP Address:127.0.0.1')
    expect(x.publicKey.asymmetricKeyDetails?.namedCurve).toBe('prime256v1')
    const days = (Date.parse(x.validTo) - Date.parse(x.validFrom)) / 86_400_000
    expect(days).toBeGreaterThanOrEqual(365)
    expect(days).toBeLessThanOrEqual(366)
    expect(() => checkPair(pair)).not.toThrow()
  })

  it("a key that is not the certificate's is refused, and the credentials keep the pair they had", async () => {
    const a = await selfSignedPair('a')
    const b = await selfSignedPair('b')
    expect(() => checkPair({ cert: a.cert, key: b.key })).toThrow()
    const creds = new ReloadableTlsCredentials(a)
    const before = creds.fingerprint256
    expect(() => creds.replace({ cert: a.cert, key: b.key })).toThrow()
    expect(creds.fingerprint256).toBe(before)
  })
})

describe('the picker over TLS', () => {
  it('picks for a gateway that trusts its certificate, and answers health over the same credentials', async () => {
    const pair = await selfSignedPair()
    const r = await startRig(2, 'streamed', {}, undefined, undefined, { tls: pair })
    expect(r.epp.tls).toBe(true)
    expect(await r.gw.health('readiness')).toBe('SERVING')
    const res = await r.gw.chat({ body: chatBody('over tls') })
    expect(r.pods).toContain(res.header)
    expect(res.status).toBe(200)
  })

  it('picks for a gateway that skips verification (insecureSkipVerify), and serves the pair it was given', async () => {
    const pair = await selfSignedPair('given')
    const r = await startRig(1, 'buffered', {}, undefined, undefined, { tls: pair })
    expect(await servedFingerprint(r.epp.grpcAddress)).toBe(new X509Certificate(pair.cert).fingerprint256)
    const gw = new TestGateway(r.epp.grpcAddress, 'buffered', tlsSkipVerify())
    try {
      const res = await gw.chat({ body: chatBody('skip verify') })
      expect(res.header).toBe(r.pods[0])
      expect(res.status).toBe(200)
    } finally {
      gw.close()
    }
  })

  it('a replaced pair is what new connections get; a bad one is refused and the old one stays served', async () => {
    const first = await selfSignedPair('first')
    const second = await selfSignedPair('second')
    const r = await startRig(1, 'streamed', {}, undefined, undefined, { tls: first })
    expect(await servedFingerprint(r.epp.grpcAddress)).toBe(new X509Certificate(first.cert).fingerprint256)
    r.epp.reloadTls(second)
    expect(await servedFingerprint(r.epp.grpcAddress)).toBe(new X509Certificate(second.cert).fingerprint256)
    expect(() => r.epp.reloadTls({ cert: first.cert, key: second.key })).toThrow()
    expect(await servedFingerprint(r.epp.grpcAddress)).toBe(new X509Certificate(second.cert).fingerprint256)
    expect(r.epp.tlsFingerprint).toBe(new X509Certificate(second.cert).fingerprint256)
  })

  it('turns a plaintext client away', async () => {
    const r = await startRig(1, 'streamed', {}, undefined, undefined, { tls: await selfSignedPair() })
    const plain = new TestGateway(r.epp.grpcAddress)
    try {
      expect(await plain.health('readiness')).toMatch(/^error /)
    } finally {
      plain.close()
    }
  })

  it('answers grpc.health.v1 in plaintext on its health port (the kubelet has no TLS), NOT_SERVING from the drain on', async () => {
    const r = await startRig(1, 'streamed', { drain: { delayMs: 300, timeoutMs: 1000 } }, undefined, undefined, { tls: await selfSignedPair(), healthPort: 0 })
    const probe = new TestGateway(r.epp.healthAddress!)
    try {
      expect(await probe.health('liveness')).toBe('SERVING')
      expect(await probe.health('readiness')).toBe('SERVING')
      const stopping = r.epp.shutdown()
      await until(async () => (await probe.health('readiness')) === 'NOT_SERVING', 5000, 'readiness to turn NOT_SERVING')
      await stopping
    } finally {
      probe.close()
    }
  })
})

describe('the picker in plaintext', () => {
  it('serves plaintext without a pair, and has no health port unless one is given', async () => {
    const r = await startRig(1)
    expect(r.epp.tls).toBe(false)
    expect(r.epp.healthAddress).toBeUndefined()
    expect(await r.gw.health('readiness')).toBe('SERVING')
  })
})

describe('the picker in plaintext, with a health port given', () => {
  it('answers health there too', async () => {
    const r = await startRig(1, 'streamed', {}, undefined, undefined, { healthPort: 0 })
    const probe = new TestGateway(r.epp.healthAddress!)
    try {
      expect(await probe.health('readiness')).toBe('SERVING')
    } finally {
      probe.close()
    }
  })
})

describe('the TLS settings', () => {
  it('TLS on and the health port 9003 by default; off: no health port unless given; the pair from flags or variables', () => {
    expect(eppSettings({}, {})).toMatchObject({ tls: true, healthPort: 9003, grpcPort: 9002 })
    expect(eppSettings({ 'grpc-tls': 'off' }, {})).not.toHaveProperty('healthPort')
    expect(eppSettings({ 'grpc-tls': 'off' }, {}).tls).toBe(false)
    expect(eppSettings({}, { PREFIX_ROUTER_GRPC_TLS: 'off', PREFIX_ROUTER_GRPC_HEALTH_PORT: '9010' })).toMatchObject({ tls: false, healthPort: 9010 })
    expect(eppSettings({ 'grpc-tls-cert': '/c.pem' }, { PREFIX_ROUTER_GRPC_TLS_KEY: '/k.pem' }).tlsFiles).toEqual({ cert: '/c.pem', key: '/k.pem', certFrom: '--grpc-tls-cert', keyFrom: 'PREFIX_ROUTER_GRPC_TLS_KEY' })
    expect(() => eppSettings({ 'grpc-tls-key': '/k.pem' }, {})).toThrow('--grpc-tls-cert and --grpc-tls-key go together; got only --grpc-tls-key')
  })
})
