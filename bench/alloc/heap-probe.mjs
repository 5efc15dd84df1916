// Preloaded (node --import) into the process bench/alloc-sites.bench.ts looks into: on the
// parent's 'start' it starts V8's sampling heap profiler (objects later collected included,
// as every request's are), on 'stop' it answers with the profile.
import { Session } from 'node:inspector/promises'
const session = new Session()
session.connect()
process.on('message', async (m) => {
  if (m === 'start') {
    await session.post('HeapProfiler.enable')
    await session.post('HeapProfiler.startSampling', { samplingInterval: 256, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true })
    process.send('started')
  } else if (m === 'stop') {
    const { profile } = await session.post('HeapProfiler.stopSampling')
    process.send({ profile })
  }
})
