// The logger of a running router (serve, epp): pino on serve's batched stdout, its lines as
// JSON (the default, for log shippers) or, with --log-format pretty, rewritten for a person.
import { pino, type Logger } from 'pino'
import type { Config } from '../config/config.js'
import { logDestination } from './access-log.js'
import { prettyDestination } from './pretty-log.js'

export function routerLogger(log: Config['log']): Logger {
  const out = logDestination()
  return pino({ level: log.level }, log.format === 'pretty' ? prettyDestination(out) : out)
}
