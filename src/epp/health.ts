// grpc.health.v1.Health as the endpoint picker protocol asks for it: `liveness` (and "") is
// the process answering; `readiness` and the ext_proc service are whether a request would get
// an instance now (one ready instance at least, and not draining).
import { status as grpcStatus, type ServerUnaryCall, type ServerWritableStream, type sendUnaryData, type UntypedServiceImplementation } from '@grpc/grpc-js'
import { EXT_PROC_SERVICE } from './protos.js'

export type ServingStatus = 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN'

export interface HealthSource {
  /** Whether a request would be picked an instance now. */
  ready(): boolean
}

/** The status of `service`, as Check and Watch report it. */
export function servingStatus(src: HealthSource, service: string): ServingStatus {
  if (service === '' || service === 'liveness') return 'SERVING'
  if (service === 'readiness' || service === EXT_PROC_SERVICE) return src.ready() ? 'SERVING' : 'NOT_SERVING'
  return 'SERVICE_UNKNOWN'
}

/** How often Watch looks for a change of status to report. */
export const WATCH_INTERVAL_MS = 500

interface Request {
  service?: string
}

export function healthImplementation(src: HealthSource, watchers: Set<() => void>): UntypedServiceImplementation {
  return {
    Check(call: ServerUnaryCall<Request, unknown>, cb: sendUnaryData<unknown>) {
      const s = servingStatus(src, call.request.service ?? '')
      // The health-checking protocol: an unknown service is NOT_FOUND for Check.
      if (s === 'SERVICE_UNKNOWN') return cb({ code: grpcStatus.NOT_FOUND, details: `unknown service '${call.request.service ?? ''}'` })
      cb(null, { status: s })
    },
    Watch(call: ServerWritableStream<Request, unknown>) {
      const service = call.request.service ?? ''
      let last: ServingStatus | undefined
      const report = () => {
        const s = servingStatus(src, service)
        if (s !== last) call.write({ status: (last = s) })
      }
      report()
      const t = setInterval(report, WATCH_INTERVAL_MS)
      t.unref()
      const stop = () => {
        clearInterval(t)
        watchers.delete(stop)
        if (!call.writableEnded) call.end()
      }
      watchers.add(stop)
      call.on('cancelled', stop)
      call.on('error', stop)
      call.on('close', stop)
    },
  }
}
