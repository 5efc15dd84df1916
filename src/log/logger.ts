// The logger of a running router (serve, epp): pino on serve's batched stdout, its lines as
// JSON (the default, for log shippers) or, with --log-format pretty, rewritten for a person.
import { pino, type DestinationStream, type Logger } from 'pino'
import type { Config } from '../config/config.js'
import { BatchedLog } from './batched-log.js'
import * as line from './log-line.js'
import { prettyDestination } from './pretty-log.js'

export function routerLogger(log: Config['log']): Logger {
  const out = logDestination()
  return pino({ level: log.level }, log.format === 'pretty' ? prettyDestination(out) : out)
}

/**
 * stdout for serve's log lines, written in batches (batched-log.ts). pino's default writes
 * each line on its own through libuv's thread pool (a thread hop and a wake-up of the loop for
 * every line), which cost more CPU than the rest of the access log at a thousand requests a
 * second: batches of LOG_BATCH_BYTES, or what is there every LOG_FLUSH_MS, make that one write
 * for a dozen lines. One for the process: every server in it writes to the same stdout.
 */
export function logDestination(): DestinationStream {
  return (stdout ??= batched(1))
}
let stdout: DestinationStream | undefined

/**
 * A batching pino destination on `dest` (a file descriptor or path). The batch is kept as
 * buffers, one per line: kept as one string, every line measured the bytes of the whole batch
 * so far, which made V8 flatten it anew each time (about 2 KiB allocated per line).
 */
export function batched(dest: number | string): BatchedLog & DestinationStream {
  // The access log's lines come as bytes, which the batch keeps as they are.
  return Object.assign(new BatchedLog(dest), { [line.WRITES_BYTES]: true })
}
