// An instance spoken to in the wrong scheme (https:// to a plain-HTTP server, or http:// to a
// TLS one) fails with an error that shows which it speaks: read it, and say how to fix the URL.

export type Scheme = 'http' | 'https'

/**
 * The scheme an instance speaks, when an error from talking to it with the other one shows it:
 * a TLS handshake that met bytes that are not TLS ("wrong version number", "packet length too
 * long": an HTTP answer read as a TLS record) speaks plain HTTP; an HTTP response that starts
 * with a TLS record header (0x15 alert or 0x16 handshake, then 0x03) speaks TLS.
 */
export function schemeShownBy(err: unknown): Scheme | undefined {
  const e = err as { code?: unknown; name?: unknown; message?: unknown; data?: unknown }
  const code = typeof e.code === 'string' ? e.code : ''
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || code === 'ERR_SSL_PACKET_LENGTH_TOO_LONG') return 'http'
  if (code.startsWith('ERR_SSL_') && /wrong version number|packet length too long/.test(String(e.message))) return 'http'
  // undici's HTTPParserError (its code is not always set) keeps the bytes it could not parse.
  const parse = code.startsWith('HPE_') || e.name === 'HTTPParserError'
  if (parse && typeof e.data === 'string' && /^[\x15\x16]\x03/.test(e.data)) return 'https'
  return undefined
}

/** "instance speaks plain HTTP: use http://host:port", or with no origin to give, "use http://". */
export function schemeAdvice(speaks: Scheme, url?: URL): string {
  const use = url === undefined ? `${speaks}://` : `${speaks}://${url.host}${url.pathname.replace(/\/+$/, '')}`
  return `instance speaks ${speaks === 'http' ? 'plain HTTP' : 'TLS'}: use ${use}`
}

/** The short form of an error for a message that already says what it means. */
export function errorTag(err: unknown): string {
  const e = err as { code?: unknown; message?: unknown }
  return typeof e.code === 'string' && e.code.startsWith('ERR_SSL_') ? e.code : String(e.message)
}
