// vLLM's KV-cache events, router side: the decoded shapes, the msgpack codec, the ZeroMQ
// framing and the subscriber that follows one engine's stream.
export * from './types.js'
export { decodeBatch, encodeBatch, KvEventDecodeError, type DecodedBatch, type KvEventDecodeErrorCode } from './codec.js'
export { END_OF_REPLAY, readSeq, seqFrame, tcpEndpoint } from './frames.js'
export {
  KvEventSubscriber,
  type KvEventLogger,
  type KvEventSubscriberOptions,
  type KvEventSubscriberStatus,
  type KvEventTarget,
} from './subscriber.js'
