// Preloaded into the picker by bench/epp.bench.ts (node --import): times, inside the picker's
// process, each stream from its request-body message arriving (the last chunk, deserialized,
// emitted to the picker's listener) to the header-mutation response leaving (handed to
// grpc-js's write, before it is serialized). Nothing in src/ changes: grpc-js's Server is
// wrapped where the ext_proc service is added.
// SIGUSR2: writes {count, p50, p99, p999} in µs to $EPP_TIMING_FILE and starts afresh.
import { writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import * as hdr from 'hdr-histogram-js'

const require = createRequire(import.meta.url)
const grpc = require('@grpc/grpc-js')
const fresh = () => hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 })
let h = fresh()

const addService = grpc.Server.prototype.addService
grpc.Server.prototype.addService = function (service, impl) {
  if (typeof impl.Process !== 'function') return addService.call(this, service, impl)
  const process_ = impl.Process
  return addService.call(this, service, {
    ...impl,
    Process(call) {
      let arrived = 0n
      const emit = call.emit
      call.emit = function (ev, m, ...rest) {
        if (ev === 'data' && m?.request === 'request_body' && m.request_body?.end_of_stream) arrived = process.hrtime.bigint()
        return emit.call(this, ev, m, ...rest)
      }
      const write = call.write
      call.write = function (r, ...rest) {
        if (arrived !== 0n && (r?.request_headers?.response?.header_mutation || r?.request_body?.response?.header_mutation)) {
          h.recordValue(Math.max(1, Number(process.hrtime.bigint() - arrived) / 1000))
          arrived = 0n
        }
        return write.call(this, r, ...rest)
      }
      return process_.call(this, call)
    },
  })
}

process.on('SIGUSR2', () => {
  const out = { count: h.totalCount, p50: h.getValueAtPercentile(50), p99: h.getValueAtPercentile(99), p999: h.getValueAtPercentile(99.9) }
  h = fresh()
  if (process.env.EPP_TIMING_FILE) writeFileSync(process.env.EPP_TIMING_FILE, JSON.stringify(out))
})
