// One lane of a disaggregated replay: its own virtual fleet (N prefill + M decode instances, or
// N + M that do both) and router, fed the same prepared requests as every other lane. At each
// arrival the lane asks its router for the pair, then runs the legs on the fleet as the
// connector does: NIXL's prefill leg (one token, blocks held), then the decode leg reading them
// after the transfer time; SGLang's bootstrap with both legs at once; or the whole request on
// the decode instance.
import { VirtualFleet, type PdResult, type VirtualResult } from '../../sim/virtual-fleet.js'
import type { SimOptions } from '../../sim/config.js'
import type { PreparedRequest } from '../prepare.js'
import { PdStats, type Slo } from './stats.js'
import type { PdContext, PdPlacement, PdRouter, PdRouterFactory } from './types.js'
import { deliverKvEvents } from '../kv-delivery.js'

export interface PdLaneOptions {
  prefill: number
  decode: number
  sim: SimOptions
  prefixLength: number
  seed: number
  durationMs: number
  slo: Slo
  /** Simulated delay of the engines' KV events to the routers fed by them. */
  kvEventsDelayMs: number
}

export class PdLane {
  readonly fleet: VirtualFleet
  readonly router: PdRouter
  readonly stats: PdStats
  /** Engine indexes of the prefill and decode instances (an aggregated lane: none, and all). */
  readonly prefill: readonly number[]
  readonly decode: readonly number[]

  constructor(
    readonly factory: PdRouterFactory,
    o: PdLaneOptions,
  ) {
    const total = o.prefill + o.decode
    this.fleet = new VirtualFleet({ ...o.sim, instances: total, ...(factory.kvEvents === true && { kvEvents: true }) })
    const all = Array.from({ length: total }, (_, i) => i)
    this.prefill = factory.aggregated === true ? [] : all.slice(0, o.prefill)
    this.decode = factory.aggregated === true ? all : all.slice(o.prefill)
    const ctx: PdContext = {
      ids: this.fleet.engines.map((e) => e.id),
      engines: this.fleet.engines,
      prefill: this.prefill,
      decode: this.decode,
      model: this.fleet.sim.model,
      kvBlocks: this.fleet.sim.engine.kvBlocks,
      blockSize: this.fleet.sim.engine.blockSize,
      prefixLength: o.prefixLength,
      seed: o.seed,
    }
    this.router = factory.create(ctx)
    if (this.router.kvEvents !== undefined) deliverKvEvents(this.fleet, this.router.kvEvents, o.kvEventsDelayMs)
    this.stats = new PdStats(factory.name, total, o.durationMs, o.slo)
  }

  get wantsKvEvents(): boolean {
    return this.router.kvEvents !== undefined
  }


  /** Runs the clock up to the request's arrival, then routes it and sends its legs. */
  arrive(req: PreparedRequest): void {
    this.fleet.run(req.at)
    const p = this.router.route(req, req.at)
    this.stats.routed(p)
    const base = req.maxTokens === undefined ? { prepared: req.prompt } : { prepared: req.prompt, maxTokens: req.maxTokens }
    const done = (r: VirtualResult | PdResult): void => {
      p.finish()
      this.stats.done(r, p.prefill !== null)
    }
    try {
      if (p.prefill === null) {
        this.fleet.submit(p.decode, base, { at: req.at, onFirstToken: () => p.firstToken?.(), onFinish: done })
      } else if (p.flow === 'bootstrap') {
        this.fleet.submitBootstrap(p.prefill, p.decode, base, { at: req.at, onPrefillDone: () => p.prefillDone?.(), onFirstToken: () => p.firstToken?.(), onFinish: done })
      } else {
        this.nixl(p, base, req.at, done)
      }
    } catch (err) {
      // The engine refuses what vLLM would answer 400 to (prompt + output over the context).
      if (!(err instanceof RangeError)) throw err
      p.finish()
      this.stats.rejected++
    }
  }

  /** vLLM's NixlConnector flow: the decode leg is sent when the prefill leg answered with its parameters. */
  private nixl(p: PdPlacement, req: { prepared: PreparedRequest['prompt']; maxTokens?: number }, at: number, done: (r: VirtualResult | PdResult) => void): void {
    this.fleet.submitPrefill(p.prefill!, req, {
      at,
      onDone: (h, t) => {
        p.prefillDone?.()
        if (h.state !== 'held') {
          // The prefill did not finish (not in these runs: no faults): counted as failed.
          p.finish()
          this.stats.failed++
          return
        }
        this.fleet.submitDecode(p.decode, req, h, { at: t, onFirstToken: () => p.firstToken?.(), onFinish: done })
      },
    })
  }

  drain(): void {
    this.fleet.run()
  }

  close(): void {
    this.router.close()
    for (const e of this.fleet.engines) e.close()
  }
}
