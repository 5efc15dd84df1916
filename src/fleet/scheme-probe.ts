// Which scheme an instance that failed a probe really speaks. An error can show it
// (schemeShownBy); an http:// instance that closed the connection without a byte might be
// a TLS server (Node's and OpenSSL's close on a plain request), so a TLS handshake is tried.
import tls from 'node:tls'
import { schemeShownBy, type Scheme } from './wrong-scheme.js'

const CLOSED = new Set(['UND_ERR_SOCKET', 'ECONNRESET'])

export async function schemeSpoken(url: URL, err: unknown, timeoutMs: number): Promise<Scheme | undefined> {
  const shown = schemeShownBy(err)
  if (shown !== undefined || url.protocol !== 'http:') return shown
  if (!CLOSED.has((err as { code?: string }).code ?? '')) return undefined
  return (await handshakes(url, timeoutMs)) ? 'https' : undefined
}

/** Whether a TLS handshake with the instance completes (its certificate is not checked: only the protocol matters). */
function handshakes(url: URL, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const host = url.hostname.replace(/^\[|\]$/g, '')
    const s = tls.connect({ host, port: Number(url.port || 80), rejectUnauthorized: false, ...(isIpAddress(host) ? {} : { servername: host }) })
    const done = (ok: boolean) => {
      clearTimeout(timer)
      s.destroy()
      resolve(ok)
    }
    const timer = setTimeout(() => done(false), timeoutMs)
    s.once('secureConnect', () => done(true))
    s.once('error', () => done(false))
    s.once('close', () => done(false))
  })
}

/** An IP address, which TLS's SNI may not carry. */
function isIpAddress(host: string): boolean {
  return /^[\d.]+$/.test(host) || host.includes(':')
}
