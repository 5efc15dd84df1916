// The fleet record: text the creator of a shared router publishes beside its membership, in
// the same shared memory (the cluster primary's record of each instance's address, models and
// health), which processes attached to it read. Written before the membership it describes.
import { InvalidArgTypeError } from './errors.js'
import { native, type NativeHandle } from './native.js'
import { checkInt } from './options.js'

export class FleetRecord {
  readonly #handle: () => NativeHandle
  readonly #writable: () => void

  /** Over its router's handle; `writable` throws for a router attached to another process's state. */
  constructor(handle: () => NativeHandle, writable: () => void) {
    this.#handle = handle
    this.#writable = writable
  }

  /** Publishes `text` (creator only: an attached router throws SharedRouterError ROUTER_READ_ONLY). */
  publish(text: string): void {
    const h = this.#handle()
    this.#writable()
    if (typeof text !== 'string') throw new InvalidArgTypeError('text', 'a string', text)
    native.router_set_fleet(h, text)
  }

  /** The record last published, unless its version is still `since` (0 before the first read). */
  read(since: number): { version: number; text: string } | undefined {
    checkInt('since', since, 0, Number.MAX_SAFE_INTEGER)
    return native.router_fleet(this.#handle(), since)
  }
}
