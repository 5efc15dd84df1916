import { bindingPath, native, type NativeBuildInfo } from './native.js'

export interface BuildInfo extends NativeBuildInfo {
  /** The binary in use: a local build or a committed prebuild. */
  binding: string
}

/** Which SIMD path XXH3 uses on this CPU, and the hash of the native sources the binary was built from. */
export function buildInfo(): BuildInfo {
  return { ...native.build_info(), binding: bindingPath }
}
