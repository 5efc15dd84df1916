// How forward() tells a client that an answer already under way broke off. An event stream
// from the instance gets an SSE error event; a response that frames the answer itself (the
// SageMaker event stream) says so in its own framing, through this interface.
import type { Res } from './types.js'

export interface StreamFailure {
  message: string
  type: string
  /** The instance's stream broke, or went quiet past its deadline, or the router is shutting down. */
  code: 'upstream_stream_error' | 'upstream_timeout' | 'shutdown'
}

export interface FramedResponse extends Res {
  /** Ends the answer with the framing's own error, instead of an SSE event or a reset. */
  fail(failure: StreamFailure): void
}

export function isFramed(res: Res): res is FramedResponse {
  return typeof (res as Partial<FramedResponse>).fail === 'function'
}
