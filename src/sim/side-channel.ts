// The KV side channel between live workers, in the place of vLLM's NixlConnector side channel
// (VLLM_NIXL_SIDE_CHANNEL_PORT, 5600 + rank): every worker listens on one, its host and port
// are the remote_host and remote_port of the kv_transfer_params its prefill legs answer, and
// a decode worker connects to it to read (and so release) the blocks it holds.
//
// The protocol is the simulator's own (JSON lines, json-lines.ts), not NIXL's; no KV bytes
// move, the decode spends the model's transfer time instead. Messages from a decode worker:
//   {"op":"lease","engine_id","request_id"}          heartbeat while the request waits: renews the lease
//   {"op":"pull","engine_id","request_id","tokens"}  starts the read; the answer is
//        {"ok":true,"tokens","blocks"} and the connection stays open: the blocks are being read.
//        Then {"op":"done"} frees them ({"ok":true}); a connection closed before "done" frees them too.
//   {"op":"release","engine_id","request_id"}        the decode gave up before reading: free them
// Refusals are {"ok":false,"error"}: an unknown engine_id (another process, or this one restarted)
// or blocks no longer held (expired, already read) refuse a pull, and the decode applies its
// kv_load_failure_policy.
import net from 'node:net'
import type { Clock, TimerHandle } from './clock.js'
import type { SimEngine } from './engine.js'
import { connect, fail, peerAddress, readMessages, send, type Message } from './json-lines.js'
import type { RemotePrefill } from './kv-params.js'
import type { PullRefusal, RemoteKvSource } from './kv-transfer.js'
import { listenTcp } from './tcp-listen.js'

export class SideChannelServer {
  private readonly sockets = new Set<net.Socket>()
  /** Pulls answered, refused, and heartbeats received: for /sim/state. */
  pulls = 0
  refused = 0
  heartbeats = 0

  private constructor(
    private readonly server: net.Server,
    readonly host: string,
    readonly port: number,
    private readonly engine: SimEngine,
  ) {
    server.on('connection', (s) => this.accept(s))
  }

  /** Listens on host:port (0: a free port). */
  static async open(engine: SimEngine, host: string, port: number): Promise<SideChannelServer> {
    const l = await listenTcp(host, port)
    return new SideChannelServer(l.server, host, l.port, engine)
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()))
    for (const s of this.sockets) s.destroy()
    await closed
  }

  private accept(socket: net.Socket): void {
    this.sockets.add(socket)
    socket.on('error', () => {})
    let reading: string | null = null
    socket.on('close', () => {
      this.sockets.delete(socket)
      // Closed mid-read (the decode aborted or crashed): vLLM's abort notification frees the blocks.
      if (reading !== null) this.engine.holds.release(reading, 'cancelled', this.engine.clock.now())
    })
    readMessages(socket, (m) => {
      const e = this.engine
      if (m.op === 'done') {
        if (reading === null) return fail(socket, '"done" without a pull on this connection')
        e.holds.release(reading, 'read', e.clock.now())
        reading = null
        return void socket.end(`${JSON.stringify({ ok: true })}\n`)
      }
      if (reading !== null) return fail(socket, 'only "done" may follow a pull')
      const id = typeof m.request_id === 'string' ? m.request_id : null
      if (id === null) return fail(socket, 'request_id must be a string')
      if (m.engine_id !== e.kvEngineId) {
        if (m.op === 'pull') this.refused++
        return fail(socket, `unknown engine_id ${JSON.stringify(m.engine_id)}: this side channel serves ${e.kvEngineId}`)
      }
      switch (m.op) {
        case 'lease': {
          this.heartbeats++
          const ok = e.holds.renew(id, e.clock.now(), e.config.kv.leaseMs)
          return void (ok ? socket.end(`${JSON.stringify({ ok: true })}\n`) : fail(socket, `no KV blocks are held for request ${id}`))
        }
        case 'pull': {
          const tokens = m.tokens
          if (typeof tokens !== 'number' || !Number.isInteger(tokens) || tokens < 0) return fail(socket, 'tokens must be a non-negative integer')
          const r = e.holds.beginRead(id, tokens)
          if (typeof r === 'string') {
            this.refused++
            return fail(socket, r)
          }
          this.pulls++
          reading = id
          return send(socket, { ok: true, tokens: r.tokens, blocks: r.blockIds.length })
        }
        case 'release': {
          const h = e.holds.get(id)
          if (h !== undefined && h.state === 'held') e.holds.release(id, 'cancelled', e.clock.now())
          return void socket.end(`${JSON.stringify({ ok: true })}\n`)
        }
        default:
          return fail(socket, `unknown op ${JSON.stringify(m.op)}: lease, pull, done or release`)
      }
    })
  }
}

/** Heartbeats are spaced a sixth of the lease, as vLLM's (lease // 6), but never closer than this many wall ms. */
const MIN_HEARTBEAT_WALL_MS = 10

/** A decode leg's KV, read from a prefill worker's side channel. */
export class SideChannelSource implements RemoteKvSource {
  private heartbeat: TimerHandle | null = null
  private socket: net.Socket | null = null
  private ended = false

  constructor(
    private readonly remote: RemotePrefill,
    private readonly clock: Clock,
    /** Sim ms between heartbeats. */
    private readonly intervalMs: number,
  ) {}

  attach(): void {
    this.beat()
  }

  begin(tokens: number, ready: (refusal: PullRefusal | null) => void): void {
    this.stopHeartbeats()
    const addr = peerAddress(this.remote.host, this.remote.port)
    if (addr === undefined) {
      this.ended = true
      return ready(
        `remote_host ${JSON.stringify(this.remote.host)} / remote_port ${JSON.stringify(this.remote.port)} is no side channel the simulator can reach (an IP address or localhost, a port 1-65535)`,
      )
    }
    let answered = false
    const answer = (r: PullRefusal | null): void => {
      if (answered) return
      answered = true
      if (r !== null) this.ended = true
      ready(r)
    }
    this.socket = connect(
      addr,
      { op: 'pull', engine_id: this.remote.engineId, request_id: this.remote.requestId, tokens },
      (m: Message) => {
        if (!answered) answer(m.ok === true ? null : `side channel ${addr.host}:${addr.port}: ${String(m.error)}`)
      },
      (reason) => {
        this.socket = null
        answer(reason ?? `side channel ${addr.host}:${addr.port} closed the connection`)
      },
    )
  }

  finish(): void {
    this.ended = true
    if (this.socket !== null) send(this.socket, { op: 'done' })
  }

  cancel(): void {
    if (this.ended) return
    this.ended = true
    this.stopHeartbeats()
    if (this.socket !== null) {
      this.socket.destroy() // mid-read: the prefill frees the blocks when the connection drops
      return
    }
    this.oneShot({ op: 'release', engine_id: this.remote.engineId, request_id: this.remote.requestId })
  }

  private beat(): void {
    if (this.ended) return
    this.oneShot({ op: 'lease', engine_id: this.remote.engineId, request_id: this.remote.requestId })
    const scale = (this.clock as { timeScale?: number }).timeScale ?? 1
    const next = Math.max(this.intervalMs, MIN_HEARTBEAT_WALL_MS * scale)
    this.heartbeat = this.clock.schedule(this.clock.now() + next, () => {
      this.heartbeat = null
      this.beat()
    })
  }

  private stopHeartbeats(): void {
    if (this.heartbeat !== null) this.clock.cancel(this.heartbeat)
    this.heartbeat = null
  }

  /** A message whose answer does not matter (heartbeats are best effort, as vLLM's). */
  private oneShot(m: Message): void {
    const addr = peerAddress(this.remote.host, this.remote.port)
    if (addr === undefined) return
    const s = connect(addr, m, () => s.end(), () => {})
  }
}
