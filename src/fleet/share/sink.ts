// Where the sum of the other replicas' queued prefill goes, per endpoint and instance. Serve
// wires it into the router together with the engines' reported load (both are load beyond this
// router's own leases, given to Router.setEngineLoad as one figure); this module only says
// what the figure is.
import type { Router } from '../../core/router.js'

export interface SharedLoadSink {
  /** The other replicas' queued prefill at `instance` of `endpoint`, in the router's blocks (0: none). */
  setSharedPrefill(endpoint: string, instance: string, blocks: number): void
}

/** No sink: the figures are kept (for /admin/replicas) and not given to any router. */
export const NO_SINK: SharedLoadSink = { setSharedPrefill: () => undefined }

/**
 * For tests and benchmarks only: writes each figure straight to the endpoint's router as
 * `setEngineLoad(id, 0, blocks)`. It overwrites whatever in-flight figure an engine-load
 * scraper set there, which is why serve does not use it.
 */
export function routerSink(routerOf: (endpoint: string) => Pick<Router, 'setEngineLoad'> | undefined): SharedLoadSink {
  return {
    setSharedPrefill(endpoint, instance, blocks) {
      routerOf(endpoint)?.setEngineLoad(instance, 0, blocks)
    },
  }
}
