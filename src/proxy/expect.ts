// Expect: 100-continue is answered here and never forwarded (undici refuses to send it). The
// client holds its body back until told to go on, so a body declared over the limit is refused
// before a byte of it is sent.
import { tooLarge } from '../request/errors.js'
import type { Req, Res } from './types.js'

type Handler = (req: Req, res: Res) => void

/** A 'checkContinue' listener for the HTTP/1.1 and HTTP/2 servers alike. */
export function checkContinue(maxBodyBytes: number, handler: Handler): Handler {
  return (req, res) => {
    if (Number(req.headers['content-length']) > maxBodyBytes) {
      const e = tooLarge(maxBodyBytes)
      const text = e.body()
      // HTTP/1.1: the body may follow anyway, unread; HTTP/2 forbids the header (the stream just ends).
      const close: Record<string, string> = req.httpVersionMajor === 1 ? { connection: 'close' } : {}
      res.writeHead(e.status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...close })
      res.end(text)
      return
    }
    const continued = res as Res & { writeContinue(): void }
    continued.writeContinue()
    handler(req, res)
  }
}
