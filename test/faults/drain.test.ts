// The drain hooks of the front server, on a second front in front of a router's core: after
// beginDrain HTTP/1.1 answers close their connections and HTTP/2 sessions get GOAWAY while new
// connections are still taken; stopAccepting closes the port and what is idle; destroyAll
// ends the rest. Busy requests always finish.
import http2 from 'node:http2'
import net from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { handle } from '../../src/proxy/handler.js'
import { listenFront, type FrontServer } from '../../src/proxy/server.js'
import { until } from '../proxy/helpers.js'
import { chatBody, h1Post, h2Post, raw, useSimRouter, type Raw } from './front-helpers.js'

const ctx = useSimRouter()
let front: FrontServer | undefined
afterEach(async () => {
  await front?.close()
  front = undefined
})

async function startFront(): Promise<{ url: string; front: FrontServer }> {
  const router = await ctx.start()
  front = await listenFront({ ...router.config, listen: { host: '127.0.0.1', port: 0 } }, (req, res) => void handle(router, req, res))
  return { url: `http://127.0.0.1:${front.address.port}`, front }
}

// Long enough (about a thousand 2 ms steps) to be mid-answer when the test acts.
const longStream = chatBody('a long answer', { stream: true, max_tokens: 1000 })

/** Sends a request and waits for `wait` in its answer. */
async function h1(s: Raw, body: string, wait: string): Promise<void> {
  const from = s.received.length
  s.socket.write(h1Post(body))
  await s.waitFor(wait, from)
}

const answers = (s: Raw) => s.received.split(/(?=HTTP\/1\.1 \d{3} )/)

describe('beginDrain', () => {
  it('HTTP/1.1: later answers say Connection: close and close; new connections are still taken', async () => {
    const { url, front } = await startFront()
    const a = await raw(url)
    await h1(a, chatBody('before'), '"chat.completion"')
    expect(answers(a)[0]).toMatch(/\r\nConnection: keep-alive\r\n/i)
    front.beginDrain()
    await h1(a, chatBody('after'), '"chat.completion"')
    await a.closed
    expect(answers(a)[1]).toMatch(/^HTTP\/1\.1 200 [^]*\r\nConnection: close\r\n/i)
    const b = await raw(url)
    await h1(b, chatBody('new connection'), '"chat.completion"')
    await b.closed
    expect(b.received).toMatch(/^HTTP\/1\.1 200 [^]*\r\nConnection: close\r\n/i)
  })

  it('HTTP/1.1: an answer begun before the drain finishes, then its connection closes', async () => {
    const { url, front } = await startFront()
    const a = await raw(url)
    await h1(a, longStream, 'data: ')
    expect(a.received).toMatch(/\r\nConnection: keep-alive\r\n/i)
    front.beginDrain()
    await a.closed
    expect(a.received).toContain('data: [DONE]')
  })

  it('HTTP/2: an open session gets GOAWAY and its stream finishes; a later session gets GOAWAY after its first stream', async () => {
    const { url, front } = await startFront()
    const s1 = http2.connect(url)
    const events: string[] = []
    s1.on('goaway', () => events.push('goaway'))
    const closed1 = new Promise((r) => s1.once('close', r))
    let started!: () => void
    const answering = new Promise<void>((r) => (started = r))
    const done = h2Post(s1, longStream, () => events.push('end'), started)
    await answering
    front.beginDrain()
    const r1 = await done
    await closed1
    expect(r1.status).toBe(200)
    expect(r1.body).toContain('data: [DONE]')
    expect(events[0]).toBe('goaway')

    const s2 = http2.connect(url)
    const goaway2 = new Promise((r) => s2.once('goaway', r))
    const closed2 = new Promise((r) => s2.once('close', r))
    const r2 = await h2Post(s2, chatBody('a session opened while draining'))
    expect(r2.status).toBe(200)
    await goaway2
    await closed2
  })
})

describe('stopAccepting and destroyAll', () => {
  it('the port closes, idle connections and sessions close, busy ones finish; destroyAll ends the rest', async () => {
    const { url, front } = await startFront()
    const idle = await raw(url)
    await h1(idle, chatBody('idle h1'), '"chat.completion"')
    const session = http2.connect(url)
    const sessionClosed = new Promise((r) => session.once('close', r))
    expect((await h2Post(session, chatBody('idle h2'))).status).toBe(200)
    const busy = await raw(url)
    await h1(busy, longStream, 'data: ')
    const silent = await raw(url) // sends nothing: closed only by its headers timeout (15 s) or destroyAll
    await until(() => front.openConnections() === 4, 30_000, 'four connections')

    await front.stopAccepting()
    const refused = await new Promise<string>((resolve) => {
      const c = net.connect(Number(new URL(url).port), '127.0.0.1')
      c.once('connect', () => resolve('connected'))
      c.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'))
    })
    expect(refused).toBe('ECONNREFUSED')
    await idle.closed
    await sessionClosed
    await busy.closed
    expect(busy.received).toContain('data: [DONE]')
    await until(() => front.openConnections() === 1, 30_000, 'only the silent connection left')

    front.destroyAll()
    await silent.closed
    expect(silent.received).toBe('')
    await until(() => front.openConnections() === 0, 30_000, 'no connection left')
  })
})
