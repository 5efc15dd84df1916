// SageMaker's InvokeEndpointWithResponseStream answer: the instance's bytes, as they arrive,
// each chunk one PayloadPart event of an AWS event stream (application/vnd.amazon.eventstream),
// which is what the AWS SDKs decode. forward() writes to this as to any response, so
// backpressure, retries before the answer starts and client aborts work unchanged.
// An instance's error answer (not 2xx) passes through as it came, as on /invocations.
import { EventEmitter } from 'node:events'
import type { OutgoingHttpHeaders } from 'node:http'
import { EventStreamCodec, type MessageHeaders } from '@smithy/eventstream-codec'
import type { FramedResponse, StreamFailure } from './broken-stream.js'
import type { HeaderList } from './hop-headers.js'
import type { Res } from './types.js'

const codec = new EventStreamCodec(
  (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'),
  (text) => Buffer.from(text, 'utf8'),
)

const str = (value: string) => ({ type: 'string' as const, value })

const PAYLOAD_PART: MessageHeaders = {
  ':event-type': str('PayloadPart'),
  ':message-type': str('event'),
  ':content-type': str('application/octet-stream'),
}

export const EVENT_STREAM_CONTENT_TYPE = 'application/vnd.amazon.eventstream'

/** One PayloadPart message carrying `bytes`. */
export function payloadPart(bytes: Uint8Array): Buffer {
  const m = codec.encode({ headers: PAYLOAD_PART, body: bytes })
  return Buffer.from(m.buffer, m.byteOffset, m.byteLength)
}

/**
 * The runtime's error events: ModelStreamError (the model's stream broke; ErrorCode
 * StreamBroken or ModelInvocationTimeExceeded) and InternalStreamFailure (our side ended it).
 */
export function streamError(f: StreamFailure): Buffer {
  const internal = f.code === 'shutdown'
  const body = internal ? { Message: f.message } : { Message: f.message, ErrorCode: f.code === 'upstream_timeout' ? 'ModelInvocationTimeExceeded' : 'StreamBroken' }
  const m = codec.encode({
    headers: {
      ':message-type': str('exception'),
      ':exception-type': str(internal ? 'InternalStreamFailure' : 'ModelStreamError'),
      ':content-type': str('application/json'),
    },
    body: Buffer.from(JSON.stringify(body)),
  })
  return Buffer.from(m.buffer, m.byteOffset, m.byteLength)
}

export class EventStreamResponse extends EventEmitter implements FramedResponse {
  /** The instance answered 2xx: its body is being framed. */
  #framing = false

  constructor(private readonly res: Res) {
    super()
    res.on('drain', () => this.emit('drain'))
  }

  get headersSent(): boolean {
    return this.res.headersSent
  }

  get writableEnded(): boolean {
    return this.res.writableEnded
  }

  writeHead(status: number, headers: OutgoingHttpHeaders | HeaderList = {}): unknown {
    if (status < 200 || status >= 300) return this.res.writeHead(status, headers)
    this.#framing = true
    const out: HeaderList = []
    let type: string | undefined
    const take = (name: string, value: string | string[] | number | undefined) => {
      if (value === undefined) return
      const n = name.toLowerCase()
      if (n === 'content-type') type ??= String(value)
      else if (n === 'content-length') return
      else if (Array.isArray(value)) for (const v of value) out.push(n, v)
      else out.push(n, String(value))
    }
    if (Array.isArray(headers)) for (let i = 0; i < headers.length; i += 2) take(headers[i]!, headers[i + 1])
    else for (const name in headers) take(name, headers[name])
    // The runtime names the model's content type in its own header (ContentType in the SDK's output).
    if (type !== undefined) out.push('x-amzn-sagemaker-content-type', type)
    out.push('content-type', EVENT_STREAM_CONTENT_TYPE)
    return this.res.writeHead(status, out)
  }

  write(chunk: Buffer | string): boolean {
    if (!this.#framing) return this.res.write(chunk)
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    return bytes.length === 0 ? true : this.res.write(payloadPart(bytes))
  }

  end(chunk?: Buffer | string): unknown {
    if (chunk !== undefined) this.write(chunk)
    return this.res.end()
  }

  destroy(err?: Error): unknown {
    return this.res.destroy(err)
  }

  fail(failure: StreamFailure): void {
    if (this.#framing) this.res.end(streamError(failure))
    else this.res.destroy()
  }
}
