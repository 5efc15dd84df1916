// The picker's own side of ExternalProcessor/Process on the wire. proto-loader's codec turns
// every decoded message into a plain object with every default filled in (toObject) and every
// answer back into a message (fromObject) before protobufjs encodes it: for the ten or so
// messages of a request that was the largest part of the picker's CPU and of its garbage. Here
// requests are protobufjs's decoded messages as they are (the same snake_case fields, the set
// oneof member named by its getter, absent fields read from the prototype's defaults, bytes as
// views into the received message), answers are encoded straight from the plain objects the
// picker builds, and an answer that is always the same is encoded once.
import type { ServiceDefinition } from '@grpc/grpc-js'
import type protobuf from 'protobufjs'
import type { ProcessingRequest, ProcessingResponse } from './message-types.js'
import { EXT_PROC_SERVICE, externalProcessor, protos } from './protos.js'

/** An answer encoded once (continueResponse's), handed to grpc-js as its bytes. */
export class Encoded {
  constructor(readonly bytes: Uint8Array) {}
}

let codec: { req: protobuf.Type; res: protobuf.Type } | undefined
const PKG = EXT_PROC_SERVICE.slice(0, EXT_PROC_SERVICE.lastIndexOf('.'))
const types = () => (codec ??= { req: protos().root.lookupType(`${PKG}.ProcessingRequest`), res: protos().root.lookupType(`${PKG}.ProcessingResponse`) })

/** A ProcessingResponse (as the picker builds it) encoded now: a Buffer (protobufjs's writer on Node), not copied again. */
export function encodeResponse(r: ProcessingResponse | Encoded): Buffer {
  const b = r instanceof Encoded ? r.bytes : types().res.encode(r).finish()
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength)
}

/** A ProcessingRequest's bytes decoded into the message the picker reads. */
export function decodeRequest(bytes: Uint8Array): ProcessingRequest {
  return types().req.decode(bytes) as unknown as ProcessingRequest
}

/** The ExternalProcessor service as the picker serves it: proto-loader's, with the codec above on Process. */
export function externalProcessorServer(): ServiceDefinition {
  const def = externalProcessor().service
  return {
    ...def,
    Process: {
      ...def.Process!,
      requestDeserialize: decodeRequest,
      responseSerialize: encodeResponse,
    },
  } as ServiceDefinition
}
