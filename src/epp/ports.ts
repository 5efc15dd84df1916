// The reference endpoint picker's ports, the picker's defaults: here, apart from the server,
// so that the command's flags read them without loading gRPC.

/** The reference endpoint picker's gRPC port. */
export const DEFAULT_GRPC_PORT = 9002
/** The reference endpoint picker's plaintext health port (beside its TLS gRPC port). */
export const DEFAULT_HEALTH_PORT = 9003
