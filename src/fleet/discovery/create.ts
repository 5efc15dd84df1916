// A discovery source from its configuration.
import { DnsSource } from './dns.js'
import { FileSource } from './file.js'
import { InferencePoolSource } from './inference-pool.js'
import { KubernetesSource } from './kubernetes.js'
import type { DiscoverySourceConfig } from './schema.js'
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
