// The scheduler: a request's routing as a profile run over a fleet's picker. A fleet that
// disaggregates runs `pd`; any other runs `single`. A new profile is one file in profiles/ and
// one line here.
import type { LegPicker, RequestView, Schedule } from './types.js'
import { single } from './profiles/single.js'
import { pd, type PdOptions } from './profiles/pd.js'

export function schedule<I>(picker: LegPicker<I>, view: RequestView, o: PdOptions): Schedule<I> {
  return picker.disaggregated ? pd(picker, view, o) : single(picker, view)
}

/** The chosen instances' leases, each released once (a request that ends before any leg ran). */
export function releaseSchedule<I>(s: Schedule<I>): void {
  if (s.profile === 'single') s.target.lease.release()
  else {
    s.prefill.lease.release()
    s.decode.lease.release()
  }
}
