// Preloaded (node --import) into a process whose CPU time bench/profile.bench.ts breaks down.
// On the parent's 'start' it starts V8's sampling CPU profiler (through node:inspector, in
// this process: no debugger port); on 'stop' it stops it and answers with the profile, so the
// profile holds the measured requests only, not the start-up or the warm-up.
import { Session } from 'node:inspector/promises'

const session = new Session()
session.connect()

process.on('message', async (m) => {
  if (m === 'start') {
    await session.post('Profiler.enable')
    // 100 µs between samples: a request costs a few hundred, so each gets a few samples.
    await session.post('Profiler.setSamplingInterval', { interval: 100 })
    await session.post('Profiler.start')
    process.send('started')
  } else if (m === 'stop') {
    const { profile } = await session.post('Profiler.stop')
    process.send({ profile })
  }
})
