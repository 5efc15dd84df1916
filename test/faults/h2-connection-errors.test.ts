// HTTP/2 sessions that nghttp2 ends with a connection error: a flood of streams each reset at
// once (rapid reset: GOAWAY INTERNAL_ERROR) or a malformed frame (GOAWAY PROTOCOL_ERROR,
// FRAME_SIZE_ERROR). nghttp2 then stops reading the socket and Node never closes it, so the
// client's FIN went unseen and the socket sat in CLOSE-WAIT, counted against maxConnections,
// until the session's keep-alive timer. The timeouts here are long so that only the router
// noticing the dead session can free its place; every wait is for a count, not for a time.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import http2 from 'node:http2'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import type { ProxyServer } from '../../src/proxy/proxy.js'
import { until } from '../proxy/helpers.js'
import { GOAWAY, PREFACE, chatBody, h2Post, raw, useSimRouter } from './front-helpers.js'

const dir = mkdtempSync(join(tmpdir(), 'pr-h2-errors-'))
execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' })
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const SESSIONS = 5
const LONG = { headersTimeoutMs: 120_000, keepAliveTimeoutMs: 120_000 }
const CAPPED = { limits: { ...LONG, maxConnections: SESSIONS } }
const TLS = { ...CAPPED, tls: { cert: join(dir, 'cert.pem'), key: join(dir, 'key.pem') } }
const ctx = useSimRouter()

async function frontConnections(router: ProxyServer): Promise<number> {
  const text = await (await fetch(`${router.adminUrl}/metrics`)).text()
  const m = /^prefix_router_front_connections (\d+)$/m.exec(text)
  if (!m) throw new Error('prefix_router_front_connections missing from /metrics')
  return Number(m[1])
}

/**
 * Opens streams and resets each at once until the router answers GOAWAY; then destroys the
 * socket, as a client (or an attacker) does. Resolves with the GOAWAY's error code.
 */
function rapidReset(url: string): Promise<number> {
  const session = http2.connect(url, { rejectUnauthorized: false })
  session.on('error', () => {})
  return new Promise((resolve, reject) => {
    session.once('goaway', (code: number) => {
      session.destroy()
      resolve(code)
    })
    session.once('close', () => reject(new Error('closed without GOAWAY')))
    const flood = () => {
      for (let i = 0; i < 200 && !session.closed && !session.destroyed; i++) {
        const s = session.request({ ':method': 'POST', ':path': '/v1/chat/completions' })
        s.on('error', () => {})
        s.close(http2.constants.NGHTTP2_CANCEL)
      }
      // The next batch once the router has acknowledged a PING: a client that only writes
      // (over TLS, where its writes complete later) never reads, and never sees the GOAWAY.
      if (!session.closed && !session.destroyed) session.ping((err) => err === null && flood())
    }
    session.once('connect', flood)
  })
}

const frame = (type: number, id: number, payload: Buffer) => {
  const h = Buffer.alloc(9)
  h.writeUIntBE(payload.length, 0, 3)
  h[3] = type
  h.writeUInt32BE(id, 5)
  return Buffer.concat([h, payload])
}
const SETTINGS = frame(4, 0, Buffer.alloc(0))

/** A preface, then `bad`; resolves with the GOAWAY's error code once it arrives, after destroying the socket. */
async function protocolError(url: string, bad: Buffer): Promise<number> {
  const s = await raw(url)
  s.socket.write(Buffer.concat([Buffer.from(PREFACE, 'latin1'), SETTINGS]))
  s.socket.write(bad)
  for (;;) {
    const b = Buffer.from(s.received, 'latin1')
    for (let at = 0; at + 9 <= b.length; at += 9 + b.readUIntBE(at, 3)) {
      if (b[at + 3] === GOAWAY && at + 17 <= b.length) {
        s.socket.destroy()
        return b.readUInt32BE(at + 13)
      }
    }
    await new Promise<void>((r, j) => {
      s.socket.once('data', () => r())
      void s.closed.then(() => j(new Error('closed without GOAWAY')))
    })
  }
}

/** Every place is free again, and a new client is served. */
async function servedAfter(router: ProxyServer): Promise<void> {
  await until(async () => (await frontConnections(router)) === 0, 30_000, 'front connections back to 0')
  const session = http2.connect(router.url, { rejectUnauthorized: false })
  try {
    expect((await h2Post(session, chatBody('after the flood'))).status).toBe(200)
  } finally {
    session.close()
  }
}

describe('HTTP/2 sessions ended by a connection error are closed', () => {
  it('h2c: rapid reset, five sessions under a cap of five', async () => {
    const router = await ctx.start(CAPPED)
    for (let i = 0; i < SESSIONS; i++) expect(await rapidReset(router.url)).not.toBe(http2.constants.NGHTTP2_NO_ERROR)
    await servedAfter(router)
  })

  it('TLS: rapid reset, five sessions under a cap of five', async () => {
    const router = await ctx.start(TLS)
    for (let i = 0; i < SESSIONS; i++) expect(await rapidReset(router.url)).not.toBe(http2.constants.NGHTTP2_NO_ERROR)
    await servedAfter(router)
  })

  it('h2c: malformed frames (DATA on stream 0, a 7-byte PING)', async () => {
    const router = await ctx.start(CAPPED)
    const { NGHTTP2_PROTOCOL_ERROR, NGHTTP2_FRAME_SIZE_ERROR } = http2.constants
    for (let i = 0; i < 2; i++) expect(await protocolError(router.url, frame(0, 0, Buffer.alloc(4)))).toBe(NGHTTP2_PROTOCOL_ERROR)
    for (let i = 0; i < 3; i++) expect(await protocolError(router.url, frame(6, 0, Buffer.alloc(7)))).toBe(NGHTTP2_FRAME_SIZE_ERROR)
    await servedAfter(router)
  })

  it('a session that ends cleanly is left to finish its streams', async () => {
    // The check must not take a healthy session for a dead one: a stream open across many checks completes.
    const router = await ctx.start({ limits: LONG }, { faults: { delayMs: 2500 } })
    const session = http2.connect(router.url)
    try {
      const res = await h2Post(session, chatBody('slow but alive'))
      expect(res.status).toBe(200)
      expect((await h2Post(session, chatBody('and again'))).status).toBe(200)
    } finally {
      session.close()
    }
  })
})
