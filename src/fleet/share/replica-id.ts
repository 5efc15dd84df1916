// A replica's id when --replica-id is not given: the host, the process and a few random bytes,
// so that a replica restarted on the same host (same pid in a fresh container, say) is a new
// peer to the others and never inherits a dead one's place.
import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'

export function defaultReplicaId(): string {
  const host = hostname().replace(/[^\x21-\x7e]/g, '').slice(0, 96) || 'host'
  return `${host}-${process.pid}-${randomBytes(3).toString('hex')}`
}
