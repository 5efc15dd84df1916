// A minimal MessagePack writer that emits exactly the forms Python's msgspec emits, so a
// simulated engine's frames are byte-for-byte a real vLLM's. A general encoder (msgpackr)
// picks forms by the JavaScript value, and JavaScript cannot tell 1.0 from 1: it writes a
// float field that happens to be whole as an integer, where msgspec always writes a float64.
// Here the caller says which it means. The smallest form is used for every length and
// integer, as msgspec does (non-negative integers as positive fixint or uint, negative ones
// as negative fixint or int).

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER)

export class MsgpackWriter {
  private buf = new Uint8Array(256)
  private view = new DataView(this.buf.buffer)
  private at = 0

  /** The bytes written so far (a copy: the writer may be reused). */
  bytes(): Uint8Array {
    return this.buf.slice(0, this.at)
  }

  nil(): void {
    this.u8(0xc0)
  }

  bool(v: boolean): void {
    this.u8(v ? 0xc3 : 0xc2)
  }

  /** An integer (a safe-integer number or a bigint from -2^63 to 2^64 - 1). */
  int(v: number | bigint): void {
    if (typeof v === 'number') {
      if (!Number.isSafeInteger(v)) throw new RangeError(`not a safe integer: ${v}`)
      if (v >= 0) {
        if (v < 0x80) return this.u8(v)
        if (v < 0x100) return this.u8u8(0xcc, v)
        if (v < 0x10000) return this.head16(0xcd, v)
        if (v < 0x100000000) return this.head32(0xce, v)
        return this.head64(0xcf, BigInt(v), false)
      }
      if (v >= -32) return this.u8(v & 0xff)
      if (v >= -0x80) return this.u8u8(0xd0, v & 0xff)
      if (v >= -0x8000) return this.head16(0xd1, v & 0xffff)
      if (v >= -0x80000000) return this.head32(0xd2, v >>> 0)
      return this.head64(0xd3, BigInt(v), true)
    }
    if (v >= -MAX_SAFE && v <= MAX_SAFE) return this.int(Number(v))
    if (v >= 0n) {
      if (v >= 1n << 64n) throw new RangeError(`integer above 2^64 - 1: ${v}`)
      return this.head64(0xcf, v, false)
    }
    if (v < -(1n << 63n)) throw new RangeError(`integer below -2^63: ${v}`)
    this.head64(0xd3, v, true)
  }

  /** A float64, whatever the value (msgspec writes every Python float so). */
  float64(v: number): void {
    this.reserve(9)
    this.buf[this.at] = 0xcb
    this.view.setFloat64(this.at + 1, v)
    this.at += 9
  }

  str(s: string): void {
    const bytes = Buffer.from(s, 'utf8')
    const n = bytes.length
    if (n < 32) this.u8(0xa0 | n)
    else if (n < 0x100) this.u8u8(0xd9, n)
    else if (n < 0x10000) this.head16(0xda, n)
    else this.head32(0xdb, n)
    this.raw(bytes)
  }

  bin(b: Uint8Array): void {
    const n = b.length
    if (n < 0x100) this.u8u8(0xc4, n)
    else if (n < 0x10000) this.head16(0xc5, n)
    else this.head32(0xc6, n)
    this.raw(b)
  }

  arrayHeader(n: number): void {
    if (n < 16) this.u8(0x90 | n)
    else if (n < 0x10000) this.head16(0xdc, n)
    else this.head32(0xdd, n)
  }

  mapHeader(n: number): void {
    if (n < 16) this.u8(0x80 | n)
    else if (n < 0x10000) this.head16(0xde, n)
    else this.head32(0xdf, n)
  }

  /**
   * A loosely typed value (extra keys): null, boolean, string, bytes, integer, float
   * (a number that is not an integer), or an array of those.
   */
  any(v: unknown): void {
    if (v === null || v === undefined) return this.nil()
    if (typeof v === 'boolean') return this.bool(v)
    if (typeof v === 'string') return this.str(v)
    if (typeof v === 'bigint') return this.int(v)
    if (typeof v === 'number') return Number.isSafeInteger(v) ? this.int(v) : this.float64(v)
    if (v instanceof Uint8Array) return this.bin(v)
    if (Array.isArray(v)) {
      this.arrayHeader(v.length)
      for (const x of v) this.any(x)
      return
    }
    throw new TypeError(`cannot encode a ${typeof v} as MessagePack here`)
  }

  private raw(b: Uint8Array): void {
    this.reserve(b.length)
    this.buf.set(b, this.at)
    this.at += b.length
  }

  private u8(v: number): void {
    this.reserve(1)
    this.buf[this.at++] = v
  }

  private u8u8(head: number, v: number): void {
    this.reserve(2)
    this.buf[this.at++] = head
    this.buf[this.at++] = v
  }

  private head16(head: number, v: number): void {
    this.reserve(3)
    this.buf[this.at] = head
    this.view.setUint16(this.at + 1, v)
    this.at += 3
  }

  private head32(head: number, v: number): void {
    this.reserve(5)
    this.buf[this.at] = head
    this.view.setUint32(this.at + 1, v)
    this.at += 5
  }

  private head64(head: number, v: bigint, signed: boolean): void {
    this.reserve(9)
    this.buf[this.at] = head
    if (signed) this.view.setBigInt64(this.at + 1, v)
    else this.view.setBigUint64(this.at + 1, v)
    this.at += 9
  }

  private reserve(n: number): void {
    if (this.at + n <= this.buf.length) return
    let size = this.buf.length * 2
    while (size < this.at + n) size *= 2
    const next = new Uint8Array(size)
    next.set(this.buf.subarray(0, this.at))
    this.buf = next
    this.view = new DataView(next.buffer)
  }
}
