// An ext_proc client on node:http2 itself, for what a test must control frame by frame and
// grpc-js's client does not let it: RST_STREAM written right behind a stream's HEADERS and DATA
// (as Envoy resets a stream it gives up on), a grpc-timeout, the connection cut under open
// streams. Messages are encoded with the picker's own protos.
import http2 from 'node:http2'
import net from 'node:net'
import { protos } from '../../src/epp/protos.js'

const PATH = '/envoy.service.ext_proc.v3.ExternalProcessor/Process'

/** One gRPC frame (uncompressed) carrying a ProcessingRequest given as protobufjs takes objects. */
export function frame(m: Record<string, unknown>): Buffer {
  const Req = protos().root.lookupType('envoy.service.ext_proc.v3.ProcessingRequest')
  const bytes = Req.encode(Req.fromObject(m)).finish()
  const out = Buffer.alloc(5 + bytes.length)
  out.writeUInt32BE(bytes.length, 1)
  out.set(bytes, 5)
  return out
}

const h = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) })
/** Request headers of a chat completion, the body to follow. */
export const chatHeaders = () => frame({ request_headers: { headers: { headers: [h(':method', 'POST'), h(':path', '/v1/chat/completions'), h('content-type', 'application/json')] }, end_of_stream: false } })
export const bodyFrame = (body: string) => frame({ request_body: { body: Buffer.from(body), end_of_stream: true } })

export class WireGateway {
  private constructor(
    readonly session: http2.ClientHttp2Session,
    /** The TCP connection under the session, to cut it without a word (node:http2 refuses that on its own socket proxy). */
    readonly socket: net.Socket,
  ) {}

  /** `onSettings`: called when the server's SETTINGS arrive (they may before 'connect'). */
  static async connect(address: string, onSettings?: () => void): Promise<WireGateway> {
    const i = address.lastIndexOf(':')
    let socket: net.Socket | undefined
    const session = http2.connect(`http://${address}`, {
      createConnection: () => (socket = net.connect(Number(address.slice(i + 1)), address.slice(0, i))),
    })
    if (onSettings) session.once('remoteSettings', onSettings)
    await new Promise<void>((resolve, reject) => {
      session.once('connect', () => resolve())
      session.once('error', reject)
    })
    session.on('error', () => undefined)
    return new WireGateway(session, socket!)
  }

  /** A Process stream; `extra` adds request headers (grpc-timeout). */
  open(extra: http2.OutgoingHttpHeaders = {}): http2.ClientHttp2Stream {
    const s = this.session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers', ...extra })
    s.on('error', () => undefined)
    return s
  }

  /** Resolves with the stream's first DATA (the picker's first answer). */
  static firstData(s: http2.ClientHttp2Stream): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      s.once('data', (d: Buffer) => resolve(d))
      s.once('close', () => reject(new Error(`the stream closed before an answer (rst ${s.rstCode})`)))
    })
  }

  close(): void {
    this.session.destroy()
  }
}
