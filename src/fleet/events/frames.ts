// The framing around vLLM's KV-event payloads on ZeroMQ: a live message is
// [topic, sequence number, payload]. A replay answer is ["", topic, sequence number, payload]
// since vLLM 0.26.0, ended by ["", "", -1, ""]; before, ["", sequence number, payload], ended
// by ["", -1, ""]. Sequence numbers are 8-byte big-endian integers.

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

/** One replay answer: a batch, the end marker, or what is wrong with it. */
export type ReplayAnswer = { kind: 'batch'; seq: bigint; payload: Uint8Array } | { kind: 'end' } | { kind: 'bad'; what: string }

/**
 * A message on the replay socket in either framing: 4 frames (vLLM 0.26.0 on: the topic after
 * the empty delimiter) or 3 (older vLLM). The topic is not checked: the replay socket is the
 * engine's own, and its end marker carries an empty topic whatever the stream's is.
 */
export function readReplayAnswer(msg: readonly Uint8Array[]): ReplayAnswer {
  if ((msg.length !== 3 && msg.length !== 4) || msg[0]!.length !== 0) {
    return { kind: 'bad', what: `a replay message of ${msg.length} frames${msg.length > 0 && msg[0]!.length !== 0 ? ' not starting with an empty frame' : ''} (expected "", [topic,] seq, payload)` }
  }
  const seqAt = msg.length - 2
  const seq = readSeq(msg[seqAt]!)
  if (seq === null) return { kind: 'bad', what: `a replay sequence frame of ${msg[seqAt]!.length} bytes (expected ${SEQ_BYTES})` }
  if (seq === END_OF_REPLAY) return { kind: 'end' }
  if (seq < 0n) return { kind: 'bad', what: `a replay answer with the negative sequence number ${seq}` }
  return { kind: 'batch', seq, payload: msg[seqAt + 1]! }
}
