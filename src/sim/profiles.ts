// Latency and capacity profiles. Each is a set of coefficients for latency-model.ts plus
// the engine limits vLLM would run with, and the published numbers it is calibrated to.
import { DEFAULT_BOOTSTRAP_TIMEOUT_MS, DEFAULT_KV_LEASE_MS, type KvTransferConfig } from './kv-transfer.js'
import type { LatencyParams } from './latency-model.js'

export interface CalibrationPoint {
  promptTokens: number
  cachedTokens: number
  ttftMs: number
  source: string
}

/** What moving this model's KV between two instances costs (kv-transfer.ts), and where the numbers come from. */
export interface KvTransferProfile {
  bytesPerToken: number
  linkBytesPerSec: number
  latencyMs: number
  tpSize: number
  sources: readonly string[]
}

export interface Profile {
  name: string
  description: string
  model: string
  latency: LatencyParams
  kvTransfer: KvTransferProfile
  kvBlocks: number
  blockSize: number
  maxNumSeqs: number
  maxNumBatchedTokens: number
  maxModelLen: number
  /** Output length when a request sets no max_tokens (it then finishes with "stop"). */
  outputTokens: number
  calibration: readonly CalibrationPoint[]
}

const SAGEMAKER =
  'AWS, prefix-aware routing for Amazon SageMaker AI real-time endpoints (2025): ' +
  'Llama 3.1 70B Instruct on ml.p5.48xlarge with vLLM, 8,000-token prompts, TTFT 63-280 ms'

// Llama 3.1 70B Instruct, tensor-parallel over the 8 H100s of an ml.p5.48xlarge, vLLM v1.
//
// Published targets (SAGEMAKER above): at low load an 8,000-token prompt has TTFT ~280 ms
// when nothing is cached and ~63 ms when the whole prompt is cached; decode 20-30 ms/token.
// Solving the model for them:
// - decode floor: one step for one sequence is stepBaseMs = 22 ms; a batch of 64 adds
//   64 * 0.1 ms plus attention over its context, ~29 ms at 500-token contexts, so
//   inter-token latency stays in the published 20-30 ms band up to moderate batches;
// - attention: decode reads each cached token's K and V, 80 layers * 8 KV heads * 128 dims
//   * 2 * 2 bytes = 327 KB per token, at ~27 TB/s aggregate HBM bandwidth = ~0.012 us per
//   token per step; we use 0.02 us (contextMsPerToken = 2e-5) to cover kernel overheads;
// - fully cached 8,000 tokens: vLLM recomputes the last block (16 tokens) to get logits,
//   so the engine spends 22 + 16 * 0.02725 + 7984 * 2e-5 = 22.6 ms; the remaining ~40 ms of
//   the published 63 ms is per-request work outside the engine loop (HTTP, chat template,
//   tokenizing 32 KB, detokenizing): requestOverheadMs 20 + 0.0025 ms per prompt token;
// - uncached 8,000 tokens: 280 = 40 (overhead) + 22 (step floor) + 8000 * prefillMsPerToken,
//   so prefillMsPerToken = 0.02725 ms (~37k prompt tokens/s, one 8,000-token chunk fits the
//   8,192-token step budget).
// Capacity: 8 x 80 GB at gpu_memory_utilization 0.9 minus 141 GB of bf16 weights leaves
// ~430 GB of KV at 327 KB/token, ~1.3 M tokens: 80,000 blocks of 16.
//
// KV transfer between two such instances (prefill/decode disaggregation, NixlConnector over
// RDMA): 327,680 bytes a token (80 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes, bf16)
// over a link that vLLM's transfers reach at 12 GB/s. A p5.48xlarge has 3,200 Gb/s of EFA
// (400 GB/s), and NIXL's UCX backend reaches 99% of a 400 Gb/s rail in nixlbench with 1-8 MB
// descriptors, but vLLM reads 16-token blocks (4 KiB per layer and rank at TP8), and what
// its NixlConnector was measured to move between two p5.48xlarge over EFA is 10-12 GB/s; we
// take 12. Plus 1 ms per transfer (posting the read, the completion notification). An
// 8,000-token prompt then moves in ~220 ms, as long as its prefill: set --kv-link-gb-per-sec
// for a better-tuned fabric.
const P5_KV_SOURCES = [
  'AWS p5.48xlarge: 3,200 Gbps of EFA networking (400 GB/s) between instances',
  'llm-d, "Networking for Distributed Inference in llm-d" (2026): nixlbench, UCX over 400 Gb/s InfiniBand: ~49.5 GB/s per rail (99% of line rate)',
  'anyscale/ray-serve-llm-perf-examples, prefill_decode/experiments: vLLM NixlConnector + UCX (SRD) over EFA between two p5.48xlarge: 10-12 GB/s cross-node',
  'kvcache-ai/Mooncake, vLLM v1 PD performance: 0.54 ms for the smallest (20 MB) transfer, so ~1 ms fixed cost per transfer',
]

export const LLAMA_3_1_70B_P5: Profile = {
  name: 'llama-3.1-70b-p5',
  description: 'Llama 3.1 70B Instruct on ml.p5.48xlarge (8x H100, TP8) with vLLM, calibrated to SageMaker numbers',
  model: 'meta-llama/Llama-3.1-70B-Instruct',
  latency: {
    stepBaseMs: 22,
    prefillMsPerToken: 0.02725,
    decodeMsPerSeq: 0.1,
    contextMsPerToken: 0.00002,
    requestOverheadMs: 20,
    overheadMsPerPromptToken: 0.0025,
  },
  kvTransfer: { bytesPerToken: 327_680, linkBytesPerSec: 12e9, latencyMs: 1, tpSize: 8, sources: P5_KV_SOURCES },
  kvBlocks: 80_000,
  blockSize: 16,
  maxNumSeqs: 256,
  maxNumBatchedTokens: 8192,
  maxModelLen: 131_072,
  outputTokens: 64,
  calibration: [
    { promptTokens: 8000, cachedTokens: 0, ttftMs: 280, source: SAGEMAKER },
    { promptTokens: 8000, cachedTokens: 8000, ttftMs: 63, source: SAGEMAKER },
  ],
}

// Fast enough for unit tests, with the same shape: a 2,000-token prompt has TTFT ~23 ms
// uncached and ~3 ms cached, decode 2 ms/token; small enough a pool to evict in tests.
export const TINY: Profile = {
  name: 'tiny',
  description: 'fast profile for tests: 2 ms steps, 0.01 ms per prefill token',
  model: 'sim-tiny',
  latency: {
    stepBaseMs: 2,
    prefillMsPerToken: 0.01,
    decodeMsPerSeq: 0.02,
    contextMsPerToken: 0,
    requestOverheadMs: 1,
    overheadMsPerPromptToken: 0,
  },
  // Small enough that a 2,000-token transfer takes ~1.3 ms, like a few steps.
  kvTransfer: { bytesPerToken: 4096, linkBytesPerSec: 10e9, latencyMs: 0.5, tpSize: 1, sources: [] },
  kvBlocks: 8192,
  blockSize: 16,
  maxNumSeqs: 64,
  maxNumBatchedTokens: 4096,
  maxModelLen: 32_768,
  outputTokens: 16,
  calibration: [],
}

/** The profile's transfer model with vLLM's and SGLang's defaults for leases and failures. */
export function kvTransferConfig(p: Profile): KvTransferConfig {
  const t = p.kvTransfer
  return {
    bytesPerToken: t.bytesPerToken,
    linkBytesPerSec: t.linkBytesPerSec,
    latencyMs: t.latencyMs,
    tpSize: t.tpSize,
    leaseMs: DEFAULT_KV_LEASE_MS,
    loadFailurePolicy: 'fail',
    bootstrapTimeoutMs: DEFAULT_BOOTSTRAP_TIMEOUT_MS,
  }
}

export const PROFILES: Readonly<Record<string, Profile>> = {
  [LLAMA_3_1_70B_P5.name]: LLAMA_3_1_70B_P5,
  [TINY.name]: TINY,
}

export const DEFAULT_PROFILE = LLAMA_3_1_70B_P5.name
