// Router replicas sharing their queued prefill through Redis (`serve --share-load`).
export { ShareLoadSchema, replicaIdSchema, SHARE_EXPIRE, SHARE_INTERVAL, SHARE_PREFIX_DEFAULT, type ShareLoadConfig } from '../../config/share-load.js'
export { decodeLoad, encodeBye, encodeLoad, leadingReplica, type Figures, type LoadMessage } from './message.js'
export { MAX_FIGURE, MAX_PEERS, PeerTable, type PeerReport } from './peers.js'
export { redactRedisUrl, redisUrlProblem } from '../../config/redis-url.js'
export { defaultReplicaId } from './replica-id.js'
export { ShareLoad, type LoadSource, type ShareLoadCounts, type ShareLoadOptions, type ShareLoadReport } from './share-load.js'
export { NO_SINK, routerSink, type SharedLoadSink } from './sink.js'
export { registerShareLoadMetrics } from './metrics.js'
