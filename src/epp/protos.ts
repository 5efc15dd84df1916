// The protocols the endpoint picker speaks: Envoy's ext_proc v3 (from the copy of Envoy's API
// that @grpc/grpc-js-xds vendors) and grpc.health.v1 (proto/health.proto, ours: no package in
// the tree ships it). Both loaded once, with the options grpc-js's proto-loader users expect:
// field names as in the .proto files, 64-bit integers as strings, enums as their names,
// defaults filled in and the set member of a oneof named.
//
// That Envoy copy predates FULL_DUPLEX_STREAMED, the body mode the Gateway API inference
// extension requires (BodySendMode value 4), and BodyMutation's `streamed_response` (field 3,
// StreamedBodyResponse { bytes body = 1; bool end_of_stream = 2; }), which is how an ext_proc
// server hands a body back in that mode. A .proto of our own cannot add a member to a oneof of
// a message defined elsewhere (proto3 has no extensions), and a patched copy of Envoy's file
// would drift from the one shipped; so the files are parsed into a protobufjs Root as they are,
// the three definitions are added to it here with upstream Envoy's numbers, and proto-loader
// builds its package definition from that Root.
import { accessSync, constants } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, isAbsolute, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import protobuf from 'protobufjs'

const require = createRequire(import.meta.url)

/** The include directories of the Envoy API copy in @grpc/grpc-js-xds. */
export function envoyIncludeDirs(): string[] {
  const deps = join(dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps')
  return ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((d) => join(deps, d))
}

const EXT_PROC = 'envoy/service/ext_proc/v3/external_processor.proto'

/** proto/health.proto next to this module (src/epp) or, from dist/epp, in the package's src/epp. */
function healthProto(): string {
  const here = dirname(fileURLToPath(import.meta.url))
  const candidates = [join(here, 'proto/health.proto'), join(here, '../../src/epp/proto/health.proto')]
  for (const c of candidates) {
    try {
      accessSync(c, constants.R_OK)
      return c
    } catch {
      // the next one
    }
  }
  return candidates[0]!
}

export const LOADER_OPTIONS: protoLoader.Options = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true }

function rootFrom(files: string[], includeDirs: string[]): protobuf.Root {
  const root = new protobuf.Root()
  const original = root.resolvePath.bind(root)
  root.resolvePath = (origin, target) => {
    if (isAbsolute(target)) return target
    for (const d of includeDirs) {
      const p = join(d, target)
      try {
        accessSync(p, constants.R_OK)
        return p
      } catch {
        // the next one
      }
    }
    return original(origin, target)
  }
  return root.loadSync(files, { keepCase: true })
}

/** Adds what the vendored Envoy API lacks (see the top of this file), with upstream Envoy's numbers. */
export function addFullDuplex(root: protobuf.Root): void {
  const pkg = root.lookup('envoy.service.ext_proc.v3') as protobuf.Namespace
  const streamed = new protobuf.Type('StreamedBodyResponse').add(new protobuf.Field('body', 1, 'bytes')).add(new protobuf.Field('end_of_stream', 2, 'bool'))
  pkg.add(streamed)
  const mutation = root.lookupType('envoy.service.ext_proc.v3.BodyMutation')
  const field = new protobuf.Field('streamed_response', 3, 'StreamedBodyResponse')
  mutation.add(field)
  mutation.oneofs.mutation!.add(field)
  const mode = root.lookupEnum('envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode')
  mode.add('FULL_DUPLEX_STREAMED', 4)
}

let loaded: { root: protobuf.Root; grpc: grpc.GrpcObject } | undefined

/** The ext_proc and health protos, loaded and extended once. */
export function protos(): { root: protobuf.Root; grpc: grpc.GrpcObject } {
  if (loaded !== undefined) return loaded
  const root = rootFrom([EXT_PROC, healthProto()], envoyIncludeDirs())
  addFullDuplex(root)
  root.resolveAll()
  // proto-loader builds its definition from the extended Root (as JSON, which keeps the names as loaded).
  const def = protoLoader.fromJSON(root.toJSON(), LOADER_OPTIONS)
  loaded = { root, grpc: grpc.loadPackageDefinition(def) }
  return loaded
}

type Ctor = grpc.ServiceClientConstructor

function lookup(obj: grpc.GrpcObject, path: string): Ctor {
  let o: unknown = obj
  for (const p of path.split('.')) o = (o as Record<string, unknown>)[p]
  return o as Ctor
}

/** The ExternalProcessor service's client constructor (its .service is the server definition). */
export const externalProcessor = (): Ctor => lookup(protos().grpc, 'envoy.service.ext_proc.v3.ExternalProcessor')
export const healthService = (): Ctor => lookup(protos().grpc, 'grpc.health.v1.Health')

export const EXT_PROC_SERVICE = 'envoy.service.ext_proc.v3.ExternalProcessor'
