// Preloaded (node --import) into a process whose allocations bench/alloc.bench.ts counts. On
// the parent's 'start' it notes the V8 heap in use and starts a GC profile; on 'stop' it
// answers with the bytes allocated since. Between two collections the used heap only grows by
// allocation, and each collection reports the heap just before it and just after it, so
//   allocated = Σ (used before GC i − used after GC i−1) + (used now − used after the last GC)
// with "after GC −1" the heap in use at 'start'. Exact to the allocation buffer's granularity
// (kilobytes, against megabytes counted), whatever the GC does in between.
import v8 from 'node:v8'

let profiler
let usedAtStart = 0

process.on('message', (m) => {
  if (m === 'start') {
    usedAtStart = v8.getHeapStatistics().used_heap_size
    profiler = new v8.GCProfiler()
    profiler.start()
    process.send('started')
  } else if (m === 'stop') {
    const { statistics } = profiler.stop()
    const usedNow = v8.getHeapStatistics().used_heap_size
    let bytes = 0
    let after = usedAtStart
    for (const gc of statistics) {
      bytes += gc.beforeGC.heapStatistics.usedHeapSize - after
      after = gc.afterGC.heapStatistics.usedHeapSize
    }
    bytes += usedNow - after
    process.send({ bytes, gcs: statistics.length })
  }
})
