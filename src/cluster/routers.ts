// Where each endpoint's routing state lives when several processes route: created by the
// primary in shared memory, attached by every worker, so that in-flight counts and
// overflow decisions are one fleet-wide.
import type { RouterOptions } from '../core/options.js'
import { Router } from '../core/router.js'

/** The primary's router for an endpoint: the one that publishes membership and parameters. */
export function createShared(options: RouterOptions): Router {
  return new Router({ ...options, shared: true })
}

/**
 * A worker's router for an endpoint: the primary's state when it has a path, else one of
 * the worker's own that it keeps in step with the membership the primary sends.
 */
export function workerRouter(path: string | undefined, options: RouterOptions): Router {
  return path === undefined ? new Router(options) : Router.attach(path)
}
