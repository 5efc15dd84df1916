// A discovery source from its configuration.
import { DnsSource } from './dns.js'
import { FileSource } from './file.js'
import { InferencePoolSource } from './inference-pool.js'
import { KubernetesSource } from './kubernetes.js'
import { requireFeature } from '../../core/optional-packages.js'
import type { DiscoverySourceConfig } from '../../config/discovery.js'
import type { DiscoverySource } from './source.js'

export function createSource(cfg: DiscoverySourceConfig): DiscoverySource {
  switch (cfg.type) {
    case 'file':
      return new FileSource(cfg)
    case 'dns':
      return new DnsSource(cfg)
    case 'kubernetes':
      return new KubernetesSource(cfg)
    case 'inferencePool':
      return new InferencePoolSource(cfg)
  }
}

/**
 * Throws MissingPackageError when a source needs an optional package that is not installed:
 * asked before the sources start, since a running source's failures are only logged.
 */
export function requireSourcePackages(sources: readonly DiscoverySourceConfig[]): void {
  if (sources.some((s) => s.type === 'kubernetes' || s.type === 'inferencePool')) requireFeature('kubernetes')
}
