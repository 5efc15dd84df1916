// Progress on stderr while a replay runs: a bar redrawn in place on a terminal (at most
// ten times a second), otherwise a plain line every few seconds of wall time, so logs of
// a CI run stay readable.
import { formatDuration } from './duration.js'

export class Progress {
  private readonly started = performance.now()
  private lastDraw = -Infinity
  private drawn = false

  constructor(
    private readonly out: NodeJS.WritableStream & { isTTY?: boolean; columns?: number },
    private readonly totalMs: number,
    private readonly label: string,
    private readonly lineEveryMs = 5000,
  ) {}

  update(simMs: number, requests: number): void {
    const now = performance.now()
    const tty = this.out.isTTY === true
    if (now - this.lastDraw < (tty ? 100 : this.lineEveryMs)) return
    this.lastDraw = now
    const frac = this.totalMs > 0 ? Math.min(1, simMs / this.totalMs) : 1
    const pct = `${Math.floor(frac * 100)}%`.padStart(4)
    const tail = `${formatDuration(simMs)}/${formatDuration(this.totalMs)} simulated, ${requests.toLocaleString('en-US')} requests, ${((now - this.started) / 1000).toFixed(1)} s`
    if (tty) {
      const width = 24
      const full = Math.round(frac * width)
      const bar = `${'█'.repeat(full)}${'░'.repeat(width - full)}`
      this.out.write(`\r\x1b[K${this.label} ${bar} ${pct} ${tail}`)
      this.drawn = true
    } else {
      this.out.write(`${this.label}: ${pct.trim()} ${tail}\n`)
    }
  }

  done(): void {
    if (this.drawn) this.out.write('\r\x1b[K')
    this.drawn = false
  }
}
