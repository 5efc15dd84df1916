// The framing around vLLM's KV-event payloads on ZeroMQ: a live message is
// [topic, sequence number, payload] and a replay answer ["", sequence number, payload],
// ended by ["", -1, ""]. Sequence numbers are 8-byte big-endian integers.

export const SEQ_BYTES = 8

/** vLLM's end-of-replay marker: -1 as a signed 8-byte big-endian integer. */
export const END_OF_REPLAY = -1n

export function seqFrame(seq: bigint | number): Buffer {
  const b = Buffer.alloc(SEQ_BYTES)
  b.writeBigInt64BE(BigInt(seq))
  return b
}

/** The sequence number in a frame (signed, so that the replay's end marker reads -1); null if it is not 8 bytes. */
export function readSeq(frame: Uint8Array): bigint | null {
  if (frame.length !== SEQ_BYTES) return null
  return Buffer.from(frame.buffer, frame.byteOffset, SEQ_BYTES).readBigInt64BE(0)
}

/** A ZeroMQ tcp endpoint for a host and port ('*' or 0.0.0.0 binds every interface; IPv6 in brackets). */
export function tcpEndpoint(host: string, port: number | '*'): string {
  const h = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host
  return `tcp://${h}:${port}`
}

/** The port of a bound tcp endpoint ("tcp://127.0.0.1:5557"). */
export function endpointPort(endpoint: string): number {
  const m = /:(\d+)$/.exec(endpoint)
  if (m === null) throw new Error(`no port in ZeroMQ endpoint ${endpoint}`)
  return Number(m[1])
}
