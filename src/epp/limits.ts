// The picker's bounds on what a gateway connection may hold open: here, apart from the server,
// so that the command's flags read them without loading gRPC.

/**
 * Streams open at once on one gateway connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
 * Node's own default is 2^32-1: a peer could open 20,000 streams on one connection and have
 * each held. A gateway that needs more requests in flight opens another connection (Envoy's
 * HTTP/2 pool does, on the limit the server advertises); a peer that ignores the limit has its
 * extra streams refused (RST_STREAM REFUSED_STREAM), and nghttp2 ends a connection that keeps
 * trying.
 */
export const DEFAULT_MAX_STREAMS = 256
/** The highest --grpc-max-streams taken. */
export const MAX_STREAMS_LIMIT = 65_536
