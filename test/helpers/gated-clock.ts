// Test clocks for the simulator's live workers.
import { RealClock, type Clock, type TimerHandle } from '../../src/sim/index.js'

/**
 * A real clock whose events are held back until open() is called: the engines it drives
 * accept requests and send stream headers, but produce no token before then.
 */
export class GatedClock implements Clock {
  private readonly inner = new RealClock()
  private held: { handle: TimerHandle; fn: (at: number) => void }[] | null = []
  private readonly forwarded = new WeakMap<TimerHandle, TimerHandle>()

  now(): number {
    return this.inner.now()
  }

  schedule(at: number, fn: (at: number) => void): TimerHandle {
    if (this.held === null) return this.inner.schedule(at, fn)
    const handle = { at }
    this.held.push({ handle, fn })
    return handle
  }

  cancel(handle: TimerHandle): void {
    const i = this.held?.findIndex((h) => h.handle === handle) ?? -1
    if (i >= 0) this.held!.splice(i, 1)
    else this.inner.cancel(this.forwarded.get(handle) ?? handle)
  }

  open(): void {
    for (const { handle, fn } of this.held ?? []) this.forwarded.set(handle, this.inner.schedule(handle.at, fn))
    this.held = null
  }
}
