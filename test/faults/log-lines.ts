// A pino logger whose JSON lines a test can read back, to check what an operator would see.
import { Writable } from 'node:stream'
import { pino, type Logger } from 'pino'

export function capturedLog(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = []
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>)
      cb()
    },
  })
  return { logger: pino({ level: 'info' }, sink), lines }
}
