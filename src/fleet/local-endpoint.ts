// The in-process view: the endpoint as one process (or a `--workers` primary) has it, its
// owner writing the host set it picks from in the same memory. Passive signals from its
// traffic go straight to the owner.
import type { Config, EndpointConfig } from '../config/config.js'
import { Router } from '../core/router.js'
import { Endpoint, endpointLog } from './endpoint.js'
import type { EndpointEvents } from './endpoint-events.js'
import type { HostEntry } from './host-entry.js'
import { HostSet } from './host-set.js'
import type { Instance } from './instance.js'
import type { TryResult } from './outlier.js'
import { FleetOwner } from './owner.js'

export class LocalEndpoint extends Endpoint {
  readonly owner: FleetOwner

  constructor(config: Config, ep: EndpointConfig, events: EndpointEvents = {}) {
    const log = endpointLog(events, ep.name)
    const hosts = new HostSet()
    const owner = new FleetOwner(config, ep, hosts, log, events)
    const options = owner.routerOptions()
    super(config, ep, events, hosts, events.router?.(ep.name, options) ?? new Router(options), log)
    this.owner = owner
    owner.attach(this)
  }

  protected override pending(): Iterable<Instance> {
    return this.owner.joining()
  }

  protected override entries(): Iterable<readonly HostEntry[]> {
    return [...super.entries(), ...this.owner.discovered()]
  }

  sync(): void {
    this.owner.sync()
  }

  update(config: Config, ep: EndpointConfig): Instance[] {
    const blockSize = this.router.params.exactBlockSize
    this.owner.configure(config, ep)
    this.configure(config, ep)
    this.reloadExact(config, ep, blockSize)
    return this.owner.reload(config, ep) // the caller closes them once their requests have drained
  }

  recordTry(inst: Instance, result: TryResult): void {
    this.owner.recordTry(inst, result)
  }

  markDown(inst: Instance, reason: string): void {
    this.owner.markDown(inst, reason)
  }

  async close(): Promise<void> {
    await this.owner.close()
    await this.closeView(this.owner.held())
  }
}

/** One process, or a `--workers` primary: the endpoint's owner and its view in the same memory. */
export const localEndpoint = (config: Config, ep: EndpointConfig, events: EndpointEvents): Endpoint => new LocalEndpoint(config, ep, events)
