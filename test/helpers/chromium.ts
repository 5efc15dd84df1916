// Debian's headless Chromium, driven over the Chrome DevTools Protocol: a WebSocket (undici's
// client, already a dependency) to the browser's debugging port, no browser package. Each
// browser gets a fresh profile directory, removed when it closes; one left running when the
// test process exits is killed.
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { WebSocket } from 'undici'

export const CHROMIUM = '/usr/bin/chromium'

/** Headless, and quiet: no GPU, no QUIC, no first-run pages, no calls home, no updates, no sync. */
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']

const running = new Set<ChildProcess>()
process.once('exit', () => {
  for (const c of running) c.kill('SIGKILL')
})

type Message = { id?: number; method?: string; params?: Record<string, unknown>; result?: Record<string, unknown>; error?: { message: string }; sessionId?: string }

/** One DevTools connection: commands by id, events to whoever listens. */
class Cdp {
  #next = 0
  readonly #pending = new Map<number, { resolve(r: Record<string, unknown>): void; reject(e: Error): void }>()
  readonly #listeners = new Set<(m: Message) => void>()

  constructor(readonly ws: WebSocket) {
    ws.addEventListener('message', (e) => {
      const m = JSON.parse(String(e.data)) as Message
      if (m.id !== undefined) {
        const p = this.#pending.get(m.id)
        this.#pending.delete(m.id)
        if (m.error) p?.reject(new Error(m.error.message))
        else p?.resolve(m.result ?? {})
      } else for (const l of this.#listeners) l(m)
    })
    ws.addEventListener('close', () => {
      for (const p of this.#pending.values()) p.reject(new Error('the DevTools connection closed'))
      this.#pending.clear()
    })
  }

  send(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<Record<string, unknown>> {
    const id = ++this.#next
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject })
      this.ws.send(JSON.stringify({ id, method, params, ...(sessionId !== undefined && { sessionId }) }))
    })
  }

  /** The next event `method` of `sessionId`. */
  once(method: string, sessionId: string): Promise<Message> {
    return new Promise((resolve) => {
      const l = (m: Message) => {
        if (m.method !== method || m.sessionId !== sessionId) return
        this.#listeners.delete(l)
        resolve(m)
      }
      this.#listeners.add(l)
    })
  }
}

export class Page {
  constructor(
    readonly cdp: Cdp,
    readonly sessionId: string,
  ) {}

  send(method: string, params: Record<string, unknown> = {}) {
    return this.cdp.send(method, params, this.sessionId)
  }

  /** Opens `url` and resolves once its load event has fired. */
  async goto(url: string): Promise<void> {
    const loaded = this.cdp.once('Page.loadEventFired', this.sessionId)
    const r = await this.send('Page.navigate', { url })
    if (typeof r.errorText === 'string') throw new Error(`cannot open ${url}: ${r.errorText}`)
    await loaded
  }

  /** The value of a JavaScript expression in the page (a promise is awaited). */
  async evaluate<T>(expression: string): Promise<T> {
    const r = (await this.send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true })) as { result: { value?: T }; exceptionDetails?: { exception?: { description?: string }; text: string } }
    if (r.exceptionDetails) throw new Error(r.exceptionDetails.exception?.description ?? r.exceptionDetails.text)
    return r.result.value as T
  }

  /**
   * Resolves once `predicate` (an expression) holds in the page: checked now and at every
   * change of the DOM (a MutationObserver), not on a timer. `timeoutMs` only bounds a failure.
   */
  waitFor(predicate: string, timeoutMs = 20_000): Promise<void> {
    return this.evaluate<void>(`new Promise((resolve, reject) => {
      const holds = () => { try { return Boolean(${predicate}) } catch { return false } }
      if (holds()) return resolve()
      const timer = setTimeout(() => { seen.disconnect(); reject(new Error('timed out waiting for the page to show: ' + ${JSON.stringify(predicate)})) }, ${timeoutMs})
      const seen = new MutationObserver(() => { if (holds()) { seen.disconnect(); clearTimeout(timer); resolve() } })
      seen.observe(document, { subtree: true, childList: true, attributes: true, characterData: true })
    })`)
  }

  /** A PNG of the whole page at `width` CSS pixels. */
  async screenshot(width = 1400): Promise<Buffer> {
    const height = await this.evaluate<number>('Math.ceil(document.documentElement.scrollHeight)')
    await this.send('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: 1, mobile: false })
    const r = (await this.send('Page.captureScreenshot', { format: 'png' })) as { data: string }
    return Buffer.from(r.data, 'base64')
  }
}

export class Browser {
  private constructor(
    readonly child: ChildProcess,
    readonly cdp: Cdp,
    readonly profile: string,
    readonly exited: Promise<void>,
  ) {}

  /** Starts Chromium with a fresh profile; fails, saying so, when it is not installed. */
  static async launch(): Promise<Browser> {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: this test needs Debian's chromium (apt-get install chromium; .ci/run installs it)`)
    const profile = mkdtempSync(join(tmpdir(), 'pr-chromium-'))
    const child = spawn(CHROMIUM, [...FLAGS, `--user-data-dir=${profile}`, '--remote-debugging-address=127.0.0.1', '--remote-debugging-port=0', 'about:blank'], { stdio: ['ignore', 'ignore', 'pipe'] })
    running.add(child)
    const exited = new Promise<void>((r) => child.once('exit', () => r()))
    void exited.then(() => running.delete(child))
    let err = ''
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr!.on('data', (d: Buffer) => {
        err += d.toString()
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(err)
        if (m) resolve(m[1]!)
      })
      void exited.then(() => reject(new Error(`chromium exited before it listened:\n${err}`)))
    })
    const ws = new WebSocket(url)
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener('open', () => resolve())
      ws.addEventListener('error', () => reject(new Error(`cannot connect to chromium's DevTools at ${url}`)))
    })
    return new Browser(child, new Cdp(ws), profile, exited)
  }

  /** A new tab, attached. */
  async page(): Promise<Page> {
    const { targetId } = (await this.cdp.send('Target.createTarget', { url: 'about:blank' })) as { targetId: string }
    const { sessionId } = (await this.cdp.send('Target.attachToTarget', { targetId, flatten: true })) as { sessionId: string }
    const page = new Page(this.cdp, sessionId)
    await page.send('Page.enable')
    await page.send('Runtime.enable')
    return page
  }

  /** Asks the browser to close, and ends it if it has not within a few seconds; removes its profile. */
  async close(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      await this.cdp.send('Browser.close').catch(() => undefined)
      const late = setTimeout(() => this.child.kill('SIGKILL'), 5000)
      await this.exited
      clearTimeout(late)
    }
    this.cdp.ws.close()
    rmSync(this.profile, { recursive: true, force: true })
  }
}
