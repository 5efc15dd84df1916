// A port that cannot be opened is the operator's to fix, not a crash: one line saying which
// address, why, and which flag picks another, instead of Node's stack trace.
import type { Config } from '../config/config.js'
import { CliError } from './cli-error.js'

const WHY: Record<string, string> = {
  EADDRINUSE: 'address already in use',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'no such address on this machine',
}

/** The error for a failed listen() on the front or admin address, or undefined for any other error. */
export function listenError(err: unknown, config: Config): CliError | undefined {
  const e = err as NodeJS.ErrnoException & { address?: string; port?: number }
  if (e?.syscall !== 'listen' || e.code === undefined || !(e.code in WHY)) return undefined
  // The front listens first, and serve refuses one port for both, so a failure on the
  // admin's port (not the front's) is the admin's.
  const admin = e.port === config.admin.port && e.port !== config.listen.port
  const at = admin ? config.admin : config.listen
  const flag = e.code === 'EADDRNOTAVAIL' ? (admin ? '--admin-host' : '--host') : admin ? '--admin-port' : '--port'
  return new CliError(
    `cannot listen on ${at.host}:${at.port}${admin ? ' (admin)' : ''}: ${WHY[e.code]} (${e.code}); pick another with ${flag}`,
    1,
  )
}
