// The simulator's public surface: live workers (startSimFleet, SimWorker) and the
// virtual-time engine (VirtualFleet, or SimEngine on a clock of your own).
export { startSimFleet, type SimFleet, type SimFleetOptions } from './fleet.js'
export { SimWorker, type SimWorkerOptions, type SimKvEventsOptions } from './http-worker.js'
export type { KvEventPublisher, KvEventPublisherOptions, KvPublishFaults } from './kv-publisher.js'
export {
  VirtualFleet,
  PrefillHandle,
  type VirtualFleetOptions,
  type VirtualRequest,
  type VirtualResult,
  type SubmitOptions,
  type PdResult,
  type PdLegs,
  type PrefillState,
  type PrefillOptions,
  type DecodeOptions,
  type BootstrapOptions,
} from './virtual-fleet.js'
export {
  transferMs,
  KV_LOAD_FAILURE_POLICIES,
  type KvTransferConfig,
  type KvLoadFailurePolicy,
  type RemoteKvSource,
} from './kv-transfer.js'
export { readKvLeg, prefillAnswer, type KvTransferParams, type KvLeg } from './kv-params.js'
export { KvHolds, type KvHold, type HoldEnd } from './kv-holds.js'
export { SimEngine, engineConfig, type EngineConfig, type KvEventListener } from './engine.js'
export { KvEventLog } from './kv-event-log.js'
export { RealClock, VirtualClock, type Clock, type TimerHandle } from './clock.js'
export { KvCache } from './kv-cache.js'
export { LatencyModel, type LatencyParams } from './latency-model.js'
export { PROFILES, DEFAULT_PROFILE, LLAMA_3_1_70B_P5, TINY, type Profile, type CalibrationPoint } from './profiles.js'
export { resolveSim, SIM_LIMITS, type SimOptions, type ResolvedSim } from './config.js'
export { NO_FAULTS, parseFaults, type FaultConfig } from './faults.js'
export { renderMetrics } from './metrics.js'
export { renderChat, type ChatMessage } from '../tokens/chatml.js'
export { cacheSeed, hashBlocks, blockKey, preparePrompt, type PreparedPrompt } from './block-hash.js'
export { BYTES_PER_TOKEN, tokenCount, tokenIdsOf, encodeTokenIds, fillerText } from './tokenizer.js'
export { TOKENIZERS, DEFAULT_TOKENIZER, getTokenizer, type Tokenizer, type TokenizerName } from './tokenizers/index.js'
export { Sequence, type SeqListener, type EngineRequest, type FinishReason } from './sequence.js'
