// ZeroMQ (an optional package) for the KV-event sockets, loaded when the first one opens.
import { createRequire } from 'node:module'
import { requireFeature } from '../../core/optional-packages.js'

type ZeroMq = typeof import('zeromq')
let zmq: ZeroMq | undefined

/**
 * ZeroMQ (an optional package), loaded when the first socket opens. Its CommonJS build is
 * required rather than imported because start() is synchronous, as the view's sync() is.
 */
export function zeromq(): ZeroMq {
  if (zmq === undefined) {
    requireFeature('kvEvents')
    zmq = createRequire(import.meta.url)('zeromq') as ZeroMq
  }
  return zmq
}
