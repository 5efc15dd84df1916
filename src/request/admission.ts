// The checks a proxied request passes before its body is read, the same behind either front
// (serve's handler and the endpoint picker's exchange), so that a request refused by one is
// refused by the other with the same status, code and words.
import { echo } from '../core/echo.js'
import { methodNotAllowed, notFound, tooLarge } from './errors.js'
import type { Matched } from './routes.js'

/** The method the route takes, or 405 naming it (Allow). */
export function checkMethod(m: Matched, method: string | undefined): void {
  if (method !== m.method) throw methodNotAllowed(m.method)
}

/** The endpoint a request names (the first one when it names none), or 404 endpoint_not_found. */
export function endpointOf<E>(fleet: { endpoint(name: string | undefined): E | undefined }, name: string | undefined): E {
  const ep = fleet.endpoint(name)
  if (ep === undefined) throw notFound('endpoint_not_found', `no endpoint named '${echo(name ?? 'default')}'`)
  return ep
}

/** A body whose Content-Length is over the limit is refused (413) before any of it is read. */
export function checkDeclaredLength(contentLength: string | undefined, limit: number): void {
  if (contentLength !== undefined && Number(contentLength) > limit) throw tooLarge(limit)
}
