// SGLang's disaggregation bootstrap server, as the simulator plays it: a prefill worker
// listens on --bootstrap-port (SGLang's --disaggregation-bootstrap-port, 8998 by default) and
// pairs, by bootstrap_room, the request it computes with the decode worker that registers the
// same room. The router sends both legs at once, so either may come first:
// - the decode registers first: it waits until the prefill has computed the room;
// - the prefill computes first: its blocks wait (held) until the decode registers;
// - a room whose other leg never comes times out (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT and
//   _WAITING_TIMEOUT, 300 s): the waiting leg is answered with an error.
// Wire format: the simulator's JSON lines (json-lines.ts), not SGLang's. From a decode worker:
//   {"op":"room","room":"<digits>","tokens"}  answered {"ok":true,"tokens"} once the prefill is
//        ready (the blocks are then being read), or {"ok":false,"error"}; then
//   {"op":"done"}                              the KV arrived: the prefill frees the blocks.
import net from 'node:net'
import type { TimerHandle } from './clock.js'
import type { SimEngine } from './engine.js'
import { connect, fail, peerAddress, readMessages, send, type Message } from './json-lines.js'
import type { KvHold } from './kv-holds.js'
import type { PullRefusal, RemoteKvSource } from './kv-transfer.js'
import { listenTcp } from './tcp-listen.js'

/** SGLang's default --disaggregation-bootstrap-port. */
export const SGLANG_BOOTSTRAP_PORT = 8998

/** The engine hold a room's prefill leg keeps its blocks under. */
export function roomHoldId(room: string): string {
  return `bootstrap-room-${room}`
}

interface Waiting {
  socket: net.Socket
  tokens: number
  timer: TimerHandle
}

export class BootstrapServer {
  private readonly sockets = new Set<net.Socket>()
  /** Decodes registered before their prefill finished. */
  private readonly waiting = new Map<string, Waiting>()
  /** Rooms with a prefill leg in this engine (computing or held). */
  private readonly rooms = new Set<string>()
  registered = 0
  timedOut = 0

  private constructor(
    private readonly server: net.Server,
    readonly host: string,
    readonly port: number,
    private readonly engine: SimEngine,
  ) {
    server.on('connection', (s) => this.accept(s))
  }

  static async open(engine: SimEngine, host: string, port: number): Promise<BootstrapServer> {
    const l = await listenTcp(host, port)
    return new BootstrapServer(l.server, host, l.port, engine)
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()))
    for (const w of this.waiting.values()) this.engine.clock.cancel(w.timer)
    this.waiting.clear()
    for (const s of this.sockets) s.destroy()
    await closed
  }

  /** A prefill leg for `room` starts here; false if the room already has one. */
  claim(room: string): boolean {
    if (this.rooms.has(room)) return false
    this.rooms.add(room)
    return true
  }

  /** The room's prefill leg is over (answered, failed or aborted). */
  unclaim(room: string): void {
    this.rooms.delete(room)
  }

  get openRooms(): number {
    return this.rooms.size
  }

  /** The room's prefill finished and holds its blocks: hand them to a decode that waits. */
  ready(room: string, hold: KvHold): void {
    const w = this.waiting.get(room)
    if (w === undefined) return
    this.waiting.delete(room)
    this.engine.clock.cancel(w.timer)
    this.hand(w.socket, room, hold.id, w.tokens)
  }

  /** The room's prefill failed before holding anything: a waiting decode learns it now. */
  failed(room: string, why: string): void {
    const w = this.waiting.get(room)
    if (w === undefined) return
    this.waiting.delete(room)
    this.engine.clock.cancel(w.timer)
    fail(w.socket, why)
  }

  private hand(socket: net.Socket, room: string, holdId: string, tokens: number): void {
    const r = this.engine.holds.beginRead(holdId, tokens)
    if (typeof r === 'string') return fail(socket, `bootstrap room ${room}: ${r}`)
    ;(socket as net.Socket & { reading?: string | undefined }).reading = holdId
    send(socket, { ok: true, tokens: r.tokens })
  }

  private accept(socket: net.Socket & { reading?: string | undefined; room?: string }): void {
    this.sockets.add(socket)
    socket.on('error', () => {})
    socket.on('close', () => {
      this.sockets.delete(socket)
      const room = socket.room
      if (room !== undefined) {
        const w = this.waiting.get(room)
        if (w?.socket === socket) {
          this.engine.clock.cancel(w.timer)
          this.waiting.delete(room)
        }
      }
      if (socket.reading !== undefined) this.engine.holds.release(socket.reading, 'cancelled', this.engine.clock.now())
    })
    readMessages(socket, (m: Message) => {
      const e = this.engine
      if (m.op === 'done') {
        if (socket.reading === undefined) return fail(socket, '"done" before the room was handed over')
        e.holds.release(socket.reading, 'read', e.clock.now())
        socket.reading = undefined
        return void socket.end(`${JSON.stringify({ ok: true })}\n`)
      }
      if (m.op !== 'room') return fail(socket, `unknown op ${JSON.stringify(m.op)}: room or done`)
      if (socket.room !== undefined) return fail(socket, 'one room per connection')
      const room = typeof m.room === 'string' && /^\d+$/.test(m.room) ? m.room : null
      if (room === null) return fail(socket, 'room must be a string of digits')
      const tokens = m.tokens
      if (typeof tokens !== 'number' || !Number.isInteger(tokens) || tokens < 0) return fail(socket, 'tokens must be a non-negative integer')
      if (this.waiting.has(room)) return fail(socket, `bootstrap room ${room} already has a decode registered`)
      socket.room = room
      this.registered++
      const id = roomHoldId(room)
      if (e.holds.get(id) !== undefined) {
        e.holds.keepAlive(id)
        return this.hand(socket, room, id, tokens)
      }
      const timeout = e.config.kv.bootstrapTimeoutMs
      const timer = e.clock.schedule(e.clock.now() + timeout, () => {
        if (this.waiting.get(room)?.socket !== socket) return
        this.waiting.delete(room)
        this.timedOut++
        fail(socket, `bootstrap room ${room} timed out after ${timeout} ms without its prefill leg`)
      })
      this.waiting.set(room, { socket, tokens, timer })
    })
  }
}

/** A decode leg's KV, from the prefill worker's bootstrap server, by room. */
export class BootstrapSource implements RemoteKvSource {
  private socket: net.Socket | null = null
  private answer: PullRefusal | null | undefined = undefined
  private ready: ((refusal: PullRefusal | null) => void) | null = null
  private ended = false

  constructor(
    private readonly host: unknown,
    private readonly port: unknown,
    private readonly room: string,
    /** Prompt tokens: the most a read can ask for (SGLang's decode receives the whole prompt). */
    private readonly tokens: number,
  ) {}

  /** SGLang's decode registers the room as soon as the request arrives. */
  attach(): void {
    const addr = peerAddress(this.host, this.port)
    if (addr === undefined) {
      return this.settle(
        `bootstrap_host ${JSON.stringify(this.host)} / bootstrap_port ${JSON.stringify(this.port)} is no bootstrap server the simulator can reach (an IP address or localhost, a port 1-65535)`,
      )
    }
    this.socket = connect(
      addr,
      { op: 'room', room: this.room, tokens: this.tokens },
      (m) => {
        if (this.answer === undefined) this.settle(m.ok === true ? null : `bootstrap server ${addr.host}:${addr.port}: ${String(m.error)}`)
      },
      (reason) => {
        this.socket = null
        this.settle(reason ?? `bootstrap server ${addr.host}:${addr.port} closed the connection`)
      },
    )
  }

  begin(_tokens: number, ready: (refusal: PullRefusal | null) => void): void {
    if (this.answer !== undefined) return ready(this.answer)
    this.ready = ready
  }

  finish(): void {
    this.ended = true
    if (this.socket !== null) send(this.socket, { op: 'done' })
  }

  cancel(): void {
    if (this.ended) return
    this.ended = true
    this.socket?.destroy()
  }

  private settle(answer: PullRefusal | null): void {
    if (this.answer !== undefined) return
    this.answer = answer
    if (answer !== null) this.ended = true
    const r = this.ready
    this.ready = null
    r?.(answer)
  }
}
