// TLS on the picker's gRPC port, as the reference picker serves it: a certificate and key
// given (read at start, swapped on SIGHUP without dropping the port) or, with none given, a
// self-signed one made at start and kept in memory only. Gateways skip verifying it (Istio:
// DestinationRule tls.mode SIMPLE, insecureSkipVerify).
import { X509Certificate, createPrivateKey } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { createSecureContext } from 'node:tls'
import { ServerCredentials } from '@grpc/grpc-js'
import selfsigned from 'selfsigned'

export interface KeyPair {
  cert: string
  key: string
}

/** Throws with the reason when the pair would not serve (unreadable PEM, key not the certificate's). */
export function checkPair(pair: KeyPair): void {
  createSecureContext({ cert: pair.cert, key: pair.key })
  const x = new X509Certificate(pair.cert)
  if (!x.checkPrivateKey(createPrivateKey(pair.key))) throw new Error("the key is not the certificate's")
}

/** The pair in two PEM files, checked; an error names the file that is wrong. */
export function readPair(certFile: string, keyFile: string): KeyPair {
  let cert: string
  let key: string
  try {
    cert = readFileSync(certFile, 'utf8')
  } catch (err) {
    throw new Error(`cannot read the certificate ${certFile}: ${(err as Error).message}`)
  }
  try {
    key = readFileSync(keyFile, 'utf8')
  } catch (err) {
    throw new Error(`cannot read the key ${keyFile}: ${(err as Error).message}`)
  }
  try {
    new X509Certificate(cert)
  } catch (err) {
    throw new Error(`${certFile} is not a PEM certificate: ${(err as Error).message}`)
  }
  try {
    checkPair({ cert, key })
  } catch (err) {
    throw new Error(`${keyFile} does not go with ${certFile}: ${(err as Error).message}`)
  }
  return { cert, key }
}

/** A self-signed EC P-256 certificate for this host, localhost and 127.0.0.1, valid a year. */
export async function selfSignedPair(host: string = hostname()): Promise<KeyPair> {
  const names = [...new Set([host, 'localhost'])]
  const notBeforeDate = new Date()
  const notAfterDate = new Date(notBeforeDate)
  notAfterDate.setFullYear(notAfterDate.getFullYear() + 1)
  const pems = await selfsigned.generate([{ name: 'commonName', value: host }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    notBeforeDate,
    notAfterDate,
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: [...names.map((value) => ({ type: 2 as const, value })), { type: 7 as const, ip: '127.0.0.1' }] },
    ],
  })
  return { cert: pems.cert, key: pems.private }
}

/**
 * Server credentials whose pair can be replaced while the port is open: grpc-js watches
 * them and gives its TLS server the new secure context (connections open keep theirs).
 */
export class ReloadableTlsCredentials extends ServerCredentials {
  #pair: KeyPair

  constructor(pair: KeyPair) {
    checkPair(pair)
    super({ requestCert: false }, { cert: pair.cert, key: pair.key })
    this.#pair = pair
  }

  get pair(): KeyPair {
    return this.#pair
  }

  /** The certificate served now, for a log line or a test. */
  get fingerprint256(): string {
    return new X509Certificate(this.#pair.cert).fingerprint256
  }

  /** Serve this pair to new connections; a pair that would not serve throws and the old one stays. */
  replace(pair: KeyPair): void {
    checkPair(pair)
    this.#pair = pair
    this.updateSecureContextOptions({ cert: pair.cert, key: pair.key })
  }

  override _equals(other: ServerCredentials): boolean {
    return other === this
  }
}
